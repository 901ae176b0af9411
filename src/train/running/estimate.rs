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

use crate::data::{Dataset, Rng};
#[cfg(not(target_arch = "wasm32"))]
use {
    crate::data::Split, crate::error::Result, crate::gpu::GpuContext,
    crate::train::evaluate::evaluate_indices, crate::train::trainer::Trainer,
};

/// Which split a random batch comes from (part of its seed).
const TRAIN_SPLIT: u64 = 0;
const VAL_SPLIT: u64 = 1;

/// One estimate: mean loss over random batches of each split, after optimizer step `step`.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct EvalReport {
    pub step: u64,
    pub train_loss: f32,
    /// `None` when the data has no held-out split.
    pub val_loss: Option<f32>,
}

/// Sample indices of `batches` batches of `batch_size` samples drawn uniformly (with
/// replacement, like `torch.randint`) from `n`, determined by (seed, step, split), one batch
/// at a time: an estimate holds one batch of indices, never all of them.
pub fn random_batches(
    n: usize,
    batch_size: usize,
    batches: usize,
    seed: u64,
    step: u64,
    split: u64,
) -> impl Iterator<Item = Vec<usize>> {
    let mut rng = Rng::from_words(&[seed, step, split]);
    (0..batches).map(move |_| {
        (0..batch_size)
            .map(|_| rng.below(n as u64) as usize)
            .collect()
    })
}

/// What an estimate draws: `batches` random batches of `batch_size` samples per split,
/// determined by the run's `seed` and the optimizer `step` it follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Draw {
    pub batch_size: usize,
    pub batches: usize,
    pub seed: u64,
    pub step: u64,
}

impl Draw {
    /// The random validation batches (what an estimate uses for its val loss).
    pub fn validation_batches(self, set: &Dataset) -> impl Iterator<Item = Vec<usize>> {
        self.batches_of(set, VAL_SPLIT)
    }

    /// The random training batches.
    pub fn training_batches(self, set: &Dataset) -> impl Iterator<Item = Vec<usize>> {
        self.batches_of(set, TRAIN_SPLIT)
    }

    fn batches_of(self, set: &Dataset, split: u64) -> impl Iterator<Item = Vec<usize>> {
        random_batches(
            set.n,
            self.batch_size,
            self.batches,
            self.seed,
            self.step,
            split,
        )
    }
}

/// nanoGPT's `estimate_loss` on `trainer`'s current weights: the mean loss over `draw`'s
/// random batches of the training set and of the held-out set (when there is one), dropout
/// off (native: it reads back).
#[cfg(not(target_arch = "wasm32"))]
pub fn estimate_loss(
    ctx: &GpuContext,
    trainer: &mut Trainer,
    split: &Split,
    draw: Draw,
) -> Result<EvalReport> {
    let train = draw.training_batches(&split.train);
    let train_loss = evaluate_indices(ctx, trainer, &split.train, train)?.loss;
    let val_loss = match split.eval_set() {
        Some(set) => Some(evaluate_indices(ctx, trainer, set, draw.validation_batches(set))?.loss),
        None => None,
    };
    Ok(EvalReport {
        step: draw.step,
        train_loss,
        val_loss,
    })
}
