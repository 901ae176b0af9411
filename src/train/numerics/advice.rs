//! What the counted steps of a run say, layer by layer, at its end: which layers overflowed
//! or underflowed in more than a share of the counted steps, and what to do about each
//! (keep it in f32, use bf16, or nothing: underflow the GradScaler fixes), with the flag
//! that does it.
//!
//! A tensor *overflowed* in a step when the inf began there ([`StepNumerics::skip_cause`]:
//! the tensors after it hold infs only because it did), or when it held finite values at or
//! beyond the low dtype's overflow threshold where it is to be rounded to it (an f32 run's
//! every tensor, counted against f16's range; pure f16's weight gradients).
//! A gradient's overflow counts only in a step whose loss scale was at most 1: above, the
//! gradients were scaled up and the GradScaler's backoff is the fix (skipping is how it
//! finds its scale); at or below 1 the layer overflows on its own. A tensor
//! *underflowed* when more than [`UNDERFLOW_SHARE`] of its non-zero values round to a
//! subnormal or zero in the low dtype.

use super::{LayerName, StepNumerics};
use crate::amp::policy::Precision;
use crate::nn::probes::ProbeTensor;
use crate::tensor::DType;

/// A layer is reported when it overflowed or underflowed in more than this share of the
/// counted steps.
pub const STEP_SHARE: f64 = 0.05;
/// A tensor underflowed in a step when more than this share of its non-zero values round
/// to a subnormal or zero in the low dtype.
pub const UNDERFLOW_SHARE: f64 = 0.05;

/// What to do about a layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Suggestion {
    /// `--keep-f32 NAME`: compute it (forward and backward) in f32.
    KeepF32,
    /// Its values live below f16's normal range: amp-bf16 keeps f32's range.
    UseBf16,
    /// Gradient underflow the GradScaler lifts as its scale grows: nothing to do.
    Nothing,
    /// Gradient underflow without a GradScaler: turn it on.
    ScalerOn,
    /// Every value of a gradient zero in every counted step under a loss scale below the
    /// default: the scale is too small to lift anything (it grows 2x per 2000 clean steps).
    RaiseScale,
    /// It would be kept in f32, and is already (`--keep-f32`, `keep_f32` in the model file):
    /// in amp-f16 its values are not rounded to f16.
    Kept,
}

/// The loss scale to try when every gradient underflowed: GradScaler's default, 2^16.
pub const DEFAULT_SCALE: f32 = 65536.0;

impl Suggestion {
    pub fn text(self) -> &'static str {
        match self {
            Suggestion::KeepF32 => "keep it in f32",
            Suggestion::UseBf16 => "use bf16 for it (amp-bf16 keeps f32's range)",
            Suggestion::Nothing => "nothing: underflow the GradScaler's scale fixes",
            Suggestion::ScalerOn => "turn the GradScaler on (--scaler true)",
            Suggestion::RaiseScale => "raise the loss scale (--init-scale 65536)",
            Suggestion::Kept => "nothing: it is kept in f32 already",
        }
    }
}

/// One line of the advice.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Advice {
    pub layer: LayerName,
    pub tensor: ProbeTensor,
    /// Counted steps in which it overflowed / underflowed, of `steps`.
    pub overflow_steps: u64,
    pub underflow_steps: u64,
    pub steps: u64,
    /// Its smallest and largest binade over the counted steps.
    pub min_binade: Option<i32>,
    pub max_binade: Option<i32>,
    pub suggestion: Suggestion,
    /// The layer `--keep-f32` names to take a "keep it in f32" suggestion: the layer
    /// itself, or for the loss (f32 already, its input gradient stored in the output's
    /// dtype) the last layer before it.
    pub keep: Option<String>,
}

#[derive(Clone, Debug, Default)]
struct TensorTally {
    steps: u64,
    overflow_steps: u64,
    underflow_steps: u64,
    /// Steps in which every value was zero (gradients).
    zero_steps: u64,
    min_binade: Option<i32>,
    max_binade: Option<i32>,
}

/// The counted steps of one run, per (layer, tensor). Add each counted step's numerics with
/// [`NumericsTally::add`]; [`NumericsTally::advice`] at the end.
#[derive(Clone, Debug)]
pub struct NumericsTally {
    pub precision: Precision,
    pub scaler: bool,
    /// Counted steps.
    pub steps: u64,
    /// The largest loss scale of the counted steps (1 without a GradScaler).
    pub max_scale: f32,
    /// The layers the run keeps in f32 (never advised to be kept).
    kept: Vec<String>,
    layers: Vec<LayerName>,
    tensors: Vec<((usize, ProbeTensor), TensorTally)>,
}

