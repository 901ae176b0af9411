//! How long and on what a run trains ([`RunConfig`]), its periodic evaluation
//! ([`EvalConfig`]) and how it is interrupted ([`Interrupt`]); the step's own settings are
//! the parent's [`StepConfig`].

use super::{StepConfig, bad};
use crate::error::Result;
use crate::train::settings::{
    EVAL_BATCHES, MAX_BATCH_SIZE, MAX_COUNT, MAX_EVAL_BATCHES, Setting, check_count, out_of_range,
};

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

/// How long and on what to train. Make it with [`RunConfig::new`].
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
    /// Validate on the held-out set at epoch ends and at the end (it costs a readback per
    /// 256 batches).
    pub validate: bool,
    /// Periodic loss estimates (nanoGPT's `estimate_loss`) and how many random batches the
    /// validation of token data sets uses.
    pub eval: EvalConfig,
    /// Stop early when asked (the CLI: on SIGINT or SIGTERM), and where to save then.
    pub interrupt: Option<Interrupt>,
    /// End the run when the GradScaler has skipped this many steps in a row, or its scale
    /// fell below [`crate::train::settings::MIN_SCALE`] (0: never; default
    /// [`crate::train::settings::MAX_SKIPPED_STEPS`]).
    pub max_skipped_steps: u64,
    /// Crop and flip the training images on the GPU (`ops::augment`; default none).
    pub augment: Option<crate::ops::augment::Augment>,
    /// Validate on each image's logits averaged with its mirror image's (default off).
    pub flip_tta: bool,
}

/// How a run is interrupted ([`RunConfig::on_interrupt`]): it asks `requested` before each
/// micro-batch that would start an optimizer step, so it stops at a step boundary; the
/// blocking loop ([`crate::train::Run::run`]) then reports every step submitted and saves a
/// checkpoint to `save_path`, or to `save_to` when there is none.
#[derive(Clone, Debug)]
pub struct Interrupt {
    /// Whether to stop now ([`crate::interrupt::requested`] for signals).
    pub requested: fn() -> bool,
    /// Where an interrupted run without a checkpoint path saves.
    pub save_to: Option<std::path::PathBuf>,
}

impl RunConfig {
    /// `step` on batches of `batch_size`: one epoch (unless [`RunConfig::steps`] or
    /// [`RunConfig::epochs`] say otherwise), seed 0, shuffled, validated at the end, no
    /// checkpoints, no periodic loss estimates.
    pub fn new(step: StepConfig, batch_size: usize) -> Self {
        Self {
            step,
            batch_size,
            epochs: None,
            steps: None,
            seed: 0,
            shuffle: true,
            save_every: None,
            save_path: None,
            validate: true,
            eval: EvalConfig::default(),
            interrupt: None,
            max_skipped_steps: crate::train::settings::MAX_SKIPPED_STEPS,
            augment: None,
            flip_tta: false,
        }
    }

    /// Train on augmented images (`None`: as they are), drawn from the run's seed; with
    /// `flip_tta`, validate with flip test-time augmentation.
    pub fn augment(
        mut self,
        augment: Option<crate::ops::augment::Augment>,
        flip_tta: bool,
    ) -> Self {
        self.augment = augment;
        self.flip_tta = flip_tta;
        self
    }

    /// End the run after this many skipped steps in a row (0: never).
    pub fn max_skipped_steps(mut self, steps: u64) -> Self {
        self.max_skipped_steps = steps;
        self
    }

    /// Stop early when `interrupt` says so (default: never).
    pub fn on_interrupt(mut self, interrupt: Interrupt) -> Self {
        self.interrupt = Some(interrupt);
        self
    }

    /// Whether the run was asked to stop.
    pub fn interrupt_requested(&self) -> bool {
        self.interrupt.as_ref().is_some_and(|i| (i.requested)())
    }

    /// Stop after this many optimizer steps (`None`: no step limit).
    pub fn steps(mut self, steps: impl Into<Option<u64>>) -> Self {
        self.steps = steps.into();
        self
    }

    /// Stop after this many epochs (`None`: no epoch limit; one epoch when there is no step
    /// limit either).
    pub fn epochs(mut self, epochs: impl Into<Option<u64>>) -> Self {
        self.epochs = epochs.into();
        self
    }

    /// The seed the data order (and dropout) derive from.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Shuffle each epoch (default) or keep the data set's order.
    pub fn shuffle(mut self, shuffle: bool) -> Self {
        self.shuffle = shuffle;
        self
    }

    /// Validate on the held-out set at epoch ends and at the end (default on).
    pub fn validate_each_epoch(mut self, validate: bool) -> Self {
        self.validate = validate;
        self
    }

    /// Write the final checkpoint to `path`, and one every `every` optimizer steps.
    pub fn save(mut self, every: Option<u64>, path: Option<std::path::PathBuf>) -> Self {
        self.save_every = every;
        self.save_path = path;
        self
    }

    /// Periodic loss estimates, and the random batches token data sets validate on.
    pub fn eval(mut self, eval: EvalConfig) -> Self {
        self.eval = eval;
        self
    }

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

    /// [`RunConfig::validate_named`] with every setting in words.
    pub fn validate(&self) -> Result<()> {
        self.validate_named(Setting::words)
    }

    /// Check every setting without touching data or the GPU, each against its range
    /// ([`Setting::range`]): the batch size, the step and epoch limits, the step's settings
    /// ([`StepConfig::validate_named`]), the loss estimates' interval and batches, and a
    /// checkpoint interval with a path to write to. `name` says how messages name a
    /// [`Setting`].
    pub fn validate_named(&self, name: fn(Setting) -> &'static str) -> Result<()> {
        check_count(
            name,
            Setting::BatchSize,
            self.batch_size as u64,
            MAX_BATCH_SIZE as u64,
        )?;
        self.step.check_grad_accum(name)?;
        for (setting, limit) in [(Setting::Steps, self.steps), (Setting::Epochs, self.epochs)] {
            if let Some(n) = limit {
                check_count(name, setting, n, MAX_COUNT)?;
            }
        }
        // A subnormal scale has no finite f32 reciprocal: unscaling would make every gradient
        // inf or NaN, and the run would skip every step and blame the data. (Checked before
        // the step's settings, which take any positive scale.)
        let scale = self.step.scaler.init_scale;
        if !(scale >= f32::MIN_POSITIVE && scale.is_finite()) {
            return Err(out_of_range(name, Setting::InitScale, format!("{scale:?}")));
        }
        self.step.validate_named(name)?;
        if let Some(every) = self.eval.every {
            check_count(name, Setting::EvalEvery, every, MAX_COUNT)?;
        }
        check_count(
            name,
            Setting::EvalBatches,
            self.eval.batches as u64,
            MAX_EVAL_BATCHES as u64,
        )?;
        if self.max_skipped_steps > MAX_COUNT {
            return Err(out_of_range(
                name,
                Setting::MaxSkippedSteps,
                self.max_skipped_steps,
            ));
        }
        match (self.save_every, &self.save_path) {
            (Some(_), None) => bad(format!(
                "{} needs {}",
                name(Setting::SaveEvery),
                name(Setting::SavePath)
            )),
            (Some(every), _) => check_count(name, Setting::SaveEvery, every, MAX_COUNT),
            _ => Ok(()),
        }
    }
}
