//! webgpu-amp: mixed-precision (AMP) neural-network training on WebGPU.
//!
//! Module map (see `DESIGN.md` in the project's shared notes and README.md):
//! - [`gpu`]: device, capabilities, counting allocator, pipeline cache, readbacks
//! - [`shader`]: WGSL specialisation per storage and naga validation
//! - [`tensor`]: dtypes, storages and GPU tensors
//! - [`ops`]: one dispatcher per WGSL file, forward and backward together
//! - [`amp`]: the GPU GradScaler and gradient clipping
//! - [`optim`]: fused SGD, Adam and AdamW

pub mod amp;
pub mod error;
pub mod gpu;
pub mod ops;
pub mod optim;
pub mod shader;
pub mod tensor;

pub use error::{Error, Result};
pub use gpu::{BackendChoice, F16Storage, F16StorageChoice, GpuContext, GpuOptions};
pub use tensor::{DType, Storage, Tensor};
