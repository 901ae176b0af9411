//! The AMP doctor on the command line: `--numerics every:N` and `--keep-f32 NAME[,NAME...]`
//! (flags `train` and `compare` share), what a skipped step's metrics line and the
//! progress bar say of its cause, and the advice table at the end of a run.

use clap::Args;
use webgpu_amp::nn::ModelSpec;
use webgpu_amp::nn::keep_f32::with_keep_f32;
use webgpu_amp::train::numerics::advice::{
    DEFAULT_SCALE, NumericsTally, STEP_SHARE, Suggestion, UNDERFLOW_SHARE, keep_f32_flag,
};
use webgpu_amp::train::numerics::{NUMERICS_FLAG, StepNumerics, parse_every, skip_note};
use webgpu_amp::train::{StepConfig, StepStats};
use webgpu_amp::{Error, Result};

use super::out::outln;

/// The doctor's flags.
#[derive(Args, Clone, Debug, Default)]
pub struct DoctorArgs {
    /// Count each layer's numerics on the GPU on every N-th step from the first: inf/NaN,
    /// values at or beyond the low dtype's overflow threshold, non-zero values that round
    /// to a subnormal or zero, and the binades of its output, input gradient and weight
    /// gradient. A skipped step then names where the inf began, --metrics carries the
    /// counts and the run ends with advice. `every:N` or `off` (the default: no cost).
    #[arg(long, value_name = "every:N")]
    pub numerics: Option<String>,
    /// Compute these layers in f32 (forward and backward) whatever the precision, by the
    /// names the numerics advice prints (a JSON model's layers are its indices: 0, 1, ...;
    /// a layer made of layers keeps them all). Comma-separated.
    #[arg(long, value_delimiter = ',', value_name = "NAME")]
    pub keep_f32: Vec<String>,
}

impl DoctorArgs {
    /// Every how many steps numerics are counted (`None`: off).
    pub fn every(&self) -> Result<Option<u64>> {
        match &self.numerics {
            None => Ok(None),
            Some(s) => parse_every(s).map_err(|e| named("--numerics", e)),
        }
    }

    /// `spec` with the `--keep-f32` layers (an unknown name lists the valid ones).
    pub fn apply(&self, spec: ModelSpec) -> Result<ModelSpec> {
        if self.keep_f32.is_empty() {
            return Ok(spec);
        }
        with_keep_f32(spec, &self.keep_f32).map_err(|e| named("--keep-f32", e))
    }
}

/// The library's message with the flag named first.
fn named(flag: &str, e: Error) -> Error {
    match e {
        Error::InvalidArgument(m) => {
            let m = m.strip_prefix("keep-f32: ").unwrap_or(&m).to_string();
            let m = m.strip_prefix("numerics ").unwrap_or(&m).to_string();
            Error::InvalidArgument(format!("{flag}: {m}"))
        }
        other => other,
    }
}

/// A step's JSON line for --metrics: its stats, its per-layer counters when counted, and
/// for a skipped step what caused it (or how to find out).
pub fn step_line(
    stats: &StepStats,
    epoch: u64,
    lr: f32,
    numerics: Option<&StepNumerics>,
    every: Option<u64>,
) -> serde_json::Value {
    let mut line = serde_json::json!({
        "step": stats.step, "epoch": epoch, "loss": stats.loss, "scale": stats.scale,
        "skipped": stats.skipped, "lr": webgpu_amp::optim::widen(lr),
    });
    let cause = numerics.and_then(StepNumerics::skip_cause);
    if stats.skipped {
        line["skip_cause"] = match &cause {
            Some(c) => serde_json::json!({
                "layer": c.layer.name, "index": c.layer.index, "op": c.layer.op,
                "phase": c.phase, "tensor": c.tensor.name(),
                "kind": if c.non_finite { "inf/NaN" } else { "overflow on rounding" },
                "text": c.to_string(),
            }),
            None => skip_note(None, numerics.is_some(), every).into(),
        };
    }
    if let Some(n) = numerics {
        line["numerics"] = n.to_json();
    }
    line
}

/// The short lines a run's progress bar prints for its skipped steps (the first
/// [`SkipLines::MAX`], then one saying where the rest are).
pub struct SkipLines {
    every: Option<u64>,
    shown: usize,
}

impl SkipLines {
    const MAX: usize = 10;

    pub fn new(every: Option<u64>) -> Self {
        Self { every, shown: 0 }
    }

