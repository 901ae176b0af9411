//! Planning guards: buffer, pipeline and bind-group creation turns device limits and
//! out-of-memory into errors that say what to change, never a panic; the check that a
//! model's parameters fit the adapter before anything is allocated for them; and the check
//! that a network's largest buffer and binding fit before it is allocated, planned on a dry
//! twin of the context ([`check_network_fits`]).

use std::sync::Arc;

use crate::amp::policy::Precision;
use crate::error::{Error, Result};
use crate::gpu::{GpuBuffer, GpuContext, human_bytes};
use crate::nn::buffers::BufferStore;
use crate::nn::layers::MAX_ELEMENTS;
use crate::nn::params::ParamLayout;
use crate::nn::params::ParamStore;
use crate::nn::{AttentionKernel, ModelSpec, Network, NetworkInputs};
use crate::optim::OptimizerConfig;
use crate::tensor::DType;

/// The hint a batch-size resource error ends with (the CLI names its flag instead).
pub const SMALLER_BATCH: &str = "use a smaller batch size";

/// The hint a binding error ends with when the unfused attention's `[B, nh, T, T]`
/// buffers are what is too large (the CLI names its flag instead).
pub const FUSED_ATTENTION: &str = "use the fused attention";

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
pub(crate) fn params_error(e: Error, params: u64) -> Error {
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
        // The model's shapes were checked per sample when it was built, so a shape an op
        // refuses while a batch is planned is the batch's doing (an activation past 32-bit
        // indices): say so in the user's terms, not the op's.
        Error::Shape { message, .. } => Error::Resource {
            message: format!(
                "batch {batch}: an activation would be too large ({message}) — {SMALLER_BATCH}"
            ),
            needed: 0,
            limit: 0,
        },
        other => other,
    }
}

/// The parameter groups of the model's family recipe (nanoGPT's `configure_optimizers` for
/// a GPT): weight decay for parameters of two or more dimensions (matmul weights,
/// embeddings), none for biases and norm weights; one bit per flat element (padding decays:
/// it stays zero). Other models keep PyTorch's single group (`None`: everything decays), so
/// their bits do not change.
pub fn weight_decay_mask(spec: &ModelSpec, layout: &ParamLayout) -> Option<Vec<bool>> {
    let recipe = spec.family.as_ref()?.family().recipe()?;
    if !recipe.decay_matrices_only {
        return None;
    }
    let mut mask = vec![true; layout.trainable];
    for e in &layout.entries {
        if e.shape.len() < 2 && layout.trains(e) {
            mask[e.offset..e.offset + e.numel()].fill(false);
        }
    }
    Some(mask)
}

