//! The gradient all-reduce inside a data-parallel rank's step (native). The step of such a
//! trainer splits its last micro-batch's submission in two:
//! 1. forward + backward (as always), then a copy of the flat f32 gradient buffer and of the
//!    step's micro-batch losses into a `MAP_READ` staging buffer; submit;
//! 2. **the host waits** for that submission (one counted host wait per optimizer step: wgpu
//!    buffers are not memory MPI can read, so the gradients cross the host);
//! 3. the mapped gradients and losses are summed over the ranks by one nonblocking
//!    all-reduce (the whole flat buffer is one bucket), while the host checks its own
//!    gradients for inf/NaN and gathers the next micro-batch; **the host waits** for the
//!    all-reduce to complete (`dist::mpi`), then for the logical-or of the found-inf flags;
//! 4. the summed gradients and the losses averaged over ranks are written back with
//!    `queue.write_buffer`, and (when any rank saw inf/NaN and the GradScaler is on)
//!    `found_inf` is set by a copy at the head of the rest of the step, so a step that
//!    fails before its submit leaves no flag for the next one (which does not reset it);
//! 5. unscale, clipping, the optimizer step and the scale update are recorded and submitted
//!    as in a single process, into the stats ring (`train/stepping/step.rs`).
//!
//! A model with buffers (running statistics, counters: `nn::buffers`) also sends the
//! working copy its forwards wrote along in step 1, and every rank takes rank 0's (PyTorch
//! DDP's `broadcast_buffers`) in step 4, before the step commits it: every rank holds rank
//! 0's buffers, bit for bit.
//!
//! The backward of every rank is seeded with `1 / (micro-batches × ranks)` instead of
//! `1 / micro-batches`: each rank's gradient is its share of the mean over the global batch,
//! so the all-reduce is a plain sum and every f16 value in a rank's backward equals the one a
//! single process with the global batch computes for the same sample (same overflows, same
//! skipped steps). A single process never takes any of this: its step is one submit per
//! micro-batch, unchanged.

use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use super::StepBuffers;
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

/// The gradient all-reduce of one trainer (steps 1–4 of the module docs).
pub(crate) struct GradExchange {
    collective: Rc<dyn Collective>,
    staging: Arc<GpuBuffer>,
    grad_bytes: u64,
    loss_words: usize,
    sum: Vec<f32>,
    /// The buffers' working copy and its words (none for a model without buffers).
    working: Option<(Arc<GpuBuffer>, usize)>,
    /// One u32 1: copied into the GradScaler's found_inf when any rank saw inf/NaN.
    found_inf_one: Arc<GpuBuffer>,
    pub(crate) stats: ExchangeStats,
}

impl GradExchange {
    pub(crate) fn new(
        ctx: &GpuContext,
        collective: Rc<dyn Collective>,
        grads: &GpuBuffer,
        loss_words: usize,
        working: Option<(Arc<GpuBuffer>, usize)>,
    ) -> Self {
        let grad_bytes = grads.size();
        let bytes = grad_bytes + 4 * loss_words as u64;
        let buffer_bytes = working.as_ref().map_or(0, |(_, words)| 4 * *words as u64);
        let staging = ctx.alloc(
            "step.exchange",
            bytes + buffer_bytes,
            wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        );
        let found_inf_one = ctx.alloc_storage("step.exchange.found_inf", 4);
        ctx.write_buffer(&found_inf_one, 0, bytemuck::bytes_of(&1u32));
        Self {
            collective,
            staging,
            found_inf_one,
            grad_bytes,
            loss_words,
            sum: vec![0.0; (bytes / 4) as usize],
            working,
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
    pub(crate) fn exchange(
        &mut self,
        ctx: &GpuContext,
        mut encoder: wgpu::CommandEncoder,
        step: StepBuffers<'_>,
        overlap: &mut dyn FnMut(),
    ) -> Result<wgpu::CommandEncoder> {
        let StepBuffers {
            grads,
            metrics,
            scaler_state,
        } = step;
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
        let reduced_bytes = self.grad_bytes + loss_bytes;
        if let Some((working, words)) = &self.working {
            let bytes = 4 * *words as u64;
            encoder.copy_buffer_to_buffer(
                working.raw(),
                0,
                self.staging.raw(),
                reduced_bytes,
                bytes,
            );
        }
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
        let mut buffer_words: Vec<f32>;
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
            let (mine, buffers) = mine.split_at(self.sum.len());
            self.collective
                .all_reduce_sum_f32(mine, &mut self.sum, &mut || {
                    local_nonfinite = mine[..grad_words].iter().any(|g| !g.is_finite());
                    overlap();
                })?;
            buffer_words = buffers.to_vec();
        }
        self.staging.raw().unmap();
        let any_nonfinite = self.collective.any(local_nonfinite)?;
        if let Some((working, _)) = &self.working {
            // Rank 0's buffers on every rank (bits: a broadcast copies, it adds nothing).
            self.collective.broadcast_f32(&mut buffer_words)?;
            ctx.write_buffer(working, 0, bytemuck::cast_slice(&buffer_words));
        }
        self.stats.all_reduce_secs += reducing.elapsed().as_secs_f64();
        self.stats.steps += 1;
        self.stats.local_nonfinite_steps += local_nonfinite as u64;

        let ranks = self.collective.size() as f32;
        for loss in &mut self.sum[grad_words..] {
            *loss /= ranks;
        }
        ctx.write_buffer(grads, 0, bytemuck::cast_slice(&self.sum[..grad_words]));
        ctx.write_buffer(
            metrics,
            loss_offset,
            bytemuck::cast_slice(&self.sum[grad_words..]),
        );
        let mut rest = ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("step.after-all-reduce"),
            });
        if let Some(scaler_state) = scaler_state
            && any_nonfinite
        {
            // found_inf (state word 2): every rank skips this step, also one whose own
            // gradients were finite. The unscale kernel only ever sets it further.
            rest.copy_buffer_to_buffer(
                self.found_inf_one.raw(),
                0,
                scaler_state.raw(),
                4 * crate::amp::scaler::WORD_FOUND_INF as u64,
                4,
            );
        }
        Ok(rest)
    }
}
