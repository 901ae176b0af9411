//! Per-kernel GPU time of one mode's step, measured on a twin trainer (same model,
//! precision and batch; its weights do not matter) so the real run is untouched: every
//! kernel in its own compute pass with timestamp writes, resolved into a read-back slot.

use std::sync::Arc;

use crate::data::Batch;
use crate::error::{Error, Result};
use crate::gpu::{GpuBuffer, GpuContext, ReadbackRing};
use crate::nn::ModelSpec;
use crate::train::{BatchTargets, StepConfig, Trainer};

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
    query_set: wgpu::QuerySet,
    resolve: Arc<GpuBuffer>,
    read: ReadbackRing<u64>,
    labels: Vec<String>,
    next_step: u64,
}

impl Profiler {
    /// A twin of the mode's trainer, planned for `batch`; the first profile is taken once
    /// the run has submitted `first_step` steps.
    pub fn new(
        ctx: &GpuContext,
        spec: ModelSpec,
        config: StepConfig,
        target_dim: usize,
        init: &[(String, Vec<f32>)],
        batch: usize,
        first_step: u64,
    ) -> Result<Self> {
        let mut twin = Trainer::new(ctx, spec, config, target_dim, init)?;
        let labels: Vec<String> = twin
            .step_kernels(ctx, batch)?
            .iter()
            .map(|k| k.label.clone())
            .collect();
        let queries = 2 * labels.len() as u32;
        let query_set = ctx.device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("app.profile"),
            ty: wgpu::QueryType::Timestamp,
            count: queries,
        });
        let bytes = 8 * queries as u64;
        Ok(Self {
            twin,
            batch,
            query_set,
            resolve: ctx.alloc(
                "app.profile.resolve",
                bytes,
                wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            ),
            read: ReadbackRing::new(ctx, "app.profile.read", 1, bytes),
            labels,
            next_step: first_step,
        })
    }

    pub fn in_flight(&self) -> bool {
        self.read.in_flight() > 0
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
        if submitted < self.next_step || self.read.is_full() || batch.size != self.batch {
            return Ok(());
        }
        let net = self
            .twin
            .planned_network(self.batch)
            .ok_or_else(|| Error::InvalidArgument("network not planned".into()))?;
        Trainer::write_batch(ctx, net, &batch.x, &BatchTargets::from(&batch.y))?;
        let grads = self.twin.store.grads.clone();
        let kernels = self.twin.step_kernels(ctx, self.batch)?;
        let mut encoder = ctx.device.create_command_encoder(&Default::default());
        encoder.clear_buffer(grads.raw(), 0, None);
        for (i, k) in kernels.iter().enumerate() {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some(&k.label),
                timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                    query_set: &self.query_set,
                    beginning_of_pass_write_index: Some(2 * i as u32),
                    end_of_pass_write_index: Some(2 * i as u32 + 1),
                }),
            });
            k.encode(&mut pass);
        }
        let queries = 2 * kernels.len() as u32;
        encoder.resolve_query_set(&self.query_set, 0..queries, self.resolve.raw(), 0);
        if let Some(staging) = self.read.next_buffer() {
            let size = self.resolve.size();
            encoder.copy_buffer_to_buffer(self.resolve.raw(), 0, staging.raw(), 0, size);
        }
        self.read.submit(ctx, encoder, submitted)?;
        self.next_step = submitted.saturating_add(every.max(1));
        Ok(())
    }

    /// The profile that has landed, if one has.
    pub fn take(&mut self, ctx: &GpuContext) -> Option<Profile> {
        let period_ns = ctx.queue.get_timestamp_period() as f64;
        let labels = &self.labels;
        self.read.take_ready(|step, bytes| {
            let ticks: Vec<u64> = bytes
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect();
            let kernels = labels
                .iter()
                .enumerate()
                .map(|(i, label)| KernelTime {
                    label: label.clone(),
                    ms: ticks[2 * i + 1].saturating_sub(ticks[2 * i]) as f64 * period_ns / 1e6,
                })
                .collect();
            // The whole step: first kernel's start to last kernel's end, gaps between
            // passes included (some drivers run work lazily, between the timestamps of
            // its pass).
            let whole_ms = match (ticks.first(), ticks.last()) {
                (Some(&a), Some(&b)) => b.saturating_sub(a) as f64 * period_ns / 1e6,
                _ => 0.0,
            };
            Profile {
                step,
                kernels,
                whole_ms,
            }
        })
    }
}
