//! The AMP doctor: per-layer numerics counted on the GPU, read back a few steps late with
//! the step stats, and what they say.
//!
//! With `numerics` on ([`crate::train::StepConfig::numerics`], `--numerics every:N`), every
//! N-th optimizer step counts each layer's output, input gradient and weight gradients once
//! they are complete (`nn::probes`) and before a later kernel may overwrite them, several
//! tensors to a pass (`ops::numerics`), each into its record of one small counts buffer; the step's stats copy carries that buffer home in the
//! same read-back slot, so no new wait. Off, nothing of it is planned or dispatched.
//!
//! - [`StepNumerics`]: one counted step's records, in the order the step made them;
//!   [`StepNumerics::skip_cause`] names where an inf began (the layer, forward or backward,
//!   the tensor);
//! - `passes`: the counting passes of a trainer, interleaved into its step;
//! - [`advice`]: the end-of-run tally, and what to keep in f32.

pub mod advice;
pub(super) mod passes;

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::nn::probes::ProbeTensor;
use crate::ops::numerics::{RECORD_WORDS, TensorCounts};
use crate::tensor::DType;

/// What a user types to count every step: said wherever numerics are off.
pub const NUMERICS_FLAG: &str = "--numerics every:1";

/// Parse `every:N` (N ≥ 1) or `off`: the steps counted, every N-th (`None`: off).
pub fn parse_every(s: &str) -> Result<Option<u64>> {
    if s == "off" {
        return Ok(None);
    }
    let bad = || {
        Error::InvalidArgument(format!(
            "numerics `{s}`: expected every:N with N a whole number from 1 (every:1 counts \
             every step), or off"
        ))
    };
    let n = s.strip_prefix("every:").ok_or_else(bad)?;
    match n.parse::<u64>() {
        Ok(n) if n >= 1 => Ok(Some(n)),
        _ => Err(bad()),
    }
}

/// Whether optimizer step `step` (1-based, counted over the whole run) is counted when
/// every `every`-th step is: steps 1, 1 + N, 1 + 2N, ... (the first, where the GradScaler
/// is still finding its scale, always).
pub fn counts_step(every: u64, step: u64) -> bool {
    every > 0 && step >= 1 && (step - 1).is_multiple_of(every)
}

/// A row of the precision map as the doctor names it: index, name and op.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct LayerName {
    pub index: usize,
    pub name: String,
    pub op: String,
    /// The loss's row (f32 already: never one to keep in f32).
    #[serde(skip)]
    pub loss: bool,
}

/// One tensor's counts in a counted step.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Record {
    /// The layer's row in the precision map.
    pub layer: usize,
    pub tensor: ProbeTensor,
    /// The dtype it is stored in.
    #[serde(serialize_with = "dtype_name")]
    pub stored: DType,
    #[serde(flatten)]
    pub counts: TensorCounts,
}

fn dtype_name<S: serde::Serializer>(d: &DType, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(d.name())
}

/// The numerics of one counted optimizer step.
#[derive(Clone, Debug, PartialEq)]
pub struct StepNumerics {
    /// The dtype values were counted against (f16 for an f32 run: what autocast would meet).
    pub low: DType,
    /// The layers, by precision-map row (the loss last).
    pub layers: Arc<Vec<LayerName>>,
    /// Every tensor counted, in the order the step completed them: forward outputs, then
    /// the loss gradient and the backward's gradients.
    pub records: Vec<Record>,
    /// The flat f32 weight gradients are rounded to the low dtype after the backward (pure
    /// f16): there a value at the overflow threshold becomes inf.
    pub grads_rounded: bool,
}

/// Where a skipped step's inf began.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SkipCause {
    pub layer: LayerName,
    pub tensor: ProbeTensor,
    /// `forward` or `backward`.
    pub phase: &'static str,
    /// True when the tensor held inf/NaN itself; false when it held values at or beyond the
    /// low dtype's overflow threshold that became inf when rounded to it.
    pub non_finite: bool,
    #[serde(skip)]
    pub low: DType,
}

impl std::fmt::Display for SkipCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let l = &self.layer;
        let what = if self.non_finite {
            "held inf/NaN".to_string()
        } else {
            format!(
                "reached {}'s overflow threshold and turned inf when rounded to it",
                self.low
            )
        };
        write!(
            f,
            "layer {} ({}) {} {what}, first in the {}",
            l.name,
            l.op,
            self.tensor.name(),
            self.phase
        )
    }
}

impl SkipCause {
    /// One short line for a progress bar: `layer 2 output inf/NaN (forward)`.
    pub fn short(&self) -> String {
        let kind = if self.non_finite {
            "inf/NaN"
        } else {
            "overflow"
        };
        format!(
            "layer {} {} {kind} ({})",
            self.layer.name,
            self.tensor.name(),
            self.phase
        )
    }
}

