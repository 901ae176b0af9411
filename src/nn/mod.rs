//! Neural-network layers and models. [`spec`] describes a model on the CPU (shapes, PyTorch
//! parameter names, default initialisation); [`params`] keeps
//! every parameter in flat GPU buffers, and [`network`] plans forward and backward on the GPU.

pub mod network;
pub mod params;
pub mod spec;

pub use spec::{Layer, LayerSpec, ModelSpec, ParamSpec, preset};
