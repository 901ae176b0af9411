//! webgpu-amp: mixed-precision (AMP) neural-network training on WebGPU.
//!
//! Module map (see README.md):
//! - [`dtype`]: dtypes, f16 storage and storage layouts (plain data)
//! - [`shader`]: shader declarations, WGSL specialisation per storage, naga validation
//! - [`gpu`]: device, capabilities, faults, counting allocator, pipeline cache, readbacks
//! - [`tensor`]: GPU tensors (a dtype, a shape and a view of a counted buffer)
//! - [`ops`]: one dispatcher per WGSL file, forward and backward together
//! - [`amp`]: precision policy and mode support, the GPU GradScaler and gradient clipping
//! - [`optim`]: fused SGD, Adam and AdamW over flat parameter buffers
//! - [`variants`]: every declared shader and its variants, for the portability tests
//! - [`data`]: data sets (embedded MNIST, IDX, Fashion-MNIST, safetensors, synthetic), batching
//! - [`nn`]: model descriptions, flat parameter storage, the planned network
//! - [`dist`]: data-parallel training across processes (`mpirun`, feature `mpi`)
//! - [`interrupt`]: the SIGINT/SIGTERM handler (an interrupted run saves, then exits)
//! - [`train`]: the planned training step, the one training loop (`train::Run`), checkpoints
//! - [`app`]: the egui app (f16 and f32 paths side by side), native and web (the browser
//!   entry point `start(canvas_id)` is `app/web.rs`, wasm32 only)
//!
//! Imports run one way, down the layers: `cli`/`app` → `train` → `nn`/`amp`/`optim` → `ops`
//! → `tensor` → `gpu` → `shader` → `dtype` (`variants` sits above the dispatchers; `data`
//! builds on `error` only, `error` on `interrupt` only, `interrupt` on nothing).
//! `tests/layering.rs` checks every `crate::` path.

pub mod amp;
pub mod app;
pub mod data;
pub mod dist;
pub mod dtype;
pub mod error;
pub mod gpu;
pub mod interrupt;
pub mod nn;
pub mod ops;
pub mod optim;
pub mod shader;
pub mod tensor;
pub mod train;
pub mod variants;

pub use dtype::{DType, F16Storage, Storage};
pub use error::{Error, Result};
pub use gpu::{BackendChoice, F16StorageChoice, GpuContext, GpuOptions, TensorCoreChoice};
pub use tensor::Tensor;
