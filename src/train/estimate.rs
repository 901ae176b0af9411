//! Loss estimates on random batches, as nanoGPT's `estimate_loss`: with dropout off
//! (`model.eval()`), the mean loss over `batches` batches of `batch_size` random samples
//! (text windows at random offsets) of the training split and of the validation split.
//!
//! The batches depend only on (run seed, optimizer step, split), so an estimate repeats bit
//! for bit and a resumed run reports what an uninterrupted one does. Estimates read nothing
//! the next step needs and write nothing it reads (forward only, into the step's activation
//! buffers), so training is unchanged by them.
//!
//! Token data sets use the same random batches for their epoch-end and final validation: the
//! whole validation split is far too big to evaluate often (the embedded text's has about
//! 17,000 windows).

use super::trainer::Trainer;
use crate::data::{Dataset, Rng};
#[cfg(not(target_arch = "wasm32"))]
use {
    super::evaluate::{EvalTally, Evaluation},
    crate::data::Batch,
    crate::error::Result,
    crate::gpu::{GpuBuffer, GpuContext},
};

/// Batches per split of an estimate by default. nanoGPT's `eval_iters` is 200 (at batch 64
/// and block 256 on a GPU); 20 batches keep an estimate of `gpt-tiny` a few seconds on a CPU
/// adapter while averaging 20·B·T tokens (40,960 at batch 32, block 64): enough to resolve
/// the 0.03 differences that matter here (see README, Training a GPT).
pub const EVAL_BATCHES: usize = 20;

/// Which split a random batch comes from (part of its seed).
const TRAIN_SPLIT: u64 = 0;
const VAL_SPLIT: u64 = 1;

/// Periodic loss estimates and the size of token data sets' validation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EvalConfig {
    /// Estimate the training and validation loss after every N-th optimizer step.
    pub every: Option<u64>,
    /// Random batches per split of an estimate, and of the epoch-end and final validation of
    /// token data sets.
    pub batches: usize,
}

impl Default for EvalConfig {
    fn default() -> Self {
        Self {
            every: None,
            batches: EVAL_BATCHES,
        }
    }
}

/// One estimate: mean loss over random batches of each split, after optimizer step `step`.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct EvalReport {
    pub step: u64,
    pub train_loss: f32,
    /// `None` when the data has no held-out split.
    pub val_loss: Option<f32>,
}

/// Sample indices of `batches` batches of `batch_size` samples drawn uniformly (with
/// replacement, like `torch.randint`) from `n`, determined by (seed, step, split).
pub fn random_batches(
    n: usize,
    batch_size: usize,
    batches: usize,
    seed: u64,
    step: u64,
    split: u64,
) -> Vec<Vec<usize>> {
    let mut rng = Rng::from_words(&[seed, step, split]);
    (0..batches)
        .map(|_| {
            (0..batch_size)
                .map(|_| rng.below(n as u64) as usize)
                .collect()
        })
        .collect()
}

/// The random validation batches of step `step` (what an estimate uses for its val loss).
pub fn validation_batches(
    set: &Dataset,
    batch_size: usize,
    batches: usize,
    seed: u64,
    step: u64,
) -> Vec<Vec<usize>> {
    random_batches(set.n, batch_size, batches, seed, step, VAL_SPLIT)
}

/// The random training batches of step `step`.
pub fn training_batches(
    set: &Dataset,
    batch_size: usize,
    batches: usize,
    seed: u64,
    step: u64,
) -> Vec<Vec<usize>> {
    random_batches(set.n, batch_size, batches, seed, step, TRAIN_SPLIT)
}

impl Trainer {
    /// Mean loss and accuracy of `set` over the batches `batches` (sample indices), forward
    /// only with dropout off. Streams: one gathered batch on the host at a time, results read
    /// back once per 256 batches. Each batch's mean is weighed by its loss rows (samples, or
    /// tokens for token data), so the loss and accuracy are per sample or per token.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn evaluate_indices(
        &mut self,
        ctx: &GpuContext,
        set: &Dataset,
        batches: &[Vec<usize>],
    ) -> Result<Evaluation> {
        const EVAL_CHUNK: usize = 256;
        let results = ctx.alloc_storage("eval.results", 8 * EVAL_CHUNK as u64);
        let mut tally = EvalTally::default();
        let mut rows: Vec<usize> = Vec::with_capacity(EVAL_CHUNK);
        let mut batch = Batch::empty(&set.y);
        for idx in batches {
            set.gather_into(idx, &mut batch)?;
            let targets = super::BatchTargets::from(&batch.y);
            self.submit_eval_batch(ctx, batch.size, &batch.x, &targets, &results, rows.len())?;
            rows.push(targets.rows(batch.size));
            if rows.len() == EVAL_CHUNK {
                drain(ctx, &results, &mut rows, &mut tally)?;
            }
        }
        drain(ctx, &results, &mut rows, &mut tally)?;
        ctx.check()?;
        Ok(tally.finish(self.config.loss))
    }
}

/// Read back the words of the batches in `rows` and add them to `tally`.
#[cfg(not(target_arch = "wasm32"))]
fn drain(
    ctx: &GpuContext,
    results: &GpuBuffer,
    rows: &mut Vec<usize>,
    tally: &mut EvalTally,
) -> Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let bytes = ctx.read_bytes(results, 0, 8 * rows.len() as u64)?;
    tally.add(rows, bytemuck::cast_slice(&bytes));
    rows.clear();
    Ok(())
}
