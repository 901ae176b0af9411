//! How a run is set up, and the one place its settings are checked.
//!
//! - [`StepConfig::new`]: what shapes one step (precision, loss, optimizer), with PyTorch's
//!   defaults for the rest (a GradScaler where the precision wants one, no clipping, one
//!   micro-batch per step, a constant learning rate), changed with setters;
//! - [`RunConfig::new`]: how long and on what (a step and a batch size), with the defaults of
//!   a plain loop (one epoch, seed 0, shuffled, validated, no checkpoints), changed with setters.
//!
//! [`RunConfig::validate`] (which includes [`StepConfig::validate`]) is the only validation of
//! these settings: [`Trainer::new`](super::Trainer::new) and [`Run::new`](super::Run::new) call
//! it, and front ends call it first to fail before loading data. Its messages name each
//! [`Setting`] in words, or the way a front end names it ([`RunConfig::validate_named`]: the
//! CLI names its flags), so every front end (the CLI's `train` and `compare`, the app and the
//! browser, the examples, the tests) shares one set of checks and messages.

use super::settings::{
    EVAL_BATCHES, MAX_BATCH_SIZE, MAX_COUNT, MAX_EVAL_BATCHES, MAX_GRAD_ACCUM, MAX_GROWTH_INTERVAL,
    Setting, check_count, out_of_range, range_message,
};
use crate::amp::policy::Precision;
use crate::amp::scaler::ScalerConfig;
use crate::error::{Error, Result};
use crate::nn::LossKind;
use crate::ops::buffers::OnSkippedStep;
use crate::optim::{LrSchedule, OptimizerConfig};

/// Everything that shapes a training step. Make it with [`StepConfig::new`].
#[derive(Clone, Debug)]
pub struct StepConfig {
    pub precision: Precision,
    pub loss: LossKind,
    pub optimizer: OptimizerConfig,
    pub scaler: ScalerConfig,
    /// Clip gradients to this global L2 norm, after unscaling (`None` or 0: no clipping).
    pub clip_grad_norm: Option<f32>,
    /// Cross-entropy's label smoothing, PyTorch's `CrossEntropyLoss(label_smoothing=...)`
    /// (0: none, the default).
    pub label_smoothing: f32,
    /// Micro-batches per optimizer step.
    pub grad_accum: usize,
    /// What a skipped step does to the layers' buffers (BatchNorm's running statistics):
    /// [`OnSkippedStep::Keep`] by default, `UpdateAnyway` for PyTorch's pytorch#88474.
    pub buffers_on_skip: OnSkippedStep,
    /// The learning rate of each optimizer step, from the optimizer's (written ahead of the
    /// step's last submit).
    pub lr_schedule: LrSchedule,
    /// Count per-layer numerics on every N-th optimizer step (`None`: off, the default;
    /// [`crate::train::numerics`]).
    pub numerics: Option<u64>,
    /// With numerics on, also each tensor's binade histogram (the app draws it; it costs an
    /// atomic per value).
    pub numerics_histograms: bool,
    /// With numerics on, count each tensor in a pass of its own right where it is complete
    /// (the plan the grouped passes are checked against; more dispatches, same counts).
    pub numerics_one_pass_each: bool,
}

impl StepConfig {
    /// A step of `precision` training on `loss` with `optimizer`, and PyTorch's defaults: a
    /// GradScaler with its default settings, on where the precision wants one (amp-f16),
    /// no clipping, one micro-batch per step, a constant learning rate.
    pub fn new(precision: Precision, loss: LossKind, optimizer: OptimizerConfig) -> Self {
        Self {
            precision,
            loss,
            optimizer,
            scaler: ScalerConfig {
                enabled: precision.scaler_enabled_by_default(),
                ..ScalerConfig::default()
            },
            clip_grad_norm: None,
            label_smoothing: 0.0,
            grad_accum: 1,
            buffers_on_skip: OnSkippedStep::Keep,
            lr_schedule: LrSchedule::Constant,
            numerics: None,
            numerics_histograms: false,
            numerics_one_pass_each: false,
        }
    }

