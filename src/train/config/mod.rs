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

mod run;

pub use run::{EvalConfig, Interrupt, RunConfig};

use super::settings::{
    MAX_COUNT, MAX_GRAD_ACCUM, MAX_GROWTH_INTERVAL, Setting, check_count, out_of_range,
    range_message,
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

fn bad(message: String) -> Result<()> {
    Err(Error::InvalidArgument(message))
}
