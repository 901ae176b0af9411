//! Validation of one mode without waiting: per held-out batch, the loss and correct count
//! land in a slot of `counts` ([`Trainer::submit_eval_batch`]); then all slots are copied
//! into a read-back slot and mapped, and a later frame turns them into an accuracy.

use std::sync::Arc;

use crate::data::{Batch, Split};
use crate::error::Result;
use crate::gpu::{GpuBuffer, GpuContext, ReadbackRing};
use crate::nn::LossKind;
use crate::train::{BatchTargets, EvalTally, Trainer};

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
    /// The run's step count at which the next validation is submitted.
    next_step: u64,
}

impl EvalProbe {
    pub fn new(ctx: &GpuContext, set: &EvalSet, first_step: u64) -> Self {
        // Per batch: mean loss and correct count.
        let bytes = 8 * set.batches.len() as u64;
        Self {
            counts: ctx.alloc_storage("app.eval.counts", bytes),
            read: ReadbackRing::new(ctx, "app.eval.read", 1, bytes),
            next_step: first_step,
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
        if submitted < self.next_step || self.read.is_full() {
            return Ok(());
        }
        for (i, b) in set.batches.iter().enumerate() {
            let targets = BatchTargets::from(&b.y);
            trainer.submit_eval_batch(ctx, b.size, &b.x, &targets, &self.counts, i)?;
        }
        let mut encoder = ctx.device.create_command_encoder(&Default::default());
        if let Some(staging) = self.read.next_buffer() {
            encoder.copy_buffer_to_buffer(
                self.counts.raw(),
                0,
                staging.raw(),
                0,
                self.counts.size(),
            );
        }
        self.read.submit(ctx, encoder, submitted)?;
        self.next_step = if submitted >= last {
            u64::MAX
        } else {
            submitted.saturating_add(every).min(last)
        };
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
