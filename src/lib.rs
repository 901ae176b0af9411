//! webgpu-amp: mixed-precision (AMP) neural-network training on WebGPU.
//!
//! Module map (see README.md):
//! - [`gpu`]: device, capabilities, counting allocator, pipeline cache, readbacks
//! - [`shader`]: WGSL specialisation per storage and naga validation
//! - [`tensor`]: dtypes, storages and GPU tensors
//! - [`ops`]: one dispatcher per WGSL file, forward and backward together
//! - [`amp`]: precision policy, the GPU GradScaler and gradient clipping
//! - [`optim`]: fused SGD, Adam and AdamW over flat parameter buffers
//! - [`data`]: data sets (embedded MNIST, IDX, Fashion-MNIST, safetensors, synthetic), batching
//! - [`nn`]: model descriptions, flat parameter storage, the planned network
//! - [`dist`]: data-parallel training across processes (`mpirun`, feature `mpi`)
//! - [`train`]: the planned training step, the one training loop (`train::Run`), checkpoints
//! - [`app`]: the egui app (f16 and f32 paths side by side), native and web (the browser
//!   entry point `start(canvas_id)` is `app/web.rs`, wasm32 only)

pub mod amp;
pub mod app;
pub mod data;
pub mod dist;
pub mod error;
pub mod gpu;
pub mod nn;
pub mod ops;
pub mod optim;
pub mod shader;
pub mod tensor;
pub mod train;

pub use error::{Error, Result};
pub use gpu::{BackendChoice, F16Storage, F16StorageChoice, GpuContext, GpuOptions};
pub use tensor::{DType, Storage, Tensor};
