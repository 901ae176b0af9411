//! Forward-only passes on the training model, as functions over a [`Trainer`]: validation
//! (loss and accuracy over held-out batches: [`submit_eval_batch`] leaves each batch's
//! results on the GPU for the app to map asynchronously; [`evaluate`] and
//! [`evaluate_indices`] read them back once per chunk of up to 256 batches, native) and prediction
//! ([`predict`], native).

use crate::error::Result;
use crate::gpu::{GpuBuffer, GpuContext};
use crate::nn::LossKind;
use crate::train::batch::{BatchInput, BatchTargets, write_batch};
use crate::train::trainer::Trainer;

#[cfg(not(target_arch = "wasm32"))]
pub use blocking::{Tally, evaluate, evaluate_indices, predict};

/// Validation result.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Evaluation {
    pub loss: f32,
    pub accuracy: Option<f32>,
    /// Samples evaluated; for token data, tokens (the loss and accuracy are per token).
    pub samples: usize,
}

/// Sums over evaluated batches, from the words [`submit_eval_batch`] leaves: per
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

/// Submit a forward of one held-out batch (forward only, `trainer`'s current weights) that
/// leaves its mean loss (f32) and correct count (u32, cross-entropy only) in words
/// `2 * slot` and `2 * slot + 1` of `results`. Nothing is read back: callers read the slots
/// of many batches at once ([`evaluate`]) or map them asynchronously (the app).
pub fn submit_eval_batch<'x>(
    ctx: &GpuContext,
    trainer: &mut Trainer,
    batch: usize,
    x: impl Into<BatchInput<'x>>,
    targets: &BatchTargets<'_>,
    results: &GpuBuffer,
    slot: usize,
) -> Result<()> {
    let (net, weight_cast, flip) = trainer.eval_parts(ctx, batch)?;
    write_batch(ctx, net, x, targets)?;
    net.set_dropout(ctx, 0, 0, false);
    let offset = 8 * slot as u64;
    let mut encoder = ctx
        .device
        .create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("evaluate"),
        });
    encoder.clear_buffer(net.correct.raw(), 0, None);
    match flip {
        Some(flip) => flip.encode(&mut encoder, net, weight_cast),
        None => {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            for k in weight_cast.into_iter().chain(net.eval_kernels()) {
                k.encode(&mut pass);
            }
        }
    }
    let loss = (net.loss.buffer().raw(), net.loss.byte_offset());
    encoder.copy_buffer_to_buffer(loss.0, loss.1, results.raw(), offset, 4);
    encoder.copy_buffer_to_buffer(net.correct.raw(), 0, results.raw(), offset + 4, 4);
    ctx.queue.submit([encoder.finish()]);
    Ok(())
}

/// Evaluation that waits for its read-backs (native).
#[cfg(not(target_arch = "wasm32"))]
mod blocking {
    use std::sync::Arc;
    use std::time::Instant;

    use super::{EvalTally, Evaluation, submit_eval_batch};
    use crate::data::{Batch, Dataset, SampleIndex};
    use crate::error::{Error, Result};
    use crate::gpu::{GpuBuffer, GpuContext, Kernel};
    use crate::train::batch::{BatchInput, BatchTargets, write_input};
    use crate::train::trainer::Trainer;

    /// The most batches whose results one read-back takes.
    const EVAL_CHUNK: usize = 256;
    /// GPU time the batches in flight may stand for: a signal stops an evaluation after
    /// what is queued, so the chunk of batches between read-backs is sized to about this
    /// much work from the time the last chunk took (a few batches on a CPU adapter, the
    /// whole 256 on a GPU).
    const CHUNK_SECONDS: f64 = 0.5;

