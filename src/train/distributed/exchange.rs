//! The gradient all-reduce inside a distributed trainer's step (steps 1–4 of the module
//! docs of `distributed.rs`): stage the gradients and losses for the host, sum them over
//! the ranks, write them back with the agreed found-inf flag.

use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use crate::dist::Collective;
use crate::error::{Error, Result};
use crate::gpu::{GpuBuffer, GpuContext, MapSignal};
use crate::train::stats::METRIC_LOSSES;

/// What the exchange did so far (this rank).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ExchangeStats {
    /// Optimizer steps whose gradients were all-reduced.
    pub steps: u64,
    /// Bytes this rank contributes to each step's all-reduce (gradients + losses).
    pub bytes_per_step: u64,
    /// Seconds the host waited for the forward + backward before reading the gradients.
    pub readback_secs: f64,
    /// Seconds spent in the all-reduces (gradients, then found-inf), overlapped work included.
    pub all_reduce_secs: f64,
    /// Steps whose gradients held inf/NaN on this rank before the all-reduce.
    pub local_nonfinite_steps: u64,
}

/// The gradient all-reduce of one trainer. See the module docs.
pub(crate) struct GradExchange {
    collective: Rc<dyn Collective>,
    staging: Arc<GpuBuffer>,
    grad_bytes: u64,
    loss_words: usize,
    sum: Vec<f32>,
    pub(crate) stats: ExchangeStats,
}

impl GradExchange {
    pub(crate) fn new(
        ctx: &GpuContext,
        collective: Rc<dyn Collective>,
        grads: &GpuBuffer,
        loss_words: usize,
    ) -> Self {
        let grad_bytes = grads.size();
        let bytes = grad_bytes + 4 * loss_words as u64;
        let staging = ctx.alloc(
            "step.exchange",
            bytes,
            wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        );
        Self {
            collective,
            staging,
            grad_bytes,
            loss_words,
            sum: vec![0.0; (bytes / 4) as usize],
            stats: ExchangeStats {
                bytes_per_step: bytes,
                ..Default::default()
            },
        }
    }

    pub(crate) fn collective(&self) -> &Rc<dyn Collective> {
        &self.collective
    }

    /// Submit `encoder` (forward + backward of the step's last micro-batch) with the copy of
    /// the gradients and losses, wait for it, all-reduce, write the results back, and return
    /// a fresh encoder for the rest of the step. `overlap` runs during the all-reduce.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn exchange(
        &mut self,
        ctx: &GpuContext,
        mut encoder: wgpu::CommandEncoder,
        grads: &GpuBuffer,
        metrics: &GpuBuffer,
        scaler_state: &GpuBuffer,
        scaler_enabled: bool,
        overlap: &mut dyn FnMut(),
    ) -> Result<wgpu::CommandEncoder> {
        let loss_offset = 4 * METRIC_LOSSES;
        let loss_bytes = 4 * self.loss_words as u64;
        encoder.copy_buffer_to_buffer(grads.raw(), 0, self.staging.raw(), 0, self.grad_bytes);
        encoder.copy_buffer_to_buffer(
            metrics.raw(),
            loss_offset,
            self.staging.raw(),
            self.grad_bytes,
            loss_bytes,
        );
        let index = ctx.queue.submit([encoder.finish()]);
        let waited = Instant::now();
        let landed = MapSignal::new();
        landed.map_read(self.staging.raw());
        ctx.count_host_wait();
        landed.wait(ctx, Some(index)).map_err(|e| match e {
            Error::DeviceLost(_) => e,
            _ => Error::Gpu(format!(
                "the gradients could not be read back for the all-reduce: {e}"
            )),
        })?;
        ctx.check()?;
        self.stats.readback_secs += waited.elapsed().as_secs_f64();

        let reducing = Instant::now();
        let grad_words = (self.grad_bytes / 4) as usize;
        let mut local_nonfinite = false;
        {
            let view = self
                .staging
                .raw()
                .slice(..)
                .get_mapped_range()
                .map_err(|e| Error::Gpu(format!("mapping the gradients failed: {e}")))?;
            let copied: Vec<f32>;
            let mine: &[f32] = match bytemuck::try_cast_slice(&view) {
                Ok(words) => words,
                Err(_) => {
                    copied = bytemuck::pod_collect_to_vec(&view);
                    &copied
                }
            };
            self.collective
                .all_reduce_sum_f32(mine, &mut self.sum, &mut || {
                    local_nonfinite = mine[..grad_words].iter().any(|g| !g.is_finite());
                    overlap();
                })?;
        }
        self.staging.raw().unmap();
        let any_nonfinite = self.collective.any(local_nonfinite)?;
        self.stats.all_reduce_secs += reducing.elapsed().as_secs_f64();
        self.stats.steps += 1;
        self.stats.local_nonfinite_steps += local_nonfinite as u64;

        let ranks = self.collective.size() as f32;
        for loss in &mut self.sum[grad_words..] {
            *loss /= ranks;
        }
        ctx.queue.write_buffer(
            grads.raw(),
            0,
            bytemuck::cast_slice(&self.sum[..grad_words]),
        );
        ctx.queue.write_buffer(
            metrics.raw(),
            loss_offset,
            bytemuck::cast_slice(&self.sum[grad_words..]),
        );
        if scaler_enabled && any_nonfinite {
            // found_inf (state word 2): every rank skips this step, also one whose own
            // gradients were finite. The unscale kernel only ever sets it further.
            ctx.queue.write_buffer(
                scaler_state.raw(),
                4 * crate::amp::scaler::WORD_FOUND_INF as u64,
                bytemuck::bytes_of(&1u32),
            );
        }
        Ok(ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("step.after-all-reduce"),
            }))
    }
}
