//! The steps a trainer has in flight: the metrics words a step writes on the GPU, the ring
//! of mapped buffers they come home through ([`StatsRing`]), the AMP doctor's counts that
//! ride home with them ([`NumericsPasses`]), and the counts of what was submitted: the
//! micro-batch count toward the next optimizer step, submissions, optimizer steps and the
//! host's time ([`HostTimes`]).
//!
//! A step's recording (`step.rs`) tells this bookkeeping what it submitted; the trainer
//! (its private field) collects and waits through it and reports from it. No other file
//! of `train/` reaches it.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::gpu::{GpuBuffer, GpuContext};
use crate::nn::Network;
use crate::train::host_time::{Clock, HostTimes};
use crate::train::numerics::StepNumerics;
use crate::train::numerics::passes::NumericsPasses;
use crate::train::stats::{METRIC_LOSSES, RING, StatsRing, StepStats};

/// A trainer's steps in flight. See the module docs.
pub(in crate::train) struct InFlight {
    /// [scale used, found_inf, scale after the update, loss of micro-batch 0, 1, ...]
    /// ([`METRIC_LOSSES`]).
    metrics: Arc<GpuBuffer>,
    stats: StatsRing,
    /// The AMP doctor's counting passes (`StepConfig::numerics`; none when off).
    numerics: Option<NumericsPasses>,
    /// Micro-batches already accumulated toward the next optimizer step.
    micro: usize,
    steps_submitted: u64,
    submissions: u64,
    /// Host time spent in the steps (encode, submit, read-back).
    host: HostTimes,
}

impl InFlight {
    /// Nothing in flight: metrics for steps of `grad_accum` micro-batches, a ring of
    /// [`RING`] stats slots, and the counting passes `numerics` makes (numerics on).
    pub(in crate::train) fn new(
        ctx: &GpuContext,
        grad_accum: usize,
        numerics: impl FnOnce() -> Result<Option<NumericsPasses>>,
    ) -> Result<Self> {
        let metrics_bytes = 4 * (METRIC_LOSSES + grad_accum as u64);
        let metrics = ctx.alloc_storage("step.metrics", metrics_bytes);
        let numerics = numerics()?;
        let stats = StatsRing::new(ctx, RING, slot_bytes(&metrics, numerics.as_ref()));
        Ok(Self {
            metrics,
            stats,
            numerics,
            micro: 0,
            steps_submitted: 0,
            submissions: 0,
            host: HostTimes::default(),
        })
    }

    /// The step's metrics words on the GPU (see [`InFlight`]'s field docs).
    pub(in crate::train) fn metrics(&self) -> &Arc<GpuBuffer> {
        &self.metrics
    }

    /// Micro-batches already accumulated toward the next optimizer step.
    pub(in crate::train) fn pending_micro_batches(&self) -> usize {
        self.micro
    }

    /// Whether the next micro-batch can be submitted without waiting: it does not complete
    /// a step of `grad_accum` micro-batches, or a stats slot is free once the landed ones
    /// are taken.
    pub(in crate::train) fn can_submit(&mut self, ctx: &GpuContext, grad_accum: usize) -> bool {
        self.micro + 1 < grad_accum || !self.stats.is_full(ctx)
    }

    /// Block for the oldest step in flight when every stats slot is (one throttle wait, one
    /// host wait); nothing when a slot is free.
    pub(in crate::train) fn wait_for_slot(&mut self, ctx: &GpuContext) -> Result<()> {
        if self.stats.is_full(ctx) {
            let waiting = Clock::now();
            self.stats.wait_oldest(ctx)?;
            self.host.readback += waiting.elapsed();
        }
        Ok(())
    }

    /// Stats of the steps finished so far, without waiting.
    pub(in crate::train) fn poll(&mut self, ctx: &GpuContext) -> Vec<StepStats> {
        let reading = Clock::now();
        self.stats.collect(ctx);
        let stats = self.stats.drain();
        self.host.readback += reading.elapsed();
        stats
    }

    /// Wait for every submitted step and return the remaining stats (one host wait).
    pub(in crate::train) fn finish(&mut self, ctx: &GpuContext) -> Result<Vec<StepStats>> {
        let waiting = Clock::now();
        self.stats.collect_all(ctx)?;
        self.host.readback += waiting.elapsed();
        Ok(self.stats.drain())
    }