    /// Per batch, its loss and correct count go into a slot of `results`; the slots are read
    /// back once per chunk of batches (at most [`EVAL_CHUNK`]; about [`CHUNK_SECONDS`] of GPU
    /// work). Each batch's mean is weighed
    /// by its loss rows (samples, or tokens for token data), so the loss and accuracy are per
    /// sample or per token.
    ///
    /// SIGINT or SIGTERM ([`crate::interrupt::requested`]) ends it between batches with
    /// [`Error::Interrupted`], after at most [`CHUNK_SECONDS`] or so of queued work.
    pub struct Tally<'c> {
        ctx: &'c GpuContext,
        results: Arc<GpuBuffer>,
        rows: Vec<usize>,
        tally: EvalTally,
        /// Batches per read-back now, and when the first of them was submitted.
        chunk: usize,
        chunk_start: Instant,
    }

    impl<'c> Tally<'c> {
        pub fn new(ctx: &'c GpuContext) -> Self {
            Self {
                ctx,
                results: ctx.alloc_storage("eval.results", 8 * EVAL_CHUNK as u64),
                rows: Vec::with_capacity(EVAL_CHUNK),
                tally: EvalTally::default(),
                chunk: 4,
                chunk_start: Instant::now(),
            }
        }

        pub fn add<'x>(
            &mut self,
            trainer: &mut Trainer,
            batch: usize,
            x: impl Into<BatchInput<'x>>,
            targets: &BatchTargets<'_>,
        ) -> Result<()> {
            if crate::interrupt::requested() {
                return Err(Error::Interrupted(
                    "interrupted during an evaluation".into(),
                ));
            }
            let slot = self.rows.len();
            if slot == 0 {
                self.chunk_start = Instant::now();
            }
            submit_eval_batch(self.ctx, trainer, batch, x, targets, &self.results, slot)?;
            self.rows.push(targets.rows(batch));
            if self.rows.len() >= self.chunk {
                let batches = self.rows.len();
                self.drain()?;
                let per_batch = self.chunk_start.elapsed().as_secs_f64() / batches as f64;
                self.chunk = ((CHUNK_SECONDS / per_batch.max(1e-9)) as usize).clamp(1, EVAL_CHUNK);
            }
            Ok(())
        }

        /// Add the batches of `set` whose sample indices `batches` lists, gathering one batch
        /// on the host at a time.
        pub fn add_indices<X: SampleIndex, I: AsRef<[X]>>(
            &mut self,
            trainer: &mut Trainer,
            set: &Dataset,
            batches: impl IntoIterator<Item = I>,
        ) -> Result<()> {
            let mut batch = Batch::empty(&set.y);
            for idx in batches {
                set.gather_indices_into(idx.as_ref(), &mut batch)?;
                self.add(trainer, batch.size, batch.input(), &batch.targets())?;
            }
            Ok(())
        }

        /// Read back the slots of the batches added since the last read.
        fn drain(&mut self) -> Result<()> {
            if self.rows.is_empty() {
                return Ok(());
            }
            let bytes = self
                .ctx
                .read_bytes(&self.results, 0, 8 * self.rows.len() as u64)?;
            self.tally.add(&self.rows, bytemuck::cast_slice(&bytes));
            self.rows.clear();
            Ok(())
        }

        pub fn finish(mut self) -> Result<EvalTally> {
            self.drain()?;
            self.ctx.check()?;
            Ok(self.tally)
        }
    }

    /// Mean loss and accuracy of `trainer`'s model over `batches` (forward only). Inputs are
    /// f32 features (`Vec<f32>`) or token ids (`Vec<u32>`); a data set's batches go through
    /// [`evaluate_indices`].
    pub fn evaluate<'a, X>(
        ctx: &GpuContext,
        trainer: &mut Trainer,
        batches: impl IntoIterator<Item = (usize, X, BatchTargets<'a>)>,
    ) -> Result<Evaluation>
    where
        for<'x> &'x X: Into<BatchInput<'x>>,
    {
        let mut tally = Tally::new(ctx);
        for (batch, x, targets) in batches {
            tally.add(trainer, batch, &x, &targets)?;
        }
        Ok(tally.finish()?.finish(trainer.config.loss))
    }

    /// Mean loss and accuracy of `set` over the batches `batches` (sample indices), forward
    /// only with dropout off. Streams: one gathered batch on the host at a time.
    pub fn evaluate_indices<X: SampleIndex, I: AsRef<[X]>>(
        ctx: &GpuContext,
        trainer: &mut Trainer,
        set: &Dataset,
        batches: impl IntoIterator<Item = I>,
    ) -> Result<Evaluation> {
        let mut tally = Tally::new(ctx);
        tally.add_indices(trainer, set, batches)?;
        Ok(tally.finish()?.finish(trainer.config.loss))
    }

    /// Run `trainer`'s model forward on `x` (batch samples: f32 features or token ids) and
    /// read its output back as f32 (tests and inference outside the step loop).
    pub fn predict<'x>(
        ctx: &GpuContext,
        trainer: &mut Trainer,
        batch: usize,
        x: impl Into<BatchInput<'x>>,
    ) -> Result<Vec<f32>> {
        let (net, weight_cast) = trainer.forward_parts(ctx, batch)?;
        write_input(ctx, net, x.into())?;
        net.set_dropout(ctx, 0, 0, false);
        let kernels: Vec<&Kernel> = weight_cast
            .into_iter()
            .chain(net.forward_kernels())
            .collect();
        ctx.run(&kernels);
        net.output.read_f32(ctx)
    }
}