    /// Count per-layer numerics on every `every`-th optimizer step from the first (`None`:
    /// off).
    pub fn numerics(mut self, every: Option<u64>) -> Self {
        self.numerics = every;
        self
    }

    /// With numerics on, also count each tensor's binade histogram (what the app draws).
    pub fn numerics_histograms(mut self, on: bool) -> Self {
        self.numerics_histograms = on;
        self
    }

    /// With numerics on, count each tensor in a pass of its own right where it is complete,
    /// not every tensor complete at one point in one pass (the reference plan).
    pub fn numerics_one_pass_each(mut self, on: bool) -> Self {
        self.numerics_one_pass_each = on;
        self
    }

    /// The GradScaler's settings (its `enabled` included).
    pub fn scaler(mut self, scaler: ScalerConfig) -> Self {
        self.scaler = scaler;
        self
    }

    /// Turn the GradScaler on or off, keeping its other settings.
    pub fn scaler_enabled(mut self, enabled: bool) -> Self {
        self.scaler.enabled = enabled;
        self
    }

    /// Clip gradients to this global L2 norm after unscaling (`None` or 0: no clipping).
    pub fn clip_grad_norm(mut self, max: Option<f32>) -> Self {
        self.clip_grad_norm = max;
        self
    }

    /// Cross-entropy's label smoothing in [0, 1] (0: none).
    pub fn label_smoothing(mut self, smoothing: f32) -> Self {
        self.label_smoothing = smoothing;
        self
    }

    /// Micro-batches per optimizer step.
    pub fn grad_accum(mut self, micro_batches: usize) -> Self {
        self.grad_accum = micro_batches;
        self
    }

    pub fn lr_schedule(mut self, schedule: LrSchedule) -> Self {
        self.lr_schedule = schedule;
        self
    }

    /// The norm gradients are clipped to, if any (0 means none).
    pub fn clip_norm(&self) -> Option<f32> {
        self.clip_grad_norm.filter(|&max| max != 0.0)
    }

    /// [`StepConfig::validate_named`] with every setting in words.
    pub fn validate(&self) -> Result<()> {
        self.validate_named(Setting::words)
    }

    /// Check the step's settings, each against its range ([`Setting::range`]): gradient
    /// accumulation, the clipping norm, the optimizer's, GradScaler's and schedule's numbers,
    /// and the schedule against the optimizer (a decay that ends above the learning rate
    /// would raise it). `name` says how messages name a [`Setting`].
    pub fn validate_named(&self, name: fn(Setting) -> &'static str) -> Result<()> {
        self.check_grad_accum(name)?;
        if let Some(max) = self.clip_grad_norm
            && !(max >= 0.0 && max.is_finite())
        {
            return Err(out_of_range(
                name,
                Setting::ClipGradNorm,
                format!("{max:?}"),
            ));
        }
        let smoothing = self.label_smoothing;
        if !(0.0..=1.0).contains(&smoothing) {
            let got = format!("{smoothing:?}");
            return Err(out_of_range(name, Setting::LabelSmoothing, got));
        }
        if smoothing != 0.0 && self.loss != LossKind::CrossEntropy {
            return Err(Error::InvalidArgument(format!(
                "{} applies to the cross-entropy loss, not mse",
                name(Setting::LabelSmoothing)
            )));
        }
        self.check_optimizer(name)?;
        self.check_scaler(name)?;
        self.check_schedule(name)
    }

    fn check_grad_accum(&self, name: fn(Setting) -> &'static str) -> Result<()> {
        check_count(
            name,
            Setting::GradAccum,
            self.grad_accum as u64,
            MAX_GRAD_ACCUM as u64,
        )
    }

