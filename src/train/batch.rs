//! One batch on its way to the GPU: its inputs (f32 features or token ids) and targets
//! (class labels, one per loss row, or float values), written into a planned network's
//! buffers with queued writes (no wait).

use crate::data::{BatchInputs, BatchLabels};
use crate::error::{Error, Result};
use crate::gpu::GpuContext;
use crate::nn::Network;

/// Inputs of one batch: f32 features, or token ids (u32, `batch × T`), which go into the
/// network's input buffer as raw u32 words.
#[derive(Clone, Copy, Debug)]
pub enum BatchInput<'a> {
    Features(&'a [f32]),
    Tokens(&'a [u32]),
}

/// Slices and vectors of features or token ids, as they are.
macro_rules! batch_input_from {
    ($($source:ty => $variant:ident),*) => {$(
        impl<'a> From<&'a $source> for BatchInput<'a> {
            fn from(x: &'a $source) -> Self {
                BatchInput::$variant(x)
            }
        }
    )*};
}
batch_input_from!([f32] => Features, Vec<f32> => Features, [u32] => Tokens, Vec<u32> => Tokens);

impl<'a> From<&'a BatchInputs> for BatchInput<'a> {
    /// A gathered batch's inputs.
    fn from(x: &'a BatchInputs) -> Self {
        match x {
            BatchInputs::Features(x) => BatchInput::Features(x),
            BatchInputs::Tokens(ids) => BatchInput::Tokens(ids),
        }
    }
}

/// Targets of one batch.
pub enum BatchTargets<'a> {
    Classes(&'a [u32]),
    Values(&'a [f32]),
}

impl BatchTargets<'_> {
    /// Loss rows of a batch of `batch` samples: one per sample, or one per token of token
    /// samples (one class label each). Validation weighs each batch's mean loss by these.
    pub fn rows(&self, batch: usize) -> usize {
        match self {
            BatchTargets::Classes(labels) => labels.len(),
            BatchTargets::Values(_) => batch,
        }
    }
}

impl<'a> From<&'a BatchLabels> for BatchTargets<'a> {
    /// A gathered batch's labels as step targets (class labels or float values).
    fn from(labels: &'a BatchLabels) -> Self {
        match labels {
            BatchLabels::Classes(l) => BatchTargets::Classes(l),
            BatchLabels::Targets(t) => BatchTargets::Values(t),
        }
    }
}

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
