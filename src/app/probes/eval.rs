//! Validation of one mode without waiting: per held-out batch, the loss and correct count
//! land in a slot of `counts` ([`submit_eval_batch`]); then all slots are copied
//! into a read-back slot and mapped, and a later frame turns them into an accuracy.

use super::DueReadback;
use crate::data::{Batch, Split};
use crate::error::Result;
use crate::gpu::GpuContext;
use crate::nn::LossKind;
use crate::train::evaluate::submit_eval_batch;
use crate::train::{EvalTally, Trainer};

/// Held-out batches for validation (full batches only, so the training network serves).
pub struct EvalSet {
    batches: Vec<Batch>,
}

impl EvalSet {
    /// Up to `samples` held-out samples of `split` in batches of `batch`, when the loss
    /// has an accuracy (cross-entropy) and there are enough samples for one batch.
    pub fn new(
        split: &Split,
        loss: LossKind,
        batch: usize,
        samples: usize,
    ) -> Result<Option<Self>> {
        let set = match (loss, split.eval_set()) {
            (LossKind::CrossEntropy, Some(set)) if set.n >= batch => set,
            _ => return Ok(None),
        };
        let n = (samples / batch).clamp(1, set.n / batch);
        let batches = (0..n)
            .map(|b| {
                let idx: Vec<usize> = (b * batch..(b + 1) * batch).collect();
                set.gather(&idx)
            })
            .collect::<Result<_>>()?;
        Ok(Some(Self { batches }))
    }

    fn sizes(&self) -> Vec<usize> {
        self.batches.iter().map(|b| b.size).collect()
    }
}

/// One mode's validation in flight (or due).
pub struct EvalProbe {
    /// Per batch: mean loss and correct count.
    counts: DueReadback,
}

impl EvalProbe {
    pub fn new(ctx: &GpuContext, set: &EvalSet, first_step: u64) -> Self {
        let bytes = 8 * set.batches.len() as u64;
        Self {
            counts: DueReadback::new(ctx, "app.eval", "counts", bytes, first_step),
        }
    }

    pub fn in_flight(&self) -> bool {
        self.counts.in_flight()
    }

    /// Submit a validation of `trainer`'s current weights when `submitted` steps reach the
    /// next due step and the previous one has been taken; the one after is due
    /// `every` steps later (or at `last`, the run's final step).
    pub fn maybe_submit(
        &mut self,
        ctx: &GpuContext,
        trainer: &mut Trainer,
        set: &EvalSet,
        submitted: u64,
        every: u64,
        last: u64,
    ) -> Result<()> {
        self.counts
            .maybe_submit(ctx, submitted, every, last, |counts| {
                for (i, b) in set.batches.iter().enumerate() {
                    let targets = b.targets();
                    submit_eval_batch(ctx, trainer, b.size, b.input(), &targets, counts, i)?;
                }
                Ok(())
            })
    }

    /// (step, accuracy) of the validation that has landed, if one has.
    pub fn take(&mut self, set: &EvalSet) -> Option<(u64, f32)> {
        self.counts.take_ready(|step, bytes| {
            let mut tally = EvalTally::default();
            tally.add(&set.sizes(), bytemuck::cast_slice(bytes));
            let accuracy = tally.finish(LossKind::CrossEntropy).accuracy.unwrap_or(0.0);
            (step, accuracy)
        })
    }
}
