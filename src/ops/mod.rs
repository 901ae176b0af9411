//! Op dispatchers: one Rust file per WGSL file, forward and backward side by side.
//!
//! Every op is a function that checks shapes and returns a planned [`crate::gpu::Kernel`]
//! (pipeline and bind group made once); callers encode kernels into a step's command buffer.

pub mod conv;
pub mod elementwise;
pub mod histogram;
pub mod loss;
pub mod matmul;
pub mod pool;
pub mod reduce;
