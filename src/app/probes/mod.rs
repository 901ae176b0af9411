//! GPU work the app reads back asynchronously next to training, each through a
//! [`crate::gpu::ReadbackRing`] of its own and never blocking a frame:
//! - [`eval`]: validation accuracy on held-out batches, with the run's current weights;
//! - [`profile`]: per-kernel GPU time of a step, on a twin trainer (timestamp queries);
//! - [`histogram`]: log2 histograms of one parameter's gradients, unscaled and scaled;
//! - [`sample`]: text sampled from a GPT run with its current weights.
//!
//! Each is due on a [`crate::train::Periodic`] schedule, the one the CLI's loop uses for its
//! loss estimates and checkpoints.

use std::sync::Arc;

use crate::error::Result;
use crate::gpu::{GpuBuffer, GpuContext, ReadbackRing};
use crate::train::Periodic;

pub mod eval;
pub mod histogram;
pub mod profile;
pub mod sample;

/// A buffer a probe fills on the GPU and reads back on a [`Periodic`] schedule, one copy in
/// flight at a time, tagged with the step it was taken at.
struct DueReadback {
    buffer: Arc<GpuBuffer>,
    read: ReadbackRing<u64>,
    due: Periodic,
}

impl DueReadback {
    /// `bytes` in a buffer labelled `{label}.{buffer}` (its read-back slot `{label}.read`),
    /// first due at step `first_step`.
    fn new(ctx: &GpuContext, label: &str, buffer: &str, bytes: u64, first_step: u64) -> Self {
        Self {
            buffer: ctx.alloc_storage(&format!("{label}.{buffer}"), bytes),
            read: ReadbackRing::new(ctx, &format!("{label}.read"), 1, bytes),
            due: Periodic::first_at(first_step),
        }
    }

    fn in_flight(&self) -> bool {
        self.read.in_flight() > 0
    }

    /// No step is due any more (the run's last has been taken).
    fn finished(&self) -> bool {
        self.due.finished()
    }

    /// When `submitted` steps reach the next due step and the previous copy has been taken:
    /// `fill` submits the work that writes the buffer, then the buffer is copied back; the
    /// next is due `every` steps later (or at `last`, the run's final step).
    fn maybe_submit(
        &mut self,
        ctx: &GpuContext,
        submitted: u64,
        every: u64,
        last: u64,
        fill: impl FnOnce(&Arc<GpuBuffer>) -> Result<()>,
    ) -> Result<()> {
        if !self.due.is_due(submitted) || self.read.is_full() {
            return Ok(());
        }
        fill(&self.buffer)?;
        let encoder = ctx.device.create_command_encoder(&Default::default());
        self.read
            .submit_copy(ctx, encoder, &self.buffer, submitted)?;
        self.due.taken(submitted, every, Some(last));
        Ok(())
    }

    /// `read` of (step, bytes) of the copy that has landed, if one has.
    fn take_ready<R>(&mut self, read: impl FnOnce(u64, &[u8]) -> R) -> Option<R> {
        self.read.take_ready(read)
    }
}