    /// The line for step `stats` (`None`: not skipped, or past the limit).
    pub fn line(
        &mut self,
        label: &str,
        stats: &StepStats,
        numerics: Option<&StepNumerics>,
    ) -> Option<String> {
        // Numerics off: the first skipped step says how to turn them on, once.
        let said = self.every.is_none() && self.shown > 0;
        if !stats.skipped || self.shown > Self::MAX || said {
            return None;
        }
        self.shown += 1;
        if self.shown > Self::MAX {
            return Some(format!(
                "{label}: more skipped steps: --metrics has each one's cause"
            ));
        }
        let step = stats.step;
        let why = match numerics.and_then(StepNumerics::skip_cause) {
            Some(c) => format!(": {}", c.short()),
            None if self.every.is_none() => format!(" ({NUMERICS_FLAG} names the layer)"),
            None => format!(": {}", skip_note(None, numerics.is_some(), self.every)),
        };
        Some(format!("{label}: step {step} skipped{why}"))
    }
}

/// One run's doctor: its numerics setting and the tally of its counted steps.
pub struct RunDoctor {
    every: Option<u64>,
    scaler: bool,
    tally: Option<NumericsTally>,
}

impl RunDoctor {
    /// The doctor of a run of `step` whose model keeps `kept` in f32 (its advice does not
    /// ask for what is kept already).
    pub fn new(step: &StepConfig, kept: &[String]) -> Self {
        Self {
            every: step.numerics,
            scaler: step.scaler.enabled,
            tally: step
                .numerics
                .map(|_| NumericsTally::new(step.precision, step.scaler.enabled).keeping(kept)),
        }
    }

    /// Tally a step's numerics (when counted).
    pub fn add(&mut self, stats: &StepStats, numerics: Option<&StepNumerics>) {
        if let (Some(t), Some(n)) = (&mut self.tally, numerics) {
            t.add(n, if self.scaler { stats.scale } else { 1.0 });
        }
    }

    /// Tally a step and make its --metrics line ([`step_line`]).
    pub fn step_line(
        &mut self,
        stats: &StepStats,
        epoch: u64,
        lr: f32,
        numerics: Option<&StepNumerics>,
    ) -> serde_json::Value {
        self.add(stats, numerics);
        step_line(stats, epoch, lr, numerics, self.every)
    }

    /// The advice table (numerics on), labelled with the run's precision mode.
    pub fn print_advice(&self, label: &str) -> Result<()> {
        match &self.tally {
            Some(t) => print_advice(label, t),
            None => Ok(()),
        }
    }
}

/// The advice table of one run (`label`: its precision mode) with the flag to paste.
pub fn print_advice(label: &str, tally: &NumericsTally) -> Result<()> {
    let low = match tally.precision.low_dtype().name() {
        "f32" => "f16's range: what amp-f16 would meet".to_string(),
        low => format!("{low}'s range"),
    };
    let share = format!("{:.0}%", 100.0 * STEP_SHARE);
    let advice = tally.advice();
    if advice.is_empty() {
        return outln!(
            "numerics ({label}, {} counted steps against {low}): no layer overflowed or \
             underflowed in more than {share} of them",
            tally.steps
        );
    }
    outln!(
        "numerics ({label}, {} counted steps against {low}): layers that overflowed or \
         underflowed (over {:.0}% of their non-zero values) in more than {share} of them",
        tally.steps,
        100.0 * UNDERFLOW_SHARE
    )?;
    outln!(
        "{:<24} {:<16} {:>9} {:>9} {:>15}  suggestion",
        "layer",
        "tensor",
        "overflow",
        "underflow",
        "binades"
    )?;
    for a in &advice {
        let binades = match (a.min_binade, a.max_binade) {
            (Some(lo), Some(hi)) => format!("2^{lo}..2^{hi}"),
            _ => "-".into(),
        };
        outln!(
            "{:<24} {:<16} {:>9} {:>9} {:>15}  {}",
            format!("{} ({})", a.layer.name, a.layer.op),
            a.tensor.name(),
            format!("{}/{}", a.overflow_steps, a.steps),
            format!("{}/{}", a.underflow_steps, a.steps),
            binades,
            match &a.keep {
                Some(k) if *k != a.layer.name => format!("keep layer {k} (its input) in f32"),
                _ => a.suggestion.text().to_string(),
            }
        )?;
    }
    let zeroed = advice
        .iter()
        .filter(|a| a.suggestion == Suggestion::RaiseScale)
        .count();
    if zeroed > 0 {
        outln!(
            "warning: every value of {zeroed} gradients was zero in all {} counted steps under \
             a loss scale of at most {:e}: the scale is too small for f16, and no weight \
             changed; try --init-scale {} (the default)",
            tally.steps,
            tally.max_scale,
            DEFAULT_SCALE
        )?;
    }
    match keep_f32_flag(&advice) {
        Some(flag) => outln!("paste: {flag}"),
        None => Ok(()),
    }
}