    /// The optimizer's numbers in the order PyTorch's constructor checks them; a value out
    /// of range also gets PyTorch's words (`AdamW: Invalid beta parameter at index 1: 1`).
    fn check_optimizer(&self, name: fn(Setting) -> &'static str) -> Result<()> {
        let at_least_zero = |v: f32| v >= 0.0 && v.is_finite();
        let below_one = |v: f32| (0.0..1.0).contains(&v);
        let lr = self.optimizer.lr();
        let mut values = vec![(Setting::Lr, lr, at_least_zero(lr))];
        if let Some(s) = self.optimizer.sgd_settings() {
            values.extend([
                (Setting::Momentum, s.momentum, at_least_zero(s.momentum)),
                (Setting::Dampening, s.dampening, s.dampening.is_finite()),
                (
                    Setting::WeightDecay,
                    s.weight_decay,
                    at_least_zero(s.weight_decay),
                ),
            ]);
        }
        if let Some(a) = self.optimizer.adam_settings() {
            values.extend([
                (Setting::Eps, a.eps, at_least_zero(a.eps)),
                (Setting::Beta1, a.beta1, below_one(a.beta1)),
                (Setting::Beta2, a.beta2, below_one(a.beta2)),
                (
                    Setting::WeightDecay,
                    a.weight_decay,
                    at_least_zero(a.weight_decay),
                ),
            ]);
        }
        if let Some(&(setting, value, _)) = values.iter().find(|(_, _, ok)| !ok) {
            let pytorch = match self.optimizer.validate() {
                Err(Error::InvalidArgument(words)) => format!(" ({words})"),
                _ => String::new(),
            };
            let got = format!("{value:?}");
            return bad(format!("{}{pytorch}", range_message(name, setting, got)));
        }
        // What is left: settings that contradict each other (Nesterov without momentum).
        self.optimizer.validate()
    }

    fn check_scaler(&self, name: fn(Setting) -> &'static str) -> Result<()> {
        let s = &self.scaler;
        // The step takes any positive scale, as PyTorch's GradScaler: a subnormal one is the
        // state backing off can reach, and the skip guarantee covers it. A run refuses one as
        // a setting (RunConfig::validate_named).
        if !(s.init_scale > 0.0 && s.init_scale.is_finite()) {
            return bad(format!(
                "{} must be finite and > 0, got {:e}",
                name(Setting::InitScale),
                s.init_scale
            ));
        }
        if !(s.growth_factor > 1.0 && s.growth_factor.is_finite()) {
            let got = format!("{:?}", s.growth_factor);
            return Err(out_of_range(name, Setting::GrowthFactor, got));
        }
        if !(s.backoff_factor > 0.0 && s.backoff_factor < 1.0) {
            let got = format!("{:?}", s.backoff_factor);
            return Err(out_of_range(name, Setting::BackoffFactor, got));
        }
        check_count(
            name,
            Setting::GrowthInterval,
            s.growth_interval as u64,
            MAX_GROWTH_INTERVAL as u64,
        )?;
        s.validate()
    }

    /// A cosine decay: its steps in range, warm-up before the decay ends, and a final rate
    /// finite, non-negative and not above the learning rate.
    fn check_schedule(&self, name: fn(Setting) -> &'static str) -> Result<()> {
        if let LrSchedule::Cosine {
            warmup_steps,
            decay_steps,
            min_lr,
        } = self.lr_schedule
        {
            check_count(name, Setting::LrDecaySteps, decay_steps, MAX_COUNT)?;
            if warmup_steps >= decay_steps {
                return Err(out_of_range(
                    name,
                    Setting::WarmupSteps,
                    format!(
                        "{warmup_steps}, and the decay ends at step {decay_steps} ({}; by \
                         default the run's step budget)",
                        name(Setting::LrDecaySteps)
                    ),
                ));
            }
            let lr = self.optimizer.lr();
            if !(min_lr >= 0.0 && min_lr.is_finite()) {
                return Err(out_of_range(name, Setting::MinLr, format!("{min_lr:?}")));
            }
            if min_lr > lr {
                return Err(out_of_range(
                    name,
                    Setting::MinLr,
                    format!(
                        "{min_lr:?} with {} {lr:?}: the decay would raise the rate",
                        name(Setting::Lr)
                    ),
                ));
            }
        }
        self.lr_schedule.validate()
    }
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
    /// fell below [`super::settings::MIN_SCALE`] (0: never; default
    /// [`super::settings::MAX_SKIPPED_STEPS`]).
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
            max_skipped_steps: super::settings::MAX_SKIPPED_STEPS,
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

fn bad(message: String) -> Result<()> {
    Err(Error::InvalidArgument(message))
}
