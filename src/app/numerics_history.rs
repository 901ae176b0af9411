//! What the Numerics panel draws from, per mode: for each counted step, each layer's
//! overflow and underflow fractions (a heat-map column) and whether the step was skipped;
//! and the latest counted step whole, for the exponent histogram of a layer. Kept small:
//! two numbers per layer per counted step, not the counters themselves.

use std::sync::Arc;

use crate::nn::probes::ProbeTensor;
use crate::train::StepStats;
use crate::train::numerics::{LayerName, SkipCause, StepNumerics};

/// One layer in one counted step.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Cell {
    /// The largest share, over the layer's tensors, of values at or beyond the low dtype's
    /// overflow threshold (or inf/NaN).
    pub overflow: f32,
    /// The largest share of non-zero values that round to a subnormal or zero.
    pub underflow: f32,
    /// Some tensor of the layer held inf/NaN.
    pub non_finite: bool,
    /// Any tensor of the layer was counted.
    pub counted: bool,
}

/// A heat-map column: one counted step.
#[derive(Clone, Debug, PartialEq)]
pub struct CountedStep {
    pub step: u64,
    pub skipped: bool,
    /// Where the inf began, when the step was skipped.
    pub cause: Option<SkipCause>,
    /// One per layer (precision-map row), the loss last.
    pub cells: Vec<Cell>,
}

/// The counted steps of one mode. See the module docs.
#[derive(Clone, Debug, Default)]
pub struct NumericsHistory {
    pub layers: Vec<LayerName>,
    pub steps: Vec<CountedStep>,
    /// The latest counted step, whole.
    pub latest: Option<Arc<StepNumerics>>,
    /// Cells of this mode's heat map drawn in the panel's latest frame.
    pub cells_drawn: usize,
}

impl NumericsHistory {
    /// Add a counted step.
    pub fn push(&mut self, stats: &StepStats, n: &Arc<StepNumerics>) {
        if self.layers.is_empty() {
            self.layers = n.layers.to_vec();
        }
        let mut cells = vec![Cell::default(); self.layers.len()];
        for r in &n.records {
            let Some(cell) = cells.get_mut(r.layer) else {
                continue;
            };
            let c = &r.counts;
            if !c.counted() {
                continue;
            }
            cell.counted = true;
            cell.overflow = cell.overflow.max(c.overflow_fraction() as f32);
            cell.underflow = cell.underflow.max(c.underflow_fraction() as f32);
            cell.non_finite |= c.non_finite > 0;
        }
        self.steps.push(CountedStep {
            step: stats.step,
            skipped: stats.skipped,
            cause: stats.skipped.then(|| n.skip_cause()).flatten(),
            cells,
        });
        self.latest = Some(n.clone());
    }

    /// The binade counts of `layer`'s `tensor` in the latest counted step: (binade, count)
    /// of each non-empty bin, and the values below and above the bins.
    pub fn binades(&self, layer: usize, tensor: ProbeTensor) -> Option<Binades> {
        let n = self.latest.as_ref()?;
        let r = n.get(layer, tensor)?;
        let c = &r.counts;
        let bins = crate::ops::numerics::BINS;
        let lo = crate::ops::numerics::LOWEST_BINADE;
        Some(Binades {
            step: self.steps.last().map_or(0, |s| s.step),
            stored: r.stored.name(),
            bins: c.binades[..bins]
                .iter()
                .enumerate()
                .filter(|(_, n)| **n > 0)
                .map(|(k, &n)| (lo + k as i32, n))
                .collect(),
            below: c.binades[bins],
            above: c.binades[bins + 1],
            zero: c.zero,
            non_finite: c.non_finite,
        })
    }
}

/// One tensor's exponent histogram.
#[derive(Clone, Debug, PartialEq)]
pub struct Binades {
    pub step: u64,
    pub stored: &'static str,
    pub bins: Vec<(i32, u64)>,
    pub below: u64,
    pub above: u64,
    pub zero: u64,
    pub non_finite: u64,
}
