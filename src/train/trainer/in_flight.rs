//! The trainer's steps in flight: whether the next micro-batch can go without waiting, the
//! one wait the host ever makes (for the oldest stats slot), collecting finished steps' stats,
//! and what has been submitted so far.

use super::Trainer;
use crate::train::profile::Clock;
use crate::train::stats::StepStats;
use crate::{Error, GpuContext, Result};

impl Trainer {
    /// Whether the next micro-batch can be submitted without waiting (for frame loops and
    /// [`crate::train::Run::advance`]): it does not complete a step, or a stats slot is free
    /// once the landed ones are taken.
    pub fn can_submit(&mut self, ctx: &GpuContext) -> bool {
        self.micro + 1 < self.config.grad_accum || !self.stats.is_full(ctx)
    }

    /// Block until the oldest step in flight has finished, so the next step can be submitted
    /// (native). Waits for that one submission only and counts one throttle wait (and one
    /// host wait); does nothing when a stats slot is free.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn wait_for_slot(&mut self, ctx: &GpuContext) -> Result<()> {
        if self.stats.is_full(ctx) {
            let waiting = Clock::now();
            self.stats.wait_oldest(ctx)?;
            self.host.readback += waiting.elapsed();
        }
        Ok(())
    }

    /// Stats of the optimizer steps finished so far (non-blocking; a few steps late).
    pub fn poll_stats(&mut self, ctx: &GpuContext) -> Vec<StepStats> {
        let reading = Clock::now();
        self.stats.collect(ctx);
        let stats = self.stats.drain();
        self.host.readback += reading.elapsed();
        stats
    }

    /// Wait for every submitted step and return the remaining stats (native; end of run):
    /// every step submitted is in them, even when another thread's poll fires the last
    /// read-backs' callbacks ([`crate::gpu::MapSignal`]). One host wait.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn finish(&mut self, ctx: &GpuContext) -> Result<Vec<StepStats>> {
        let waiting = Clock::now();
        ctx.sync()?;
        self.stats.collect_all(ctx)?;
        self.host.readback += waiting.elapsed();
        Ok(self.stats.drain())
    }

    /// Times the host waited because every stats slot was in flight (the GPU a whole ring
    /// of steps behind). Each such wait is also a host wait ([`GpuContext::host_waits`]).
    pub fn throttle_waits(&self) -> u64 {
        self.stats.throttle_waits()
    }

    /// The step whose stats slot the latest throttle wait waited for (always the oldest
    /// step in flight then).
    pub fn last_throttle_wait(&self) -> Option<u64> {
        self.stats.last_throttle_wait()
    }

    /// Optimizer steps submitted (by this trainer, since it was made).
    pub fn steps_submitted(&self) -> u64 {
        self.steps_submitted
    }

    /// How many optimizer steps' stats may be in flight at once
    /// ([`RING`](crate::train::stats::RING) by default): how far the GPU may fall behind
    /// before the host waits.
    pub fn stats_ring_slots(&self) -> usize {
        self.stats.slots()
    }

    /// Let `slots` steps' stats be in flight at once (at least 1). Only between steps with
    /// nothing in flight (right after planning, or after [`Trainer::finish`]).
    pub fn set_stats_ring_slots(&mut self, ctx: &GpuContext, slots: usize) -> Result<()> {
        if slots == 0 || !self.stats.resize(ctx, slots, self.metrics.size()) {
            return Err(Error::InvalidArgument(
                "the stats ring needs at least 1 slot and no step in flight to change".into(),
            ));
        }
        Ok(())
    }

    /// Optimizer steps submitted whose stats have not been collected yet.
    pub fn steps_in_flight(&self) -> usize {
        self.stats.in_flight()
    }

    /// Command buffers [`Trainer::train_batch`] has submitted: one per micro-batch (and one
    /// more per optimizer step on a data-parallel rank, after the all-reduce).
    pub fn submissions(&self) -> u64 {
        self.submissions
    }

    /// Micro-batches already accumulated toward the next optimizer step.
    pub fn pending_micro_batches(&self) -> usize {
        self.micro
    }
}
