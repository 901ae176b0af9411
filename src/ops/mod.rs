//! Op dispatchers: one Rust file per WGSL file, forward and backward side by side.
//!
//! Every op is a function that checks shapes and returns a planned [`crate::gpu::Kernel`]
//! (pipeline and bind group made once); callers encode kernels into a step's command buffer.
//! Each op file declares its shader once (a [`ShaderDecl`]: name, source, uniform structs,
//! variant grid); a new op is its file, its WGSL, and its name in the two lists below.

pub mod attention;
pub mod augment;
pub mod avgpool;
pub mod batchnorm;
pub mod bodies;
pub mod buffers;
pub mod concat;
pub mod conv;
pub mod dropout;
pub mod elementwise;
pub mod embedding;
pub mod flash_attention;
pub mod histogram;
pub mod layernorm;
pub mod loss;
pub mod matmul;
pub mod numerics;
pub mod pool;
pub mod qkv;
pub mod reduce;
pub mod rope;
pub mod sample;
pub mod table_check;
pub mod unary;

use crate::error::{Error, Result};
use crate::shader::ShaderDecl;
use crate::tensor::{Storage, Tensor};

/// The shaders of these ops, for the portability tests (`crate::variants`).
pub static SHADERS: &[&ShaderDecl] = &[
    &attention::SHADER,
    &augment::SHADER,
    &avgpool::SHADER,
    &batchnorm::SHADER,
    &buffers::SHADER,
    &concat::SHADER,
    &conv::SHADER,
    &conv::COOP_SHADER,
    &dropout::SHADER,
    &elementwise::SHADER,
    &embedding::SHADER,
    &flash_attention::FORWARD_SHADER,
    &flash_attention::BACKWARD_SHADER,
    &flash_attention::COOP_FORWARD_SHADER,
    &flash_attention::COOP_BACKWARD_SHADER,
    &flash_attention::COOP_DQ_SHADER,
    &histogram::SHADER,
    &layernorm::SHADER,
    &loss::SHADER,
    &matmul::SHADER,
    &matmul::COOP_SHADER,
    &numerics::SHADER,
    &pool::SHADER,
    &reduce::SHADER,
    &rope::SHADER,
    &sample::SHADER,
    &unary::SHADER,
];

/// Whether a gradient kernel overwrites its output or adds to it (gradient accumulation
/// over micro-batches, or several contributions to one gradient).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accumulate {
    /// `out = result`.
    Overwrite,
    /// `out += result`.
    Add,
}

impl Accumulate {
    /// The shader's flag word: 1 to add, 0 to overwrite.
    pub(crate) fn flag(self) -> u32 {
        match self {
            Accumulate::Overwrite => 0,
            Accumulate::Add => 1,
        }
    }
}

/// An error unless `t` (the op's argument `what`) is stored as f32.
pub(crate) fn check_f32(op: &'static str, what: &str, t: &Tensor) -> Result<()> {
    if t.storage() != Storage::F32 {
        return Err(Error::InvalidArgument(format!(
            "{op}: {what} must be stored as f32, not {}",
            t.storage().name()
        )));
    }
    Ok(())
}

/// The code `round_grad` (shaders/prelude.wgsl) takes: a parameter gradient computed in a
/// low dtype is rounded to it (overflow to inf) before it lands in the f32 gradient, as
/// PyTorch's autocast produces f16 weight gradients and casts them to f32. `None` (or f32)
/// keeps the f32 result.
pub(crate) fn round_code(round_to: Option<crate::dtype::DType>) -> u32 {
    use crate::dtype::DType;
    match round_to {
        Some(DType::F16) => 1,
        Some(DType::BF16) => 2,
        None | Some(DType::F32) | Some(DType::U32) => 0,
    }
}
