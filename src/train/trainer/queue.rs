//! A trainer's steps in flight, as its users see them: whether the next micro-batch can go,
//! the stats ring's landed steps, throttle and host times, submissions, and the AMP doctor's
//! numbers read back (the queue itself is `train::in_flight`).

use super::Trainer;
use crate::error::Result;
use crate::gpu::GpuContext;
use crate::train::host_time::HostTimes;
use crate::train::numerics::StepNumerics;
use crate::train::numerics::passes::NumericsPasses;
use crate::train::stats::StepStats;

impl Trainer {
    /// Whether the next micro-batch can be submitted without waiting (for frame loops and
    /// [`crate::train::Run::advance`]): it does not complete a step, or a stats slot is free
    /// once the landed ones are taken.
    pub fn can_submit(&mut self, ctx: &GpuContext) -> bool {
        self.in_flight.can_submit(ctx, self.config.grad_accum)
    }

    /// Block until the oldest step in flight has finished, so the next step can be submitted.
    /// Waits for that one submission only and counts one throttle wait (and one host wait);
    /// does nothing when a stats slot is free. The web cannot wait: there a full ring is an
    /// error (check [`Trainer::can_submit`] first).
    pub fn wait_for_slot(&mut self, ctx: &GpuContext) -> Result<()> {
        self.in_flight.wait_for_slot(ctx)
    }

    /// Stats of the optimizer steps finished so far (non-blocking; a few steps late).
    pub fn poll_stats(&mut self, ctx: &GpuContext) -> Vec<StepStats> {
        self.in_flight.poll(ctx)
    }

    /// Wait for every submitted step and return the remaining stats (native; end of run):
    /// every step submitted is in them, even when another thread's poll fires the last
    /// read-backs' callbacks ([`crate::gpu::MapSignal`]). One host wait.
    pub fn finish(&mut self, ctx: &GpuContext) -> Result<Vec<StepStats>> {
        self.in_flight.finish(ctx)
    }

    /// Times the host waited because every stats slot was in flight (the GPU a whole ring
    /// of steps behind). Each such wait is also a host wait ([`GpuContext::host_waits`]).
    pub fn throttle_waits(&self) -> u64 {
        self.in_flight.ring().throttle_waits()
    }

    /// The step whose stats slot the latest throttle wait waited for (always the oldest
    /// step in flight then).
    pub fn last_throttle_wait(&self) -> Option<u64> {
        self.in_flight.ring().last_throttle_wait()
    }

    /// Optimizer steps submitted (by this trainer, since it was made).
    pub fn steps_submitted(&self) -> u64 {
        self.in_flight.steps_submitted()
    }

    /// How many optimizer steps' stats may be in flight at once
    /// ([`RING`](super::stats::RING) by default): how far the GPU may fall behind before
    /// the host waits.
    pub fn stats_ring_slots(&self) -> usize {
        self.in_flight.ring().slots()
    }

    /// Let `slots` steps' stats be in flight at once (at least 1). Only between steps with
    /// nothing in flight (right after planning, or after [`Trainer::finish`]).
    pub fn set_stats_ring_slots(&mut self, ctx: &GpuContext, slots: usize) -> Result<()> {
        self.in_flight.set_ring_slots(ctx, slots)
    }

    /// Optimizer steps submitted whose stats have not been collected yet.
    pub fn steps_in_flight(&self) -> usize {
        self.in_flight.ring().in_flight()
    }

    /// Command buffers [`Trainer::train_batch`] has submitted: one per micro-batch (and one
    /// more per optimizer step on a data-parallel rank, after the all-reduce).
    pub fn submissions(&self) -> u64 {
        self.in_flight.submissions()
    }

    /// Micro-batches already accumulated toward the next optimizer step.
    pub fn pending_micro_batches(&self) -> usize {
        self.in_flight.pending_micro_batches()
    }

    /// Host time spent in this trainer's steps (encode, submit, read-back) since it was made.
    pub fn host_times(&self) -> HostTimes {
        self.in_flight.host()
    }

    /// The counting passes a counted step at `batch` dispatches (`None`: numerics off, or
    /// no step at `batch` yet).
    pub fn numerics_passes(&self, batch: usize) -> Option<usize> {
        self.in_flight.numerics()?.passes(batch)
    }

    /// Every how many optimizer steps numerics are counted (`None`: off).
    pub fn numerics_every(&self) -> Option<u64> {
        self.in_flight.numerics().map(NumericsPasses::every)
    }

    /// The numerics of this trainer's optimizer step `step` (1-based, as
    /// [`StepStats::step`] reports it before a run renumbers it), once its stats have been
    /// collected; `None` when that step was not counted. Take steps in order: earlier
    /// ones still waiting are dropped.
    pub fn take_numerics(&mut self, step: u64) -> Option<StepNumerics> {
        self.in_flight.take_numerics(step)
    }
}
