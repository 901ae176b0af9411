//! One batch on its way to the GPU: its inputs (f32 features or token ids) and targets
//! (class labels, one per loss row, or float values), written into a planned network's
//! buffers with queued writes (no wait). The pair of types is the data's
//! ([`crate::data::Batch`] lends its values out as them).

pub use crate::data::{BatchInput, BatchTargets};
use crate::error::{Error, Result};
use crate::gpu::GpuContext;
use crate::nn::Network;

/// Upload a batch into a network's input buffers (queued writes; no wait). Features are
/// converted to the input tensor's storage; token ids are written as raw u32 words into the
/// input buffer, which must hold one 4-byte element per id. Class labels: one per loss row
/// (per sample, or per token of token samples).
pub fn write_batch<'x>(
    ctx: &GpuContext,
    net: &Network,
    x: impl Into<BatchInput<'x>>,
    targets: &BatchTargets<'_>,
) -> Result<()> {
    write_input(ctx, net, x.into())?;
    write_targets(ctx, net, targets)
}

/// Upload a batch's targets only (see [`write_batch`]).
pub fn write_targets(ctx: &GpuContext, net: &Network, targets: &BatchTargets<'_>) -> Result<()> {
    match (targets, &net.targets) {
        (BatchTargets::Classes(labels), None) => {
            let rows = loss_rows(net);
            if labels.len() != rows {
                return Err(Error::shape(
                    "batch",
                    format!(
                        "{} class labels for {rows} loss rows (batch {} × {} per sample)",
                        labels.len(),
                        net.batch,
                        rows / net.batch.max(1)
                    ),
                ));
            }
            if net.labels.size() < 4 * rows as u64 {
                return Err(Error::shape(
                    "batch",
                    format!(
                        "the labels buffer holds {} bytes, fewer than {rows} u32 labels",
                        net.labels.size()
                    ),
                ));
            }
            ctx.write_buffer(&net.labels, 0, bytemuck::cast_slice(labels));
        }
        (BatchTargets::Values(values), Some(t)) => t.write_f32(ctx, values)?,
        _ => {
            return Err(Error::InvalidArgument(
                "targets do not match the loss (class labels need cross-entropy, values need mse)"
                    .into(),
            ));
        }
    }
    Ok(())
}

/// Upload a batch's inputs only (see [`write_batch`]).
pub fn write_input(ctx: &GpuContext, net: &Network, x: BatchInput<'_>) -> Result<()> {
    match x {
        BatchInput::Features(x) => net.input.write_f32(ctx, x),
        BatchInput::Tokens(ids) => write_tokens(ctx, net, ids),
    }
}

/// Loss rows of a network's output `[batch, ..., classes]`: every leading element (the
/// batch, and `T` for sequence outputs `[batch, T, V]`). Class labels come one per row.
fn loss_rows(net: &Network) -> usize {
    let shape = net.output.shape();
    match shape.last() {
        Some(&classes) if classes > 0 => net.output.numel() / classes,
        _ => net.batch,
    }
}

/// Token ids as raw u32 words into the network's input buffer: one id per element of the
/// input tensor, whose elements must be 4 bytes (f32 storage, read as u32 by the embedding).
fn write_tokens(ctx: &GpuContext, net: &Network, ids: &[u32]) -> Result<()> {
    let input = &net.input;
    if input.dtype() != crate::tensor::DType::U32 {
        return Err(Error::shape(
            "batch",
            format!(
                "token ids go into a model that takes them (an embedding first), but this \
                 model's input is {}",
                input.dtype()
            ),
        ));
    }
    if ids.len() != input.numel() {
        return Err(Error::shape(
            "batch",
            format!(
                "{} token ids for an input of shape {:?} ({} elements)",
                ids.len(),
                input.shape(),
                input.numel()
            ),
        ));
    }
    ctx.write_buffer(
        input.buffer(),
        input.byte_offset(),
        bytemuck::cast_slice(ids),
    );
    Ok(())
}
