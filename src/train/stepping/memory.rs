//! A training step's GPU memory, planned without allocating it: the whole step (parameters,
//! optimizer, scaler and the network for one batch size) is planned on a dry twin of the
//! context ([`GpuContext::dry_twin`]), which counts every buffer at its size and records the
//! largest storage binding but backs nothing, compiles nothing and never runs. Every buffer
//! is allocated once per planned step and lives as long as it, so the live bytes at the end
//! of planning are the step's peak.
//!
//! The same dry planning guards a real run: before a network is allocated, its largest
//! binding and buffer are checked against the adapter's limits ([`check_network_fits`]), so
//! a batch that cannot bind fails at once, naming the tensor and what to change.

use crate::error::Result;
use crate::gpu::{Binding, CompiledEntry, GpuContext};
use crate::nn::ModelSpec;
use crate::train::config::StepConfig;
use crate::train::trainer::Trainer;

/// How many of the largest buffers a plan lists.
pub const LARGEST: usize = 8;

/// What a planned step allocates, by kind, and how it stands against the adapter's limits.
#[derive(Clone, Debug, serde::Serialize)]
pub struct MemoryPlan {
    pub batch: usize,
    /// Bytes by kind, in [`KINDS`] order.
    pub kinds: Vec<(&'static str, u64)>,
    /// Every buffer of the step at once: its peak.
    pub peak_bytes: u64,
    /// The largest buffers by label, largest first (at most [`LARGEST`]).
    pub largest_buffers: Vec<(String, u64)>,
    pub largest_binding: Option<Binding>,
    pub max_buffer_size: u64,
    pub max_storage_buffer_binding_size: u64,
}

/// The kinds of buffer a plan reports: the weights a step computes with (the low-precision
/// copy under AMP, the f32 parameters otherwise), the f32 master weights (AMP), the
/// parameter gradients, the optimizer's moments, activations kept for the backward, and
/// workspace (activation gradients, scratch, reduction partials, uniforms, statistics).
pub const KINDS: [&str; 6] = [
    "weights",
    "master weights",
    "gradients",
    "optimizer state",
    "activations",
    "workspace",
];

fn kind_of(label: &str, has_low_copy: bool) -> &'static str {
    match label {
        "params.low" => "weights",
        "params.master" if has_low_copy => "master weights",
        "params.master" => "weights",
        "params.grad" => "gradients",
        "activation grads" => "workspace",
        "exp_avg" | "exp_avg_sq" | "momentum_buffer" => "optimizer state",
        l if l.starts_with("optim.") => "optimizer state",
        l if l.starts_with("activation ") => "activations",
        _ => "workspace",
    }
}

/// One training step planned on a dry twin of `ctx` (nothing allocated, nothing compiled).
fn plan_on_dry_twin(
    ctx: &GpuContext,
    spec: ModelSpec,
    config: StepConfig,
    target_dim: usize,
    batch: usize,
) -> Result<GpuContext> {
    let dry = ctx.dry_twin();
    // A dry context skips the upload, so no initial values are needed.
    let mut trainer = Trainer::new(&dry, spec, config, target_dim, &[])?;
    trainer.network(&dry, batch)?;
    Ok(dry)
}

/// The kernels one training step plans on `ctx` (its adapter's kernel table and bodies),
/// each variant and entry point once, planned on a dry twin: what `webgpu-amp kernels`
/// compiles for real GPUs (`scripts/kernel-report.sh`).
pub fn step_kernels(
    ctx: &GpuContext,
    spec: ModelSpec,
    config: StepConfig,
    target_dim: usize,
    batch: usize,
) -> Result<Vec<CompiledEntry>> {
    Ok(plan_on_dry_twin(ctx, spec, config, target_dim, batch)?.compiled_entries())
}

/// Plan one training step of `spec` under `config` for `batch` samples on a dry twin of
/// `ctx` and report its memory (nothing is allocated on the device).
pub fn plan_step(
    ctx: &GpuContext,
    spec: ModelSpec,
    config: StepConfig,
    target_dim: usize,
    batch: usize,
) -> Result<MemoryPlan> {
    let dry = plan_on_dry_twin(ctx, spec, config, target_dim, batch)?;
    let labels = dry.allocator.live_by_label();
    let has_low = labels.iter().any(|(l, _)| l == "params.low");
    let mut kinds: Vec<(&'static str, u64)> = KINDS.iter().map(|k| (*k, 0)).collect();
    for (label, bytes) in &labels {
        let kind = kind_of(label, has_low);
        if let Some(slot) = kinds.iter_mut().find(|(k, _)| *k == kind) {
            slot.1 += bytes;
        }
    }
    Ok(MemoryPlan {
        batch,
        kinds,
        peak_bytes: dry.memory().peak_bytes,
        largest_buffers: labels.into_iter().take(LARGEST).collect(),
        largest_binding: dry.allocator.largest_binding(),
        max_buffer_size: ctx.caps.max_buffer_size,
        max_storage_buffer_binding_size: ctx.caps.max_storage_buffer_binding_size,
    })
}
