//! What every kernel over the flat f32 buffers (unscale, clipping, rounding, the optimizer
//! step, the weight cast) shares, apart from `mod.rs`, which lists those kernels' shaders:
//! the check it makes first, and the pieces it is made in where a buffer passes the
//! adapter's storage binding limit ([`GpuContext::flat_pieces`]), the weight cast's among them.

use std::ops::Range;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::gpu::{Arg, GpuBuffer, GpuContext, Kernel};
use crate::ops::elementwise;
use crate::tensor::Tensor;

/// Check that `buffer` holds `n` f32 a kernel can index. It need not fit one storage
/// binding: the kernels over it bind it in pieces.
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
    let limit = ctx.caps.max_buffer_size;
    if buffer.size() > limit {
        return Err(Error::Unsupported(format!(
            "{what}: buffer of {} bytes is over this device's buffer size limit of {limit} bytes",
            buffer.size()
        )));
    }
    Ok(())
}

/// The f32 elements `piece` of a raw buffer, as one binding.
pub fn f32_piece<'a>(buffer: &'a Arc<GpuBuffer>, piece: &Range<usize>) -> Arg<'a> {
    Arg::Range {
        buffer,
        offset: 4 * piece.start as u64,
        size: 4 * piece.len() as u64,
    }
}

/// The elements `piece` of a flat 1-D tensor (any storage) as a tensor of their own.
pub fn tensor_piece(ctx: &GpuContext, flat: &Tensor, piece: &Range<usize>) -> Result<Tensor> {
    let storage = flat.storage();
    Tensor::view(
        ctx,
        flat.buffer().clone(),
        flat.byte_offset() + storage.bytes_for(piece.start),
        &[piece.len()],
        storage,
    )
}

/// One kernel per piece, recorded as one: the first, followed by the others in order
/// ([`Kernel::then`]). One piece gives exactly its kernel. The pieces' uniforms differ, so
/// the result's uniform is never rewritten ([`Kernel::set_uniform`] would write one block
/// into all).
pub fn in_order(kernels: Vec<Kernel>) -> Result<Kernel> {
    let mut kernels = kernels.into_iter();
    let first = kernels
        .next()
        .ok_or_else(|| Error::InvalidArgument("a flat kernel of no pieces".into()))?;
    Ok(kernels.fold(first, Kernel::then))
}

/// `out = x` cast to `out`'s storage (the master weights into their compute copy), one
/// `elementwise::cast` per piece of the flat buffers: elementwise, so the same bits as one.
pub fn cast_in_pieces(ctx: &GpuContext, x: &Tensor, out: &Tensor) -> Result<Kernel> {
    let cast = |piece: Range<usize>| {
        let x = tensor_piece(ctx, x, &piece)?;
        elementwise::cast(ctx, &x, &tensor_piece(ctx, out, &piece)?)
    };
    in_order(
        ctx.flat_pieces(out.numel())
            .into_iter()
            .map(cast)
            .collect::<Result<_>>()?,
    )
}
