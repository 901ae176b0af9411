//! webgpu-amp: mixed-precision (AMP) neural-network training on WebGPU.
//!
//! Module map (see `DESIGN.md` in the project's shared notes and README.md):
//! - [`gpu`]: device, capabilities, counting allocator, pipeline cache, readbacks
//! - [`shader`]: WGSL specialisation per storage and naga validation
//! - [`tensor`]: dtypes, storages and GPU tensors
//! - [`ops`]: one dispatcher per WGSL file, forward and backward together
//! - [`data`]: data sets (embedded MNIST, IDX, Fashion-MNIST, safetensors, synthetic), batching
//! - [`nn`]: model descriptions (presets, JSON), PyTorch parameter names and initialisation

pub mod data;
pub mod error;
pub mod gpu;
pub mod nn;
pub mod ops;
pub mod shader;
pub mod tensor;

pub use error::{Error, Result};
pub use gpu::{BackendChoice, F16Storage, F16StorageChoice, GpuContext, GpuOptions};
pub use tensor::{DType, Storage, Tensor};
