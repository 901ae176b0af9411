//! Validation of one mode without waiting: per held-out batch, the loss and correct count
//! land in a slot of `counts` ([`submit_eval_batch`]); then all slots are copied
//! into a read-back slot and mapped, and a later frame turns them into an accuracy.

use std::sync::Arc;

use crate::data::{Batch, Split};
use crate::error::Result;
use crate::gpu::{GpuBuffer, GpuContext, ReadbackRing};
use crate::nn::LossKind;
use crate::train::evaluate::submit_eval_batch;
use crate::train::{BatchTargets, EvalTally, Periodic, Trainer};

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
    counts: Arc<GpuBuffer>,
    read: ReadbackRing<u64>,
    due: Periodic,
}

impl EvalProbe {
    pub fn new(ctx: &GpuContext, set: &EvalSet, first_step: u64) -> Self {
        // Per batch: mean loss and correct count.
        let bytes = 8 * set.batches.len() as u64;
        Self {
            counts: ctx.alloc_storage("app.eval.counts", bytes),
            read: ReadbackRing::new(ctx, "app.eval.read", 1, bytes),
            due: Periodic::first_at(first_step),
        }
    }

    pub fn in_flight(&self) -> bool {
        self.read.in_flight() > 0
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
        if !self.due.is_due(submitted) || self.read.is_full() {
            return Ok(());
        }
        for (i, b) in set.batches.iter().enumerate() {
            let targets = BatchTargets::from(&b.y);
            submit_eval_batch(ctx, trainer, b.size, &b.x, &targets, &self.counts, i)?;
        }
        let encoder = ctx.device.create_command_encoder(&Default::default());
        self.read
            .submit_copy(ctx, encoder, &self.counts, submitted)?;
        self.due.taken(submitted, every, Some(last));
        Ok(())
    }

    /// (step, accuracy) of the validation that has landed, if one has.
    pub fn take(&mut self, set: &EvalSet) -> Option<(u64, f32)> {
        self.read.take_ready(|step, bytes| {
            let mut tally = EvalTally::default();
            tally.add(&set.sizes(), bytemuck::cast_slice(bytes));
            let accuracy = tally.finish(LossKind::CrossEntropy).accuracy.unwrap_or(0.0);
            (step, accuracy)
        })
    }
}
