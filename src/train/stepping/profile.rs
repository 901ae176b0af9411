//! Where a training step's time goes (`bench step --profile`, `train --profile`; native):
//! GPU time per kernel and per phase of the step (`step.rs`'s [`Phase`]s, in its order) from
//! timestamp queries ([`KernelTimer`]: every kernel in its own timed pass), and the host's
//! time per step ([`crate::train::host_time`]).

use crate::error::Result;
use crate::gpu::{GpuContext, Kernel, KernelTimer};
use crate::train::batch::{BatchInput, BatchTargets, write_batch};
use crate::train::host_time::HostProfile;
use crate::train::step::Phase;
use crate::train::trainer::Trainer;

#[derive(Clone, Debug, serde::Serialize)]
pub struct KernelProfile {
    pub label: String,
    pub phase: &'static str,
    pub ms: f64,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct PhaseProfile {
    pub phase: &'static str,
    pub ms: f64,
    pub kernels: usize,
}

/// GPU time of one step, kernel by kernel.
#[derive(Clone, Debug, serde::Serialize)]
pub struct GpuProfile {
    pub kernels: Vec<KernelProfile>,
    /// Every phase of [`Phase::ALL`], in order, with the kernels it holds (0 when the step
    /// has none of it, e.g. no clipping).
    pub phases: Vec<PhaseProfile>,
    /// Sum of the kernels' times.
    pub kernels_ms: f64,
    /// First kernel's start to last kernel's end.
    pub whole_ms: f64,
}

/// A step's profile: GPU times when the adapter has timestamp queries (else why not), and
/// host times per step.
#[derive(Clone, Debug, serde::Serialize)]
pub struct StepProfile {
    pub adapter: String,
    pub gpu: Option<GpuProfile>,
    /// Why there are no GPU times, when there are none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_unavailable: Option<String>,
    pub host: HostProfile,
}

/// Run one step of `trainer` at `batch` on `x`/`targets` with every kernel timed on the GPU
/// and wait for the times. It changes the parameters as a real step does: profile a trainer
/// whose state does not matter (a benchmark's, or a twin of a run's).
pub fn profile_gpu<'x>(
    ctx: &GpuContext,
    trainer: &mut Trainer,
    batch: usize,
    x: impl Into<BatchInput<'x>>,
    targets: BatchTargets<'_>,
) -> Result<GpuProfile> {
    write_batch(ctx, trainer.network(ctx, batch)?, x, &targets)?;
    let grads = trainer.store.grads.clone();
    let phases = trainer.step_phases(ctx, batch)?;
    let kernels: Vec<&Kernel> = phases.iter().map(|(_, k)| *k).collect();
    let mut timer = KernelTimer::new(ctx, "step profile", kernels.len(), 1)?;
    let mut encoder = ctx.device.create_command_encoder(&Default::default());
    encoder.clear_buffer(grads.raw(), 0, None);
    timer.submit(ctx, encoder, &kernels, 0)?;
    let times = timer.wait(ctx)?;
    let kernels: Vec<KernelProfile> = phases
        .iter()
        .zip(&times.ms)
        .map(|((phase, k), &ms)| KernelProfile {
            label: k.label.clone(),
            phase: phase.name(),
            ms,
        })
        .collect();
    let phases = Phase::ALL
        .iter()
        .map(|p| {
            let of: Vec<&KernelProfile> = kernels.iter().filter(|k| k.phase == p.name()).collect();
            PhaseProfile {
                phase: p.name(),
                ms: of.iter().fold(0.0, |sum, k| sum + k.ms),
                kernels: of.len(),
            }
        })
        .collect();
    Ok(GpuProfile {
        kernels_ms: kernels.iter().fold(0.0, |sum, k| sum + k.ms),
        kernels,
        phases,
        whole_ms: times.whole_ms,
    })
}

impl StepProfile {
    /// The profile as a table for people: phases, the slowest kernels, host times.
    pub fn table(&self, top: usize) -> String {
        let mut s = format!("profile on {}\n", self.adapter);
        match (&self.gpu, &self.gpu_unavailable) {
            (Some(g), _) => {
                s += &format!(
                    "GPU time per phase (one step, each kernel in its own timed pass): \
                     kernels {:.3} ms, first start to last end {:.3} ms\n",
                    g.kernels_ms, g.whole_ms
                );
                s += &format!(
                    "  {:<13} {:>10} {:>7} {:>8}\n",
                    "phase", "ms", "%", "kernels"
                );
                for p in &g.phases {
                    s += &format!(
                        "  {:<13} {:>10.3} {:>6.1}% {:>8}\n",
                        p.phase,
                        p.ms,
                        100.0 * p.ms / g.kernels_ms.max(1e-12),
                        p.kernels
                    );
                }
                let mut slow: Vec<&KernelProfile> = g.kernels.iter().collect();
                slow.sort_by(|a, b| b.ms.total_cmp(&a.ms));
                s += &format!("slowest kernels (of {}):\n", g.kernels.len());
                for k in slow.into_iter().take(top) {
                    s += &format!("  {:>10.3} ms  {:<13} {}\n", k.ms, k.phase, k.label);
                }
            }
            (None, why) => {
                s += &format!(
                    "GPU time per kernel: NOT MEASURED ({})\n",
                    why.as_deref().unwrap_or("no timestamp queries")
                );
            }
        }
        let h = &self.host;
        s += &format!(
            "host time per step (mean of {} steps): encode {:.3} ms, submit {:.3} ms, \
             read-back {:.3} ms\n",
            h.steps, h.encode_ms, h.submit_ms, h.readback_ms
        );
        s
    }
}

/// Profile `trainer`: `steps` timed steps for the host times (after the caller's warm-up),
/// then one step with every kernel timed on the GPU where the adapter has timestamp queries.
pub fn profile_steps<'x>(
    ctx: &GpuContext,
    trainer: &mut Trainer,
    batch: usize,
    x: impl Into<BatchInput<'x>> + Copy,
    targets: impl Fn() -> BatchTargets<'x>,
    steps: usize,
) -> Result<StepProfile> {
    trainer.finish(ctx)?;
    let before = trainer.host_times();
    for _ in 0..steps.max(1) {
        trainer.train_batch(ctx, batch, x, targets())?;
        trainer.poll_stats(ctx);
    }
    trainer.finish(ctx)?;
    let host = trainer.host_times().since(&before);
    let (gpu, gpu_unavailable) = match KernelTimer::unavailable(ctx) {
        Some(why) => (None, Some(why)),
        None => (Some(profile_gpu(ctx, trainer, batch, x, targets())?), None),
    };
    Ok(StepProfile {
        adapter: ctx.report.name.clone(),
        gpu,
        gpu_unavailable,
        host,
    })
}