/// The flat parameter buffers a trainer for `spec` allocates (master weights, gradients,
/// the low-precision copy and the optimizer's moments), each checked against the adapter's
/// per-buffer limits *before* anything is allocated, host or GPU: a model whose parameters
/// cannot fit fails here with its size and the limit, instead of the host allocating
/// gigabytes of initial values first. Sizes use checked arithmetic, so no description can
/// overflow them. `what` names the model in the message (a preset's name or a file).
/// Returns the number of parameter elements (padding included).
pub fn check_params_fit(
    ctx: &GpuContext,
    spec: &ModelSpec,
    what: &str,
    precision: Precision,
    optimizer: &OptimizerConfig,
) -> Result<u64> {
    let align = ParamLayout::element_alignment(ctx) as u64;
    let overflow = || Error::Resource {
        message: format!(
            "model {what}: its parameter count overflows 64 bits; use a smaller model"
        ),
        needed: u64::MAX,
        limit: 0,
    };
    // The layout ParamLayout::new makes, in u64 with every step checked.
    let mut total = 0u64;
    for p in spec.parameters() {
        let n = p
            .shape
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d as u64))
            .ok_or_else(overflow)?;
        total = total
            .checked_add(n)
            .and_then(|t| t.checked_next_multiple_of(align))
            .ok_or_else(overflow)?;
    }
    let total = total.max(align);
    let f32_bytes = total.checked_mul(4).ok_or_else(overflow)?;
    let low_bytes = match precision.low_dtype() {
        DType::F32 => None,
        // 2 bytes per value natively; packed storages round up to whole u32 words.
        _ => Some(total.div_ceil(2).checked_mul(4).ok_or_else(overflow)?),
    };
    let moments: &[&str] = match optimizer {
        OptimizerConfig::Sgd { momentum, .. } if *momentum == 0.0 => &[],
        OptimizerConfig::Sgd { .. } => &["momentum_buffer"],
        OptimizerConfig::Adam { .. } | OptimizerConfig::AdamW { .. } => &["exp_avg", "exp_avg_sq"],
    };
    let mut f32_buffers = vec!["master weights", "gradients"];
    f32_buffers.extend_from_slice(moments);
    let all_bytes = (f32_buffers.len() as u64)
        .checked_mul(f32_bytes)
        .and_then(|b| b.checked_add(low_bytes.unwrap_or(0)))
        .ok_or_else(overflow)?;
    // The flat buffers are bound in pieces (`GpuContext::flat_pieces`): each must fit one
    // buffer, and each parameter, which its layer binds alone, one storage binding.
    let (limit, limit_name) = (ctx.caps.max_buffer_size, "max_buffer_size");
    let binding_limit = ctx.caps.max_storage_buffer_binding_size;
    let too_big = |message: String, needed: u64, limit: u64| {
        Err(Error::Resource {
            message: format!(
                "model {what}: {total} parameters {message} (all flat parameter buffers \
                 under {precision}: {}); use a smaller model",
                human_bytes(all_bytes)
            ),
            needed,
            limit,
        })
    };
    if total > MAX_ELEMENTS {
        return too_big(
            format!("are more than the {MAX_ELEMENTS} elements one flat buffer can index (u32)"),
            total,
            MAX_ELEMENTS,
        );
    }
    if f32_bytes > limit {
        return too_big(
            format!(
                "need {} per f32 buffer ({}), over this adapter's {limit_name} of {}",
                human_bytes(f32_bytes),
                f32_buffers.join(", "),
                human_bytes(limit)
            ),
            f32_bytes,
            limit,
        );
    }
    if let Some(p) = spec.parameters().into_iter().find(|p| {
        let n = p.shape.iter().map(|&d| d as u64).product::<u64>();
        n.saturating_mul(4) > binding_limit
    }) {
        let bytes = 4 * p.shape.iter().map(|&d| d as u64).product::<u64>();
        return Err(Error::Resource {
            message: format!(
                "model {what}: parameter `{}` {:?} is {} in f32, over this adapter's \
                 max_storage_buffer_binding_size of {} (a layer binds each parameter whole); use a \
                 smaller model",
                p.name,
                p.shape,
                human_bytes(bytes),
                human_bytes(binding_limit)
            ),
            needed: bytes,
            limit: binding_limit,
        });
    }
    Ok(total)
}

/// Plan the network for `batch` on a dry twin of `ctx` and fail, before anything of it is
/// allocated, when its largest buffer or storage binding passes the adapter's limits.
pub(in crate::train) fn check_network_fits(
    ctx: &GpuContext,
    n: &NetworkInputs<'_>,
    batch: usize,
) -> Result<()> {
    let dry = ctx.dry_twin();
    let low = n.store.low.as_ref().map(|(_, s)| s.dtype());
    let buffers = BufferStore::new(&dry, &n.spec.buffers())?;
    let store = ParamStore::new(&dry, n.store.layout.clone(), low).with_buffers(buffers);
    let seed: Arc<GpuBuffer> = dry.alloc_storage("grad_scaler.state", 64);
    let on_dry = NetworkInputs {
        store: &store,
        ..*n
    };
    Network::build(&dry, &on_dry, batch, &seed)?;
    // The unfused attention's [B, nh, T, T] scores and probabilities have a way out.
    let attention_hint = |label: &str| {
        let quadratic = label.contains("attention") || label.contains("probabilities");
        if n.spec.attention == AttentionKernel::Unfused && quadratic {
            format!("; {FUSED_ATTENTION}")
        } else {
            String::new()
        }
    };
    if let Some((label, bytes)) = dry.allocator.live_by_label().into_iter().next()
        && bytes > ctx.caps.max_buffer_size
    {
        let limit = ctx.caps.max_buffer_size;
        return Err(Error::Resource {
            message: format!(
                "`{label}` needs a {} buffer; this adapter allows {} per buffer \
                 (max_buffer_size){}",
                human_bytes(bytes),
                human_bytes(limit),
                attention_hint(&label),
            ),
            needed: bytes,
            limit,
        });
    }
    if let Some(b) = dry.allocator.largest_binding()
        && b.bytes > ctx.caps.max_storage_buffer_binding_size
    {
        let limit = ctx.caps.max_storage_buffer_binding_size;
        return Err(Error::Resource {
            message: format!(
                "`{}` binds {} of storage (`{}` of kernel {}); this adapter allows {} per \
                 storage binding (max_storage_buffer_binding_size){}",
                b.buffer,
                human_bytes(b.bytes),
                b.name,
                b.kernel,
                human_bytes(limit),
                attention_hint(&b.buffer),
            ),
            needed: b.bytes,
            limit,
        });
    }
    Ok(())
}
