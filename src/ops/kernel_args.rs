//! What many kernels take: the accumulate flag, the rounding code of a low-precision gradient
//! and the f32 check (apart from `mod.rs`, which lists every op's shader, so that no op reaches
//! itself through it).

use crate::error::{Error, Result};
use crate::tensor::{Storage, Tensor};

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