    /// The stats ring (slots, steps in flight, throttle waits).
    pub(in crate::train) fn ring(&self) -> &StatsRing {
        &self.stats
    }

    /// Make the stats ring `slots` deep (at least 1; nothing in flight).
    pub(in crate::train) fn set_ring_slots(
        &mut self,
        ctx: &GpuContext,
        slots: usize,
    ) -> Result<()> {
        let bytes = slot_bytes(&self.metrics, self.numerics.as_ref());
        if slots == 0 || !self.stats.resize(ctx, slots, bytes) {
            return Err(Error::InvalidArgument(
                "the stats ring needs at least 1 slot and no step in flight to change".into(),
            ));
        }
        Ok(())
    }

    /// Optimizer steps submitted.
    pub(in crate::train) fn steps_submitted(&self) -> u64 {
        self.steps_submitted
    }

    /// Command buffers submitted.
    pub(in crate::train) fn submissions(&self) -> u64 {
        self.submissions
    }

    /// Host time spent in the steps so far.
    pub(in crate::train) fn host(&self) -> HostTimes {
        self.host
    }

    // The AMP doctor's counts.

    /// The counting passes (`None`: numerics off).
    pub(in crate::train) fn numerics(&self) -> Option<&NumericsPasses> {
        self.numerics.as_ref()
    }

    /// Make the counting passes of `net` (once per batch size; nothing when numerics are
    /// off).
    pub(in crate::train) fn plan_numerics(
        &mut self,
        ctx: &GpuContext,
        net: &Network,
    ) -> Result<()> {
        match &mut self.numerics {
            Some(n) => n.plan(ctx, net),
            None => Ok(()),
        }
    }

    /// The numerics of optimizer step `step` once collected (see [`StatsRing::take_numerics`]).
    pub(in crate::train) fn take_numerics(&mut self, step: u64) -> Option<StepNumerics> {
        let passes = self.numerics.as_ref()?;
        let words = self.stats.take_numerics(step)?;
        passes.decode(&words).ok()
    }

    // What a step's recording submits.

    /// Submit a micro-batch that does not end its step (encoding since `encoding`).
    pub(in crate::train) fn submit_micro_batch(
        &mut self,
        ctx: &GpuContext,
        encoder: wgpu::CommandEncoder,
        encoding: Clock,
    ) {
        self.submissions += 1;
        self.host.encode += encoding.elapsed();
        let submitting = Clock::now();
        ctx.queue.submit([encoder.finish()]);
        self.host.submit += submitting.elapsed();
        self.micro += 1;
    }

    /// Count a submission made for the step outside this bookkeeping (a data-parallel
    /// rank's forward and backward, submitted before the all-reduce).
    pub(in crate::train) fn count_submission(&mut self) {
        self.submissions += 1;
    }

    /// The stats slot the step being recorded copies its metrics into.
    pub(in crate::train) fn next_slot(&self) -> Result<&GpuBuffer> {
        self.stats
            .next_buffer()
            .ok_or_else(|| Error::Gpu("no free stats slot".into()))
    }

    /// Submit a step's last micro-batch (which copied its metrics into
    /// [`InFlight::next_slot`], and its counts after them from word `numerics_at` when it
    /// counted them): one optimizer step of `grad_accum` micro-batches at `lr`.
    pub(in crate::train) fn submit_step(
        &mut self,
        ctx: &GpuContext,
        encoder: wgpu::CommandEncoder,
        (grad_accum, lr): (usize, f32),
        numerics_at: Option<usize>,
        encoding: Clock,
    ) -> Result<()> {
        self.submissions += 1;
        self.steps_submitted += 1;
        self.host.encode += encoding.elapsed();
        let submitting = Clock::now();
        self.host.steps += 1;
        let step = self.steps_submitted;
        self.stats
            .submit(ctx, encoder, step, grad_accum, lr, numerics_at)?;
        self.host.submit += submitting.elapsed();
        self.micro = 0;
        Ok(())
    }
}

/// Bytes of a stats slot: the metrics, then (numerics on) the counts buffer.
fn slot_bytes(metrics: &GpuBuffer, numerics: Option<&NumericsPasses>) -> u64 {
    metrics.size() + numerics.map_or(0, |n| n.buffer().size())
}
