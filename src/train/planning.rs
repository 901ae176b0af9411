//! Planning guards: buffer, pipeline and bind-group creation turns device limits and
//! out-of-memory into errors that say what to change, never a panic.

use crate::error::{Error, Result};
use crate::gpu::GpuContext;
use crate::nn::ModelSpec;
use crate::nn::params::ParamLayout;

/// The hint a batch-size resource error ends with (the CLI names its flag instead).
pub const SMALLER_BATCH: &str = "use a smaller batch size";

/// Runs a planning step (buffer, pipeline and bind group creation) so that a device limit or
/// out-of-memory comes back as an error, never a panic: an out-of-memory error scope around it
/// (popped by blocking on native; on the web the uncaptured-error handler records it), then
/// any GPU error recorded meanwhile. When planning itself failed, the GPU errors its invalid
/// objects caused are explained by that failure and dropped.
pub(crate) fn guard_planning<T>(ctx: &GpuContext, plan: impl FnOnce() -> Result<T>) -> Result<T> {
    #[cfg(not(target_arch = "wasm32"))]
    let scope = ctx.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
    let planned = plan();
    #[cfg(not(target_arch = "wasm32"))]
    if let Some(oom) = pollster::block_on(scope.pop()) {
        ctx.clear_errors();
        return Err(Error::Resource {
            message: format!(
                "out of GPU memory: {}",
                oom.to_string()
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
            needed: 0,
            limit: 0,
        });
    }
    match planned {
        Ok(value) => {
            ctx.check()?;
            Ok(value)
        }
        Err(e) => {
            if ctx.device_lost().is_none() {
                ctx.clear_errors();
            }
            Err(e)
        }
    }
}

/// A resource error while planning a model: say that its parameters do not fit.
pub(crate) fn params_error(e: Error, params: usize) -> Error {
    match e {
        Error::Resource {
            message,
            needed,
            limit,
        } => Error::Resource {
            message: format!(
                "the model's {params} parameters do not fit this adapter: {message}; use a smaller model"
            ),
            needed,
            limit,
        },
        other => other,
    }
}

/// A resource error while planning a batch, with the batch size and the largest batch the
/// failing buffer would allow (buffer sizes grow linearly with the batch).
pub(crate) fn batch_error(e: Error, batch: usize) -> Error {
    match e {
        Error::Resource {
            message,
            needed,
            limit,
        } => {
            let hint = if limit > 0 && needed > limit {
                let fits = (batch as u128 * limit as u128 / needed as u128) as u64;
                format!("{SMALLER_BATCH} (this buffer allows at most {fits})")
            } else {
                SMALLER_BATCH.to_string()
            };
            Error::Resource {
                message: format!("batch {batch}: {message} — {hint}"),
                needed,
                limit,
            }
        }
        Error::Unsupported(m) if m.contains("workgroups") => {
            Error::Unsupported(format!("batch {batch}: {m}"))
        }
        other => other,
    }
}

/// nanoGPT's parameter groups (`configure_optimizers`) for a GPT: weight decay for
/// parameters of two or more dimensions (matmul weights, embeddings), none for biases and
/// LayerNorm weights; one bit per flat element (padding decays: it stays zero). Other
/// models keep PyTorch's single group (`None`: everything decays), so their bits do not
/// change.
pub fn weight_decay_mask(spec: &ModelSpec, layout: &ParamLayout) -> Option<Vec<bool>> {
    spec.gpt.as_ref()?;
    let mut mask = vec![true; layout.total];
    for e in &layout.entries {
        if e.shape.len() < 2 {
            mask[e.offset..e.offset + e.numel()].fill(false);
        }
    }
    Some(mask)
}
