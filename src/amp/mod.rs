//! Automatic mixed precision: the precision policy (autocast's op lists) and which modes run
//! on an adapter, the GPU GradScaler (PyTorch's `torch.amp.GradScaler`, with its state in a
//! GPU buffer so a training step never waits for the CPU), gradient clipping by global norm,
//! and rounding flat f32 buffers to a 16-bit dtype.

pub mod clip;
mod flat;
pub mod policy;
pub mod round;
pub mod scaler;
pub mod support;

pub use clip::GradClipper;
pub(crate) use flat::check_flat_f32;
pub use flat::{cast_in_pieces, f32_piece, in_order, tensor_piece};
pub use scaler::{GradScaler, ScalerConfig, ScalerSnapshot, ScalerStateDict};
pub use support::{AdapterReport, ModeSupport};

/// A loss scale for people: `65536`, `0.5`, and past the digits a reader counts, scientific
/// (`1e-30`, `3.4028235e38`) rather than thirty digits of zeros.
pub fn scale_text(scale: f32) -> String {
    if scale == 0.0 || !scale.is_finite() || (1e-4..1e9).contains(&scale.abs()) {
        scale.to_string()
    } else {
        format!("{scale:e}")
    }
}

use crate::shader::ShaderDecl;

/// The shaders of the GradScaler, clipping and rounding, for the portability tests.
pub static SHADERS: &[&ShaderDecl] = &[&clip::SHADER, &round::SHADER, &scaler::SHADER];
