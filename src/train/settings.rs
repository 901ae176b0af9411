//! Every setting of a run that [`super::RunConfig::validate_named`] checks, with its range:
//! the words a message (and the guide's table of flags, docs/guide/troubleshooting.md) gives for it, and the limits behind
//! them. A value outside its range is an error that names the setting (the way the front
//! end names it: the CLI by its flag) and the range.

use crate::error::Error;

/// The most micro-batches one optimizer step may accumulate. Each is a submit and a word of
/// the step's metrics; far beyond any effective batch PyTorch users accumulate (a few
/// hundred), and low enough that every count derived from it stays far from overflow.
pub const MAX_GRAD_ACCUM: usize = 1 << 16;

/// The largest batch size: 2^24 samples, more than any data set here has (synthetic data
/// stops at 10^7), so a typo with extra digits is an error before anything is sized by it.
pub const MAX_BATCH_SIZE: usize = 1 << 24;

/// The most steps, epochs or steps between events a run may count: 2^53, the counts a
/// checkpoint may hold ([`super::checkpoint::Progress::MAX_COUNT`]), so every run's
/// checkpoints load again.
pub const MAX_COUNT: u64 = 1 << 53;

/// Batches per split of a loss estimate by default. nanoGPT's `eval_iters` is 200 (at batch
/// 64 and block 256 on a GPU); 20 batches keep an estimate of `gpt-tiny` a few seconds on a
/// CPU adapter while averaging 20·B·T tokens (40,960 at batch 32, block 64): enough to
/// resolve the 0.03 differences that matter here (see docs/guide/gpt.md).
pub const EVAL_BATCHES: usize = 20;

/// The most batches per split of a loss estimate: 65,536, 300 times nanoGPT's 200. Each is
/// a forward pass, so an estimate stays minutes at worst, not days.
pub const MAX_EVAL_BATCHES: usize = 1 << 16;

/// Consecutive steps the GradScaler may skip before a run stops by default: a scale that
/// backs off 50 times in a row has fallen by 2^50, so the gradients are non-finite whatever
/// the scale (inf/NaN data, or a layer that overflows in the forward), not too large.
pub const MAX_SKIPPED_STEPS: u64 = 50;

/// A GradScaler scale below this ends a run (unless the run started below it): PyTorch's
/// scale never needs to go so low for gradients to fit f16, so one that does is stuck, and
/// past 2^-128 its reciprocal is no longer finite.
pub const MIN_SCALE: f32 = 1.0 / (1 << 24) as f32;

/// The largest GradScaler growth interval, as PyTorch's `int` tracker allows (2^31 − 1).
pub const MAX_GROWTH_INTERVAL: u32 = i32::MAX as u32;

/// A setting [`super::RunConfig::validate`] checks, as its messages name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Setting {
    BatchSize,
    GradAccum,
    Steps,
    Epochs,
    ClipGradNorm,
    EvalEvery,
    EvalBatches,
    SaveEvery,
    SavePath,
    Lr,
    Momentum,
    Dampening,
    WeightDecay,
    Beta1,
    Beta2,
    Eps,
    InitScale,
    GrowthFactor,
    BackoffFactor,
    GrowthInterval,
    WarmupSteps,
    MinLr,
    LrDecaySteps,
    MaxSkippedSteps,
    LabelSmoothing,
}

impl Setting {
    /// The setting in words (the library's and the app's messages).
    pub fn words(self) -> &'static str {
        match self {
            Setting::BatchSize => "batch size",
            Setting::GradAccum => "gradient accumulation",
            Setting::Steps => "the step limit",
            Setting::Epochs => "the epoch limit",
            Setting::ClipGradNorm => "the gradient-clipping norm",
            Setting::EvalEvery => "the loss-estimate interval",
            Setting::EvalBatches => "batches per loss estimate",
            Setting::SaveEvery => "the checkpoint interval",
            Setting::SavePath => "a checkpoint path",
            Setting::Lr => "the learning rate",
            Setting::Momentum => "momentum",
            Setting::Dampening => "dampening",
            Setting::WeightDecay => "weight decay",
            Setting::Beta1 => "beta1",
            Setting::Beta2 => "beta2",
            Setting::Eps => "eps",
            Setting::InitScale => "the GradScaler's initial scale",
            Setting::GrowthFactor => "the GradScaler's growth factor",
            Setting::BackoffFactor => "the GradScaler's backoff factor",
            Setting::GrowthInterval => "the GradScaler's growth interval",
            Setting::WarmupSteps => "warm-up steps",
            Setting::MinLr => "the final learning rate of the cosine decay",
            Setting::LrDecaySteps => "decay steps",
            Setting::MaxSkippedSteps => "skipped steps in a row before a run stops",
            Setting::LabelSmoothing => "label smoothing",
        }
    }

    /// The values the setting takes, in words (messages and the guide's table of flags).
    pub fn range(self) -> &'static str {
        match self {
            Setting::BatchSize => "1 to 16777216",
            Setting::GradAccum => "1 to 65536",
            Setting::EvalBatches => "1 to 65536",
            Setting::Steps
            | Setting::Epochs
            | Setting::EvalEvery
            | Setting::SaveEvery
            | Setting::LrDecaySteps => "1 to 2^53",
            Setting::WarmupSteps => "0 to 2^53, fewer than the decay steps",
            Setting::ClipGradNorm => "finite and >= 0 (0: no clipping)",
            Setting::Lr | Setting::Momentum | Setting::WeightDecay | Setting::Eps => {
                "finite and >= 0"
            }
            Setting::Dampening => "finite",
            Setting::Beta1 | Setting::Beta2 => "in [0, 1)",
            Setting::InitScale => "finite and >= 2^-126 (unscaling multiplies by its reciprocal)",
            Setting::GrowthFactor => "finite and > 1",
            Setting::BackoffFactor => "in (0, 1)",
            Setting::GrowthInterval => "1 to 2147483647",
            Setting::MinLr => "finite, >= 0 and at most the learning rate",
            Setting::SavePath => "a file path",
            Setting::MaxSkippedSteps => "0 to 2^53 (0: never stop)",
            Setting::LabelSmoothing => "in [0, 1] (0: none)",
        }
    }
}

/// What a message says of `setting` (named by `name`) given `got`, outside its range.
pub(super) fn range_message(
    name: fn(Setting) -> &'static str,
    setting: Setting,
    got: impl std::fmt::Display,
) -> String {
    format!("{} must be {}, got {got}", name(setting), setting.range())
}

/// The error for `setting` (named by `name`) given `got`, outside its range.
pub(super) fn out_of_range(
    name: fn(Setting) -> &'static str,
    setting: Setting,
    got: impl std::fmt::Display,
) -> Error {
    Error::InvalidArgument(range_message(name, setting, got))
}

/// `Err` unless `1 <= value <= max`.
pub(super) fn check_count(
    name: fn(Setting) -> &'static str,
    setting: Setting,
    value: u64,
    max: u64,
) -> Result<(), Error> {
    if (1..=max).contains(&value) {
        Ok(())
    } else {
        Err(out_of_range(name, setting, value))
    }
}
