//! Forward-only passes on the training model: validation (loss and accuracy over held-out
//! batches, read back once per 256 batches, or asynchronously by the app through a
//! [`crate::gpu::ReadbackRing`]) and prediction.

use super::batch::{BatchInput, BatchTargets};
use super::trainer::Trainer;
use crate::error::Result;
#[cfg(not(target_arch = "wasm32"))]
use crate::gpu::Kernel;
use crate::gpu::{GpuBuffer, GpuContext};
use crate::nn::LossKind;

/// Validation result.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Evaluation {
    pub loss: f32,
    pub accuracy: Option<f32>,
    /// Samples evaluated; for token data, tokens (the loss and accuracy are per token).
    pub samples: usize,
}

/// Sums over evaluated batches, from the words [`Trainer::submit_eval_batch`] leaves: per
/// batch, its mean loss (f32 bits) and its correct count.
#[derive(Clone, Copy, Debug, Default)]
pub struct EvalTally {
    loss_sum: f64,
    correct: u64,
    samples: usize,
}

impl EvalTally {
    /// Add the batches of sizes `sizes`, whose words are `words` (two per batch, in order).
    pub fn add(&mut self, sizes: &[usize], words: &[u32]) {
        for (&batch, w) in sizes.iter().zip(words.chunks_exact(2)) {
            self.loss_sum += f32::from_bits(w[0]) as f64 * batch as f64;
            self.correct += w[1] as u64;
            self.samples += batch;
        }
    }

    /// `[loss sum, correct, samples]`, to add tallies up across processes.
    pub fn sums(&self) -> [f64; 3] {
        [self.loss_sum, self.correct as f64, self.samples as f64]
    }

    /// A tally from [`EvalTally::sums`] (added up across processes).
    pub fn from_sums(sums: [f64; 3]) -> Self {
        Self {
            loss_sum: sums[0],
            correct: sums[1] as u64,
            samples: sums[2] as usize,
        }
    }

    /// Mean loss over the samples, and accuracy when the loss is cross-entropy.
    pub fn finish(&self, loss: LossKind) -> Evaluation {
        let n = self.samples.max(1);
        Evaluation {
            loss: (self.loss_sum / n as f64) as f32,
            accuracy: (loss == LossKind::CrossEntropy).then(|| self.correct as f32 / n as f32),
            samples: self.samples,
        }
    }
}

impl Trainer {
    /// Submit a forward of one held-out batch (forward only, the current weights) that
    /// leaves its mean loss (f32) and correct count (u32, cross-entropy only) in words
    /// `2 * slot` and `2 * slot + 1` of `results`. Nothing is read back: callers read the
    /// slots of many batches at once ([`Trainer::evaluate`]) or map them asynchronously
    /// (the app).
    pub fn submit_eval_batch<'x>(
        &mut self,
        ctx: &GpuContext,
        batch: usize,
        x: impl Into<BatchInput<'x>>,
        targets: &BatchTargets<'_>,
        results: &GpuBuffer,
        slot: usize,
    ) -> Result<()> {
        let i = self.plan_network(ctx, batch)?;
        let net = &self.nets[i];
        Self::write_batch(ctx, net, x, targets)?;
        net.set_dropout(ctx, 0, 0, false);
        let offset = 8 * slot as u64;
        let mut encoder = ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("evaluate"),
            });
        encoder.clear_buffer(net.correct.raw(), 0, None);
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            for k in self.weight_cast.iter().chain(net.eval_kernels()) {
                k.encode(&mut pass);
            }
        }
        let loss = (net.loss.buffer().raw(), net.loss.byte_offset());
        encoder.copy_buffer_to_buffer(loss.0, loss.1, results.raw(), offset, 4);
        encoder.copy_buffer_to_buffer(net.correct.raw(), 0, results.raw(), offset + 4, 4);
        ctx.queue.submit([encoder.finish()]);
        Ok(())
    }

    /// Mean loss and accuracy over `batches` (forward only). Reads back once at the end
    /// (once per 256 batches). Inputs are f32 features (`Vec<f32>`) or a gathered batch's
    /// [`crate::data::BatchInputs`].
    #[cfg(not(target_arch = "wasm32"))]
    pub fn evaluate<'a, X>(
        &mut self,
        ctx: &GpuContext,
        batches: impl IntoIterator<Item = (usize, X, BatchTargets<'a>)>,
    ) -> Result<Evaluation>
    where
        for<'x> &'x X: Into<BatchInput<'x>>,
    {
        Ok(self.evaluate_tally(ctx, batches)?.finish(self.config.loss))
    }

    /// The sums [`Trainer::evaluate`] finishes (native).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn evaluate_tally<'a, X>(
        &mut self,
        ctx: &GpuContext,
        batches: impl IntoIterator<Item = (usize, X, BatchTargets<'a>)>,
    ) -> Result<EvalTally>
    where
        for<'x> &'x X: Into<BatchInput<'x>>,
    {
        // Per batch, its loss and correct count are copied into a slot of `results`; the
        // slots are read back once per EVAL_CHUNK batches (once for most sets).
        const EVAL_CHUNK: usize = 256;
        let results = ctx.alloc_storage("eval.results", 8 * EVAL_CHUNK as u64);
        let mut sizes: Vec<usize> = Vec::with_capacity(EVAL_CHUNK);
        let mut tally = EvalTally::default();
        let mut drain = |sizes: &mut Vec<usize>| -> Result<()> {
            if sizes.is_empty() {
                return Ok(());
            }
            let bytes = ctx.read_bytes(&results, 0, 8 * sizes.len() as u64)?;
            tally.add(sizes, bytemuck::cast_slice(&bytes));
            sizes.clear();
            Ok(())
        };
        for (batch, x, targets) in batches {
            self.submit_eval_batch(ctx, batch, &x, &targets, &results, sizes.len())?;
            // Weigh each batch's mean loss and count its correct predictions per loss row:
            // one per sample, or one per token of token samples (one class label each).
            sizes.push(targets.rows(batch));
            if sizes.len() == EVAL_CHUNK {
                drain(&mut sizes)?;
            }
        }
        drain(&mut sizes)?;
        ctx.check()?;
        Ok(tally)
    }

    /// Run the model forward on `x` (batch samples: f32 features or token ids) and read its
    /// output back as f32 (native; tests and inference outside the step loop).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn predict<'x>(
        &mut self,
        ctx: &GpuContext,
        batch: usize,
        x: impl Into<BatchInput<'x>>,
    ) -> Result<Vec<f32>> {
        let i = self.plan_network(ctx, batch)?;
        let net = &self.nets[i];
        Self::write_input(ctx, net, x.into())?;
        net.set_dropout(ctx, 0, 0, false);
        let kernels: Vec<&Kernel> = self
            .weight_cast
            .iter()
            .chain(net.forward_kernels())
            .collect();
        ctx.run(&kernels);
        net.output.read_f32(ctx)
    }
}
