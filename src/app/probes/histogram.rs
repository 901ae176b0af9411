//! The gradient histogram of one mode's parameter: after new steps of that mode, a log2
//! histogram of its gradients (unscaled, as the step left them, and times the scaler's
//! current scale) runs behind them in the queue and lands in a read-back slot.

use std::sync::Arc;

use crate::amp::policy::Precision;
use crate::error::{Error, Result};
use crate::gpu::{GpuBuffer, GpuContext, Kernel, ReadbackRing};
use crate::ops::histogram::{self, GradHistograms, HistogramRange};
use crate::train::Trainer;

/// The latest gradient histogram of the chosen mode and parameter.
#[derive(Clone, Debug, PartialEq)]
pub struct HistogramSnapshot {
    pub precision: Precision,
    pub param: String,
    /// Steps submitted when it was taken (the histogram shows that step's gradients).
    pub step: u64,
    /// The scale the second histogram was multiplied by (the scaler's current scale).
    pub scale: f32,
    pub hist: GradHistograms,
}

pub struct HistogramProbe {
    /// Index of the mode (into the session's runs) and the parameter it shows.
    pub mode: usize,
    pub param: String,
    range: HistogramRange,
    kernel: Kernel,
    counts: Arc<GpuBuffer>,
    scale: Arc<GpuBuffer>,
    read: ReadbackRing<u64>,
    last_step: u64,
}

impl HistogramProbe {
    pub fn new(
        ctx: &GpuContext,
        mode: usize,
        param: &str,
        trainer: &Trainer,
        range: HistogramRange,
    ) -> Result<Self> {
        let store = &trainer.store;
        let entry = store.layout.get(param).ok_or_else(|| {
            Error::InvalidArgument(format!("no parameter `{param}` in this model"))
        })?;
        let counts = ctx.alloc_storage("app.histogram.counts", range.bytes());
        let kernel = histogram::log2_histogram(
            ctx,
            &store.grads,
            entry.offset,
            entry.numel(),
            trainer.scaler.state_buffer(),
            &counts,
            range,
        )?;
        Ok(Self {
            mode,
            param: param.to_string(),
            range,
            kernel,
            counts,
            scale: trainer.scaler.state_buffer().clone(),
            // Counts, then the scale they were multiplied by.
            read: ReadbackRing::new(ctx, "app.histogram.read", 1, range.bytes() + 4),
            last_step: 0,
        })
    }

    pub fn in_flight(&self) -> bool {
        self.read.in_flight() > 0
    }

    /// After new steps of the mode (`submitted` of them so far), when the last histogram
    /// has been taken: histogram its gradients behind them in the queue.
    pub fn maybe_submit(&mut self, ctx: &GpuContext, submitted: u64) -> Result<()> {
        if submitted <= self.last_step || self.read.is_full() {
            return Ok(());
        }
        let mut encoder = ctx.device.create_command_encoder(&Default::default());
        encoder.clear_buffer(self.counts.raw(), 0, None);
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            self.kernel.encode(&mut pass);
        }
        if let Some(staging) = self.read.next_buffer() {
            let size = self.counts.size();
            encoder.copy_buffer_to_buffer(self.counts.raw(), 0, staging.raw(), 0, size);
            encoder.copy_buffer_to_buffer(self.scale.raw(), 0, staging.raw(), size, 4);
        }
        self.read.submit(ctx, encoder, submitted)?;
        self.last_step = submitted;
        Ok(())
    }

    /// The histogram that has landed, if one has.
    pub fn take(&mut self, precision: Precision) -> Result<Option<HistogramSnapshot>> {
        let range = self.range;
        let param = self.param.clone();
        self.read
            .take_ready(|step, bytes| {
                let w: &[u32] = bytemuck::cast_slice(bytes);
                Ok(HistogramSnapshot {
                    precision,
                    param,
                    step,
                    scale: f32::from_bits(w[range.words()]),
                    hist: GradHistograms::from_words(range, w)?,
                })
            })
            .transpose()
    }
}
