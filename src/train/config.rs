//! How a run is set up: [`StepConfig`] (what shapes one step) and [`RunConfig`] (how long
//! and on what), and the checks of their limits.

use crate::amp::policy::Precision;
use crate::amp::scaler::ScalerConfig;
use crate::error::{Error, Result};
use crate::nn::LossKind;
use crate::optim::{LrSchedule, OptimizerConfig};

/// Batches per split of an estimate by default. nanoGPT's `eval_iters` is 200 (at batch 64
/// and block 256 on a GPU); 20 batches keep an estimate of `gpt-tiny` a few seconds on a CPU
/// adapter while averaging 20·B·T tokens (40,960 at batch 32, block 64): enough to resolve
/// the 0.03 differences that matter here (see README, Training a GPT).
pub const EVAL_BATCHES: usize = 20;

/// Everything that shapes a training step.
#[derive(Clone, Debug)]
pub struct StepConfig {
    pub precision: Precision,
    pub loss: LossKind,
    pub optimizer: OptimizerConfig,
    pub scaler: ScalerConfig,
    /// Clip gradients to this global L2 norm, after unscaling.
    pub clip_grad_norm: Option<f32>,
    /// Micro-batches per optimizer step.
    pub grad_accum: usize,
    /// The learning rate of each optimizer step, from the optimizer's (written ahead of the
    /// step's last submit).
    pub lr_schedule: LrSchedule,
}

/// Periodic loss estimates and the size of token data sets' validation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EvalConfig {
    /// Estimate the training and validation loss after every N-th optimizer step.
    pub every: Option<u64>,
    /// Random batches per split of an estimate, and of the epoch-end and final validation of
    /// token data sets.
    pub batches: usize,
}

impl Default for EvalConfig {
    fn default() -> Self {
        Self {
            every: None,
            batches: EVAL_BATCHES,
        }
    }
}

/// How long and on what to train.
#[derive(Clone, Debug)]
pub struct RunConfig {
    pub step: StepConfig,
    pub batch_size: usize,
    /// Stop after this many epochs (default 1 when neither limit is set)...
    pub epochs: Option<u64>,
    /// ...or after this many optimizer steps, whichever comes first.
    pub steps: Option<u64>,
    pub seed: u64,
    pub shuffle: bool,
    /// Write a checkpoint every N optimizer steps (to `save_path`).
    pub save_every: Option<u64>,
    pub save_path: Option<std::path::PathBuf>,
    /// Skip validation (it costs a readback per batch).
    pub validate: bool,
    /// Periodic loss estimates (nanoGPT's `estimate_loss`) and how many random batches the
    /// validation of token data sets uses.
    pub eval: EvalConfig,
}

/// The most micro-batches one optimizer step may accumulate. Each is a submit and a word of
/// the step's metrics; far beyond any effective batch PyTorch users accumulate (a few
/// hundred), and low enough that every count derived from it stays far from overflow.
pub const MAX_GRAD_ACCUM: usize = 1 << 16;

impl RunConfig {
    /// Optimizer steps the run takes over a training set of `samples` (per process), when it
    /// can be known up front (the step limit, or whole epochs of the step's batches).
    pub fn planned_steps(&self, samples: usize) -> Option<u64> {
        let batches = samples.div_ceil(self.batch_size.max(1));
        let per_epoch = (batches / self.step.grad_accum.max(1)) as u64;
        let by_epochs = self
            .epochs
            .or(if self.steps.is_none() { Some(1) } else { None })
            .map(|e| e.saturating_mul(per_epoch));
        match (by_epochs, self.steps) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Checks the limits without touching data or the GPU: positive batch size, step and
    /// epoch limits and checkpoint interval, gradient accumulation within
    /// [`MAX_GRAD_ACCUM`], and an effective batch (`batch_size × grad_accum`) that fits in
    /// 64 bits. [`Run::new`](super::Run::new) calls it; front ends call it first to fail before loading data.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidArgument(m));
        if self.batch_size == 0 {
            return bad("batch size must be at least 1".into());
        }
        if self.steps == Some(0) {
            return bad("the step limit must be at least 1".into());
        }
        if self.epochs == Some(0) {
            return bad("the epoch limit must be at least 1".into());
        }
        let accum = self.step.grad_accum;
        if accum == 0 {
            return bad("gradient accumulation needs at least 1 micro-batch per step".into());
        }
        if accum > MAX_GRAD_ACCUM {
            return bad(format!(
                "gradient accumulation over {accum} micro-batches is above the limit of \
                 {MAX_GRAD_ACCUM} per optimizer step"
            ));
        }
        if (self.batch_size as u64).checked_mul(accum as u64).is_none() {
            return bad(format!(
                "batch size {} × {accum} accumulated micro-batches overflows 64 bits",
                self.batch_size
            ));
        }
        if self.eval.every == Some(0) || self.eval.batches == 0 {
            return bad(format!(
                "loss estimates need at least 1 step between them and 1 batch each, got {:?}",
                self.eval
            ));
        }
        match (self.save_every, &self.save_path) {
            (Some(0), _) => bad("periodic checkpoints need an interval of at least 1 step".into()),
            (Some(_), None) => bad("periodic checkpoints need a checkpoint path".into()),
            _ => Ok(()),
        }
    }
}
