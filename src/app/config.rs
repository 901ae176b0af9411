//! What the app trains and where a session is: the setup panel edits a [`SessionConfig`],
//! Start hands it to the [`super::session::Session`], whose [`Status`] the panels show.

use crate::amp::policy::Precision;
use crate::amp::scaler::ScalerConfig;
use crate::error::{Error, Result};
use crate::nn::LossKind;
use crate::optim::OptimizerConfig;
use crate::train::{RunConfig, Setting, StepConfig};

/// Data sets the setup panel offers (`mnist`, `fashion-mnist` and `shakespeare` need
/// `scripts/fetch-data.sh` first; the error says so). `hamlet` (text in the binary) and
/// `shakespeare` train the GPT presets.
#[cfg(not(target_arch = "wasm32"))]
pub const DATASETS: &[&str] = &[
    "default",
    "fashion-mnist",
    "mnist",
    "synthetic:512",
    "hamlet",
    "shakespeare",
];
/// Data sets the page offers: those in the wasm itself (a page reads no local files);
/// `hamlet` is text, for the GPT presets.
#[cfg(target_arch = "wasm32")]
pub const DATASETS: &[&str] = &["default", "synthetic:512", "hamlet"];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OptimizerKind {
    Sgd,
    Adam,
    AdamW,
}

impl OptimizerKind {
    pub const ALL: [OptimizerKind; 3] = [Self::Sgd, Self::Adam, Self::AdamW];

    pub fn name(self) -> &'static str {
        match self {
            Self::Sgd => "SGD",
            Self::Adam => "Adam",
            Self::AdamW => "AdamW",
        }
    }

    pub fn config(self, lr: f32) -> OptimizerConfig {
        match self {
            Self::Sgd => OptimizerConfig::sgd(lr),
            Self::Adam => OptimizerConfig::adam(lr),
            Self::AdamW => OptimizerConfig::adamw(lr),
        }
    }
}

/// What a session trains: the setup panel edits one of these, Start hands it over.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionConfig {
    /// A preset name (the setup panel lists the app's models).
    pub model: String,
    /// A data set name ([`DATASETS`], or anything [`crate::data::DataSource`] parses).
    pub dataset: String,
    pub batch_size: usize,
    pub optimizer: OptimizerKind,
    pub lr: f32,
    /// Optimizer steps per mode.
    pub steps: u64,
    pub seed: u64,
    /// Modes to train side by side, in display order.
    pub modes: Vec<Precision>,
    /// GradScaler settings; `enabled` is per mode (on for amp-f16, as PyTorch recommends)
    /// unless `scaler_everywhere` turns it on for every low-precision mode.
    pub scaler: ScalerConfig,
    pub scaler_everywhere: bool,
    /// Most steps one mode submits per frame.
    pub steps_per_frame: usize,
    /// Validate every this many steps (and at the end), on `eval_samples` held-out samples;
    /// [`SessionConfig::NEVER`]: not at all.
    pub eval_every: u64,
    pub eval_samples: usize,
    /// Profile every kernel of a step (GPU timestamps) every this many steps;
    /// [`SessionConfig::NEVER`]: not at all.
    pub profile_every: u64,
    /// A GPT samples a short text every this many steps (and at the end);
    /// [`SessionConfig::NEVER`]: not at all.
    pub sample_every: u64,
    /// Count per-layer numerics every this many steps (`None`: off, the default); the
    /// Numerics panel draws them.
    pub numerics: Option<u64>,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            model: "mlp".into(),
            dataset: "default".into(),
            batch_size: 64,
            optimizer: OptimizerKind::Adam,
            lr: 1e-3,
            steps: 300,
            seed: 0,
            modes: vec![Precision::F32, Precision::AmpF16],
            scaler: ScalerConfig::default(),
            scaler_everywhere: false,
            steps_per_frame: 2,
            eval_every: 50,
            eval_samples: 512,
            profile_every: 50,
            sample_every: 200,
            numerics: None,
        }
    }
}

impl SessionConfig {
    /// A period that never comes: the probe it schedules is off (no run at the end either).
    pub const NEVER: u64 = u64::MAX;

    /// Whether `precision` trains with the GradScaler under this config.
    pub fn scaler_for(&self, precision: Precision) -> bool {
        precision.scaler_enabled_by_default()
            || (self.scaler_everywhere && precision != Precision::F32)
    }

    /// The run of one mode: `precision` training on `loss` (the data's) for `steps` steps,
    /// shuffled, without epoch-end validation (the eval probe validates instead).
    pub fn run_config(&self, precision: Precision, loss: LossKind) -> RunConfig {
        let scaler = ScalerConfig {
            enabled: self.scaler_for(precision),
            ..self.scaler
        };
        let step = StepConfig::new(precision, loss, self.optimizer.config(self.lr))
            .scaler(scaler)
            .numerics(self.numerics)
            .numerics_histograms(true);
        RunConfig::new(step, self.batch_size)
            .steps(self.steps)
            .seed(self.seed)
            .validate_each_epoch(false)
    }

    /// Check the session's own settings, then each mode's run through the one run
    /// validation ([`RunConfig::validate_named`]), its settings named by the setup panel.
    pub(super) fn validate(&self) -> Result<()> {
        self.validate_named(panel_name)
    }

    /// [`SessionConfig::validate`], run settings named by `name` (the CLI's `gui` checks
    /// its flags with it before the window opens).
    pub fn validate_named(&self, name: fn(Setting) -> &'static str) -> Result<()> {
        if self.modes.is_empty() {
            return Err(Error::InvalidArgument(
                "select at least one precision mode".into(),
            ));
        }
        if self.steps_per_frame == 0 {
            return Err(Error::InvalidArgument(
                "steps per frame must be at least 1".into(),
            ));
        }
        // The loss comes with the data; no setting's check depends on it.
        for &precision in &self.modes {
            self.run_config(precision, LossKind::CrossEntropy)
                .validate_named(name)?;
        }
        Ok(())
    }
}

/// A run setting as the setup panel labels it.
fn panel_name(setting: Setting) -> &'static str {
    match setting {
        Setting::Steps => "steps",
        other => other.words(),
    }
}

/// Where the session is.
#[derive(Clone, Debug, PartialEq)]
pub enum Status {
    Idle,
    /// Building one mode per frame (pipelines compile here).
    Preparing {
        built: usize,
        total: usize,
    },
    Running,
    Paused,
    /// Stopped by the user; results stay on screen until Reset.
    Stopped,
    Finished,
    Failed(String),
}

impl Status {
    pub fn label(&self) -> String {
        match self {
            Status::Idle => "idle".into(),
            Status::Preparing { built, total } => format!("preparing ({built}/{total} modes)"),
            Status::Running => "running".into(),
            Status::Paused => "paused".into(),
            Status::Stopped => "stopped".into(),
            Status::Finished => "finished".into(),
            Status::Failed(e) => format!("failed: {e}"),
        }
    }
}
