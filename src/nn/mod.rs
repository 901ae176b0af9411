//! Neural-network layers and models. [`spec`] describes a model on the CPU (shapes, PyTorch
//! parameter names, default initialisation); the GPU layers build on it.

pub mod spec;

pub use spec::{Layer, LayerSpec, ModelSpec, ParamSpec, preset};
