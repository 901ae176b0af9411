//! One precision mode's run in the app's session ([`super::session`]): its training run, what
//! came back of it (step stats, validation accuracy, GPU times, samples, numerics) and the
//! probes still on their way.

use super::numerics_history::NumericsHistory;
use super::probes::eval::EvalProbe;
use super::probes::profile::{KernelTime, Profiler};
use super::probes::sample::SampleProbe;
use crate::amp::policy::Precision;
use crate::train::{Run, StepStats, Trainer};

/// One precision mode's run.
pub struct ModeRun {
    pub precision: Precision,
    pub scaler_enabled: bool,
    pub batch_size: usize,
    pub(super) run: Run,
    /// Every finished step, in order (step `i + 1` at index `i`).
    pub history: Vec<StepStats>,
    /// (step, accuracy on the held-out samples).
    pub val_accuracy: Vec<(u64, f32)>,
    /// (step, GPU ms of one whole step) from the kernel profiles.
    pub gpu_ms: Vec<(u64, f64)>,
    /// Kernels of the latest profile, in step order.
    pub kernel_times: Vec<KernelTime>,
    /// Bytes this mode's planned step allocated: parameters, gradients, low-precision
    /// weight copy, optimizer state, scaler, activations and their gradients. Everything is
    /// allocated once, so this is also its peak.
    pub memory_bytes: u64,
    /// (step, text) sampled from a GPT run, oldest first.
    pub samples: Vec<(u64, String)>,
    /// Its counted steps' per-layer numerics (numerics on).
    pub numerics: NumericsHistory,
    pub(super) eval: Option<EvalProbe>,
    pub(super) profiler: Option<Profiler>,
    pub(super) sampler: Option<SampleProbe>,
}

impl ModeRun {
    pub fn trainer(&self) -> &Trainer {
        &self.run.trainer
    }

    /// Optimizer steps submitted.
    pub fn submitted(&self) -> u64 {
        self.run.progress.step
    }

    /// Latest GPU ms per step, if a profile has landed.
    pub fn latest_gpu_ms(&self) -> Option<f64> {
        self.gpu_ms.last().map(|&(_, ms)| ms)
    }

    /// A text sample is on its way back (GPT runs).
    pub fn sampling(&self) -> bool {
        self.sampler.as_ref().is_some_and(SampleProbe::in_flight)
    }

    /// Seconds the latest landed sample took on the GPU queue once the training steps ahead
    /// of it had landed ([`SampleProbe::last_secs`]); `None` before one has landed.
    pub fn sample_secs(&self) -> Option<f64> {
        self.sampler.as_ref().and_then(|s| s.last_secs)
    }

    pub fn skipped_steps(&self) -> usize {
        self.history.iter().filter(|s| s.skipped).count()
    }

    /// The GradScaler's scale after the last finished step (1 without a scaler).
    pub fn final_scale(&self) -> Option<f32> {
        self.history.last().map(|s| s.scale_after)
    }

    /// Steps, validations or profiles still on their way back.
    pub(super) fn in_flight(&self) -> bool {
        self.run.steps_in_flight() > 0
            || self.eval.as_ref().is_some_and(EvalProbe::in_flight)
            || self.profiler.as_ref().is_some_and(Profiler::in_flight)
            || self.sampler.as_ref().is_some_and(SampleProbe::in_flight)
    }

    /// Every step submitted and reported (and a GPT's last sample taken).
    pub(super) fn finished(&self) -> bool {
        self.run.done()
            && self.run.steps_in_flight() == 0
            && self.sampler.as_ref().is_none_or(SampleProbe::done)
    }
}
