//! Per-kernel GPU time of one mode's step, measured on a twin trainer (same model,
//! precision and batch; its weights do not matter) so the real run is untouched, with the
//! GPU layer's [`KernelTimer`] (every kernel in its own timed compute pass).

use crate::data::Batch;
use crate::error::{Error, Result};
use crate::gpu::{GpuContext, KernelTimer};
use crate::train::batch::write_batch;
use crate::train::{Periodic, Trainer};

/// One kernel's GPU time in the latest profile of a mode.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelTime {
    pub label: String,
    pub ms: f64,
}

/// A finished profile: the step it was taken at, each kernel's time, and the whole step's
/// time (first kernel's start to last kernel's end).
pub struct Profile {
    pub step: u64,
    pub kernels: Vec<KernelTime>,
    pub whole_ms: f64,
}

pub struct Profiler {
    twin: Trainer,
    batch: usize,
    timer: KernelTimer,
    labels: Vec<String>,
    due: Periodic,
}

impl Profiler {
    /// Profiles of `twin`, a twin of the mode's trainer (its own buffers, the same model and
    /// step), planned for `batch`; the first profile is taken once the run has submitted
    /// `first_step` steps.
    pub fn new(ctx: &GpuContext, mut twin: Trainer, batch: usize, first_step: u64) -> Result<Self> {
        let labels: Vec<String> = twin
            .step_kernels(ctx, batch)?
            .iter()
            .map(|k| k.label.clone())
            .collect();
        let timer = KernelTimer::new(ctx, "app.profile", labels.len(), 1)?;
        Ok(Self {
            twin,
            batch,
            timer,
            labels,
            due: Periodic::first_at(first_step),
        })
    }

    pub fn in_flight(&self) -> bool {
        self.timer.in_flight()
    }

    /// When `submitted` steps reach the next due step and the last profile has been taken:
    /// run one step of the twin on `batch` (the batch the run just used; any real batch
    /// will do), each kernel timed; the next one is due `every` steps later.
    pub fn maybe_submit(
        &mut self,
        ctx: &GpuContext,
        batch: Option<&Batch>,
        submitted: u64,
        every: u64,
    ) -> Result<()> {
        let Some(batch) = batch else {
            return Ok(());
        };
        if !self.due.is_due(submitted) || self.timer.is_full() || batch.size != self.batch {
            return Ok(());
        }
        let net = self
            .twin
            .planned_network(self.batch)
            .ok_or_else(|| Error::InvalidArgument("network not planned".into()))?;
        write_batch(ctx, net, batch.input(), &batch.targets())?;
        let grads = self.twin.store.grads.clone();
        let kernels = self.twin.step_kernels(ctx, self.batch)?;
        let mut encoder = ctx.device.create_command_encoder(&Default::default());
        encoder.clear_buffer(grads.raw(), 0, None);
        self.timer.submit(ctx, encoder, &kernels, submitted)?;
        self.due.taken(submitted, every, None);
        Ok(())
    }

    /// The profile that has landed, if one has.
    pub fn take(&mut self, ctx: &GpuContext) -> Option<Profile> {
        let times = self.timer.take(ctx)?;
        let kernels = self
            .labels
            .iter()
            .zip(&times.ms)
            .map(|(label, &ms)| KernelTime {
                label: label.clone(),
                ms,
            })
            .collect();
        Some(Profile {
            step: times.tag,
            kernels,
            whole_ms: times.whole_ms,
        })
    }
}
