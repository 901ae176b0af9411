//! Automatic mixed precision: the precision policy (autocast's op lists) and which modes run
//! on an adapter, the GPU GradScaler (PyTorch's `torch.amp.GradScaler`, with its state in a
//! GPU buffer so a training step never waits for the CPU), gradient clipping by global norm,
//! and rounding flat f32 buffers to a 16-bit dtype.

pub mod clip;
pub mod policy;
pub mod round;
pub mod scaler;
pub mod support;

pub use clip::GradClipper;
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

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::gpu::{GpuBuffer, GpuContext};
use crate::shader::ShaderDecl;

/// The shaders of the GradScaler, clipping and rounding, for the portability tests.
pub static SHADERS: &[&ShaderDecl] = &[&clip::SHADER, &round::SHADER, &scaler::SHADER];

/// Check that `buffer` holds `n` f32 and can be bound whole as one storage buffer.
pub(crate) fn check_flat_f32(
    ctx: &GpuContext,
    what: &str,
    buffer: &Arc<GpuBuffer>,
    n: usize,
) -> Result<()> {
    let need = 4 * n as u64;
    if buffer.size() < need {
        return Err(Error::InvalidArgument(format!(
            "{what}: buffer of {} bytes cannot hold {n} f32 ({need} bytes)",
            buffer.size()
        )));
    }
    if n > u32::MAX as usize / 2 {
        return Err(Error::InvalidArgument(format!(
            "{what}: {n} elements is over the 2^31 a kernel can index"
        )));
    }
    let limit = ctx.caps.max_storage_buffer_binding_size;
    if buffer.size() > limit {
        return Err(Error::Unsupported(format!(
            "{what}: buffer of {} bytes is over this device's storage binding limit of {limit} bytes",
            buffer.size()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn scales_read_as_numbers_people_count() {
        use super::scale_text;
        assert_eq!(scale_text(65536.0), "65536");
        assert_eq!(scale_text(0.5), "0.5");
        assert_eq!(scale_text(1e-30), "1e-30");
        assert_eq!(scale_text(f32::MAX), "3.4028235e38");
    }
}
