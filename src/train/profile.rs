//! Where a training step's time goes (`bench step --profile`, `train --profile`): GPU time
//! per kernel and per phase (forward, loss, backward, unscale, clip, optimizer, scale
//! update) from timestamp queries ([`crate::gpu::KernelTimer`]: every kernel in its own timed
//! pass), and the host's time per step (encoding with the batch upload, submitting, reading
//! back and waiting), which every [`Trainer`] accumulates in [`Trainer::host`].

use std::time::Duration;

use super::trainer::Trainer;
use crate::error::Result;
use crate::gpu::{GpuContext, Kernel};
#[cfg(not(target_arch = "wasm32"))]
use {
    super::batch::{BatchInput, BatchTargets},
    crate::gpu::KernelTimer,
};

/// The part of a step a kernel belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Reset the step's found-inf flag, cast the master weights.
    Setup,
    Forward,
    /// The loss and its scale-seeded gradient.
    Loss,
    Backward,
    /// Unscale and inf/NaN check (and, in pure f16, rounding the gradients).
    Unscale,
    Clip,
    /// The optimizer step (and, in pure f16, rounding the parameters).
    Optimizer,
    ScaleUpdate,
}

impl Phase {
    pub const ALL: [Phase; 8] = [
        Phase::Setup,
        Phase::Forward,
        Phase::Loss,
        Phase::Backward,
        Phase::Unscale,
        Phase::Clip,
        Phase::Optimizer,
        Phase::ScaleUpdate,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Phase::Setup => "setup",
            Phase::Forward => "forward",
            Phase::Loss => "loss",
            Phase::Backward => "backward",
            Phase::Unscale => "unscale",
            Phase::Clip => "clip",
            Phase::Optimizer => "optimizer",
            Phase::ScaleUpdate => "scale-update",
        }
    }
}

/// A clock for host timing that costs nothing where there is none (the web, where
/// `std::time::Instant` is unavailable: host times read zero there).
#[derive(Clone, Copy)]
pub(crate) struct Clock {
    #[cfg(not(target_arch = "wasm32"))]
    start: std::time::Instant,
}

impl Clock {
    pub(crate) fn now() -> Clock {
        Clock {
            #[cfg(not(target_arch = "wasm32"))]
            start: std::time::Instant::now(),
        }
    }

    pub(crate) fn elapsed(&self) -> Duration {
        #[cfg(not(target_arch = "wasm32"))]
        return self.start.elapsed();
        #[cfg(target_arch = "wasm32")]
        Duration::ZERO
    }
}

/// Host time spent by a trainer's steps since it was made (or reset).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct HostTimes {
    /// Optimizer steps submitted.
    pub steps: u64,
    /// Uploading the batch and recording the command buffers.
    pub encode: Duration,
    /// `queue.submit` (and starting the stats map).
    pub submit: Duration,
    /// Reading stats back: polling, and every wait for the GPU (throttle waits, `finish`).
    pub readback: Duration,
}

/// Host time per step, in milliseconds.
#[derive(Clone, Debug, serde::Serialize)]
pub struct HostProfile {
    pub steps: u64,
    pub encode_ms: f64,
    pub submit_ms: f64,
    pub readback_ms: f64,
}

impl HostTimes {
    /// Per-step means of the times since `before` was taken.
    pub fn since(&self, before: &HostTimes) -> HostProfile {
        let steps = self.steps.saturating_sub(before.steps);
        let per = |now: Duration, then: Duration| {
            1e3 * now.saturating_sub(then).as_secs_f64() / steps.max(1) as f64
        };
        HostProfile {
            steps,
            encode_ms: per(self.encode, before.encode),
            submit_ms: per(self.submit, before.submit),
            readback_ms: per(self.readback, before.readback),
        }
    }
}

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

impl Trainer {
    /// The kernels after the backward with their phases, in PyTorch's order: (pure f16:
    /// round the gradients) → unscale → clip → optimizer step → (pure f16: round the
    /// parameters) → scale update.
    pub(super) fn finish_phases(&self) -> Vec<(Phase, &Kernel)> {
        let mut kernels: Vec<(Phase, &Kernel)> = Vec::new();
        for k in self.round_grads.iter().chain(&self.unscale) {
            kernels.push((Phase::Unscale, k));
        }
        for k in self.clipper.iter().flat_map(|c| c.kernels()) {
            kernels.push((Phase::Clip, k));
        }
        kernels.push((Phase::Optimizer, self.optimizer.step_kernel()));
        if let Some(k) = &self.round_params {
            kernels.push((Phase::Optimizer, k));
        }
        if let Some(k) = &self.update {
            kernels.push((Phase::ScaleUpdate, k));
        }
        kernels
    }

    /// Every kernel of one optimizer step at `batch` with its phase, in the order
    /// [`Trainer::train_batch`] records them ([`Trainer::step_kernels`]).
    pub fn step_phases(&mut self, ctx: &GpuContext, batch: usize) -> Result<Vec<(Phase, &Kernel)>> {
        self.network(ctx, batch)?;
        let net = self.planned_network(batch).expect("planned above");
        let mut kernels: Vec<(Phase, &Kernel)> = Vec::new();
        kernels.push((Phase::Setup, &self.begin_step));
        kernels.extend(self.weight_cast.iter().map(|k| (Phase::Setup, k)));
        kernels.extend(net.forward_kernels().map(|k| (Phase::Forward, k)));
        kernels.extend(net.loss_kernels().map(|k| (Phase::Loss, k)));
        kernels.extend(net.backward_kernels().map(|k| (Phase::Backward, k)));
        kernels.extend(self.finish_phases());
        Ok(kernels)
    }

    /// Run one step at `batch` on `x`/`targets` with every kernel timed on the GPU and wait
    /// for the times (native). It changes the parameters as a real step does: profile a
    /// trainer whose state does not matter (a benchmark's, or a twin of a run's).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn profile_gpu<'x>(
        &mut self,
        ctx: &GpuContext,
        batch: usize,
        x: impl Into<BatchInput<'x>>,
        targets: BatchTargets<'_>,
    ) -> Result<GpuProfile> {
        self.network(ctx, batch)?;
        let net = self.planned_network(batch).expect("planned above");
        Trainer::write_batch(ctx, net, x, &targets)?;
        let grads = self.store.grads.clone();
        let phases = self.step_phases(ctx, batch)?;
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
                let of: Vec<&KernelProfile> =
                    kernels.iter().filter(|k| k.phase == p.name()).collect();
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
#[cfg(not(target_arch = "wasm32"))]
pub fn profile_steps<'x>(
    ctx: &GpuContext,
    trainer: &mut Trainer,
    batch: usize,
    x: impl Into<BatchInput<'x>> + Copy,
    targets: impl Fn() -> BatchTargets<'x>,
    steps: usize,
) -> Result<StepProfile> {
    trainer.finish(ctx)?;
    let before = trainer.host;
    for _ in 0..steps.max(1) {
        trainer.train_batch(ctx, batch, x, targets())?;
        trainer.poll_stats(ctx);
    }
    trainer.finish(ctx)?;
    let host = trainer.host.since(&before);
    let (gpu, gpu_unavailable) = match KernelTimer::unavailable(ctx) {
        Some(why) => (None, Some(why)),
        None => (Some(trainer.profile_gpu(ctx, batch, x, targets())?), None),
    };
    Ok(StepProfile {
        adapter: ctx.report.name.clone(),
        gpu,
        gpu_unavailable,
        host,
    })
}