impl StepNumerics {
    /// Decode a counts buffer: `order` lists (layer, tensor, stored dtype) of each record
    /// in the order the step completes them; record `layer * 3 + tensor` holds its counts.
    pub fn decode(
        low: DType,
        layers: &Arc<Vec<LayerName>>,
        order: &[(usize, ProbeTensor, DType)],
        words: &[u32],
        grads_rounded: bool,
    ) -> Result<Self> {
        let records = order
            .iter()
            .map(|&(layer, tensor, stored)| {
                let at = record_index(layer, tensor) * RECORD_WORDS;
                let w = words.get(at..at + RECORD_WORDS).ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "numerics: record {at} past the {} words read back",
                        words.len()
                    ))
                })?;
                Ok(Record {
                    layer,
                    tensor,
                    stored,
                    counts: TensorCounts::from_words(w)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            low,
            layers: layers.clone(),
            records,
            grads_rounded,
        })
    }

    /// The counts of `layer`'s `tensor`, if the step counted it.
    pub fn get(&self, layer: usize, tensor: ProbeTensor) -> Option<&Record> {
        self.records
            .iter()
            .find(|r| r.layer == layer && r.tensor == tensor)
    }

    /// Where the inf that made the step skip began: the first tensor, in the order the
    /// step made them, that held inf/NaN, or, where the tensor before it in the chain (the
    /// previous layer's output in the forward, the previous input gradient in the backward)
    /// held finite values at the overflow threshold that a cast to the low dtype then
    /// turned inf, that one. When no tensor held inf/NaN and the weight gradients are
    /// rounded to the low dtype after the backward (pure f16), the first weight gradient at
    /// the threshold. `None`: no counted tensor explains it (the inf arose later: unscale,
    /// clipping).
    pub fn skip_cause(&self) -> Option<SkipCause> {
        let chain =
            |r: &Record| r.tensor == ProbeTensor::Output || r.tensor == ProbeTensor::InputGrad;
        let mut before: Option<&Record> = None;
        for r in &self.records {
            if r.counts.non_finite > 0 {
                let cast = before.filter(|p| {
                    p.counts.overflow > 0 && p.counts.non_finite == 0 && p.stored != self.low
                });
                return Some(match cast {
                    Some(p) => self.cause(p, false),
                    None => self.cause(r, true),
                });
            }
            if chain(r) {
                before = Some(r);
            }
        }
        if self.grads_rounded {
            let rounded = self
                .records
                .iter()
                .find(|r| r.tensor == ProbeTensor::WeightGrad && r.counts.overflow > 0)?;
            return Some(self.cause(rounded, false));
        }
        None
    }

    fn cause(&self, r: &Record, non_finite: bool) -> SkipCause {
        SkipCause {
            layer: self.layer_name(r.layer),
            tensor: r.tensor,
            phase: if r.tensor.in_forward() {
                "forward"
            } else {
                "backward"
            },
            non_finite,
            low: self.low,
        }
    }

    /// Row `index`'s name (its index as text if the map has no such row).
    pub fn layer_name(&self, index: usize) -> LayerName {
        self.layers.get(index).cloned().unwrap_or(LayerName {
            index,
            name: index.to_string(),
            op: String::new(),
            loss: false,
        })
    }

    /// The per-layer counters as JSON: one object per layer with its counted tensors.
    pub fn to_json(&self) -> serde_json::Value {
        let mut layers: Vec<(usize, serde_json::Map<String, serde_json::Value>)> = Vec::new();
        for r in &self.records {
            let at = match layers.iter().position(|(l, _)| *l == r.layer) {
                Some(i) => i,
                None => {
                    let mut m = serde_json::Map::new();
                    let name = self.layer_name(r.layer);
                    m.insert("layer".into(), name.name.into());
                    m.insert("index".into(), r.layer.into());
                    layers.push((r.layer, m));
                    layers.len() - 1
                }
            };
            let key = r.tensor.name().replace(' ', "_");
            let value = serde_json::to_value(r).unwrap_or_default();
            let mut value = value;
            if let Some(o) = value.as_object_mut() {
                o.remove("layer");
                o.remove("tensor");
            }
            layers[at].1.insert(key, value);
        }
        layers.sort_by_key(|(l, _)| *l);
        serde_json::Value::Array(layers.into_iter().map(|(_, m)| m.into()).collect())
    }
}

/// The record of `layer`'s `tensor` in the counts buffer.
pub(crate) fn record_index(layer: usize, tensor: ProbeTensor) -> usize {
    layer * 3
        + match tensor {
            ProbeTensor::Output => 0,
            ProbeTensor::InputGrad => 1,
            ProbeTensor::WeightGrad => 2,
        }
}

/// What a skipped step's metrics line says of its cause: the cause when its step was
/// counted, else why there is none (`every`: the run's numerics setting).
pub fn skip_note(cause: Option<&SkipCause>, counted: bool, every: Option<u64>) -> String {
    match (cause, counted, every) {
        (Some(c), _, _) => c.to_string(),
        (None, true, _) => "no counted tensor held inf/NaN: it arose after the backward \
                            (unscale or clipping)"
            .into(),
        (None, false, Some(n)) => format!(
            "this step was not counted (numerics count every {n}-th step from step 1; \
             {NUMERICS_FLAG} counts each)"
        ),
        (None, false, None) => {
            format!("numerics are off: run with {NUMERICS_FLAG} to name the layer")
        }
    }
}