impl NumericsTally {
    pub fn new(precision: Precision, scaler: bool) -> Self {
        Self {
            precision,
            scaler,
            steps: 0,
            max_scale: 0.0,
            kept: Vec::new(),
            layers: Vec::new(),
            tensors: Vec::new(),
        }
    }

    /// The tally of a run that keeps the layers `kept` in f32.
    pub fn keeping(mut self, kept: &[String]) -> Self {
        self.kept = kept.to_vec();
        self
    }

    /// Add a step's numerics; `scale`: the loss scale its backward used (1 without a
    /// GradScaler).
    pub fn add(&mut self, n: &StepNumerics, scale: f32) {
        self.steps += 1;
        self.max_scale = self.max_scale.max(scale);
        if self.layers.is_empty() {
            self.layers = n.layers.to_vec();
        }
        // Where an inf began: the tensors after it hold infs only because it did.
        let origin = n.skip_cause().map(|c| (c.layer.index, c.tensor));
        for r in &n.records {
            let c = &r.counts;
            if !c.counted() {
                continue;
            }
            let key = (r.layer, r.tensor);
            let at = match self.tensors.iter().position(|(k, _)| *k == key) {
                Some(i) => i,
                None => {
                    self.tensors.push((key, TensorTally::default()));
                    self.tensors.len() - 1
                }
            };
            // f32 values at the threshold are trouble only where they are to be rounded.
            let rounded = r.stored != DType::F32
                || self.precision == Precision::F32
                || (n.grads_rounded && r.tensor == ProbeTensor::WeightGrad);
            let near = rounded && c.non_finite == 0 && c.overflow > 0;
            let overflowed = origin == Some(key) || near;
            let counts = r.tensor.in_forward() || scale <= 1.0;
            let t = &mut self.tensors[at].1;
            t.steps += 1;
            t.overflow_steps += (overflowed && counts) as u64;
            let all_zero = !r.tensor.in_forward() && c.zero == c.elements;
            t.zero_steps += all_zero as u64;
            t.underflow_steps += (c.underflow_fraction() > UNDERFLOW_SHARE || all_zero) as u64;
            t.max_binade = t.max_binade.max(c.max_binade);
            t.min_binade = match (t.min_binade, c.min_binade) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
    }

    /// The tensors that overflowed or underflowed in more than [`STEP_SHARE`] of the
    /// counted steps, layer by layer, each with what to do.
    pub fn advice(&self) -> Vec<Advice> {
        let mut out = Vec::new();
        let low_is_f16 = self.precision.low_dtype() != DType::BF16;
        for ((layer, tensor), t) in &self.tensors {
            let over = t.overflow_steps as f64 > STEP_SHARE * t.steps as f64;
            let under = t.underflow_steps as f64 > STEP_SHARE * t.steps as f64;
            let suggestion = if over {
                Suggestion::KeepF32
            } else if !under {
                continue;
            } else if tensor.in_forward() {
                if low_is_f16 {
                    Suggestion::UseBf16
                } else {
                    Suggestion::KeepF32
                }
            } else if self.scaler && t.zero_steps == t.steps && self.max_scale < DEFAULT_SCALE {
                Suggestion::RaiseScale
            } else if self.scaler {
                Suggestion::Nothing
            } else if self.precision == Precision::F32 {
                // What amp-f16 would meet: its GradScaler lifts gradients.
                Suggestion::Nothing
            } else {
                Suggestion::ScalerOn
            };
            let name = |i: usize| {
                self.layers.get(i).cloned().unwrap_or(LayerName {
                    index: i,
                    name: i.to_string(),
                    op: String::new(),
                    loss: false,
                })
            };
            let row = name(*layer);
            let mut keep = match (suggestion, row.loss) {
                (Suggestion::KeepF32, false) => Some(row.name.clone()),
                (Suggestion::KeepF32, true) if *layer > 0 => Some(name(layer - 1).name),
                _ => None,
            };
            let mut suggestion = suggestion;
            if keep.as_ref().is_some_and(|k| self.kept.contains(k)) {
                (suggestion, keep) = (Suggestion::Kept, None);
            }
            out.push(Advice {
                layer: row,
                tensor: *tensor,
                overflow_steps: t.overflow_steps,
                underflow_steps: t.underflow_steps,
                steps: t.steps,
                min_binade: t.min_binade,
                max_binade: t.max_binade,
                suggestion,
                keep,
            });
        }
        out.sort_by_key(|a| (a.layer.index, a.tensor));
        out
    }
}

/// The flag that takes the advice's "keep it in f32" lines: `--keep-f32 2,fc` (none when no
/// line says so).
pub fn keep_f32_flag(advice: &[Advice]) -> Option<String> {
    let mut names: Vec<&str> = Vec::new();
    for name in advice.iter().filter_map(|a| a.keep.as_deref()) {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    (!names.is_empty()).then(|| format!("--keep-f32 {}", names.join(",")))
}
