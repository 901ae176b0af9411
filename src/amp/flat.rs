//! The check every kernel over the flat f32 buffers (unscale, clipping, rounding) makes
//! first, apart from `mod.rs`, which lists those kernels' shaders.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::gpu::{GpuBuffer, GpuContext};

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
