//! Batching, like a PyTorch `DataLoader` with `drop_last=False`.
//!
//! Epoch `e`'s order is a Fisher–Yates permutation drawn from a generator seeded by
//! `(seed, e)` when shuffling, else the file order. Batches take that order in chunks of
//! `batch_size`; the last, partial batch is kept. Only integer arithmetic on a fixed PRNG is
//! involved, so the order is the same on every run and every platform (not the same as
//! PyTorch's `RandomSampler`, which uses torch's RNG).

use super::{Labels, Rng};
use crate::{Error, Result};

/// Stream tag so shuffling never shares numbers with initialisation or synthetic data.
const STREAM: u64 = 0x5348_5546; // "SHUF"

/// Batch order over `n` samples.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loader {
    pub n: usize,
    pub batch_size: usize,
    pub shuffle: bool,
    pub seed: u64,
}

impl Loader {
    pub fn new(n: usize, batch_size: usize, shuffle: bool, seed: u64) -> Result<Loader> {
        if n == 0 {
            return Err(Error::data("cannot batch an empty data set"));
        }
        if batch_size == 0 {
            return Err(Error::InvalidArgument(
                "batch size must be at least 1".into(),
            ));
        }
        Ok(Loader {
            n,
            batch_size,
            shuffle,
            seed,
        })
    }

    /// Batches per epoch: `ceil(n / batch_size)`.
    pub fn num_batches(&self) -> usize {
        self.n.div_ceil(self.batch_size)
    }

    /// The order in which epoch `epoch` visits the samples.
    pub fn order(&self, epoch: u64) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.n).collect();
        if self.shuffle {
            Rng::from_words(&[self.seed, epoch, STREAM]).shuffle(&mut order);
        }
        order
    }

    /// Sample indices of each batch of epoch `epoch`; the last batch may be smaller.
    pub fn batches(&self, epoch: u64) -> Vec<Vec<usize>> {
        self.order(epoch)
            .chunks(self.batch_size)
            .map(<[usize]>::to_vec)
            .collect()
    }
}

/// Inputs of one batch, laid out contiguously.
#[derive(Clone, Debug, PartialEq)]
pub enum BatchInputs {
    /// `size × sample_len` f32 values, row-major.
    Features(Vec<f32>),
    /// `size × T` token ids, row-major.
    Tokens(Vec<u32>),
}

impl BatchInputs {
    /// Takes the f32 buffer out, emptied, to refill (its allocation is reused when the batch
    /// held features); leaves an empty batch behind.
    pub(crate) fn take_features(&mut self) -> Vec<f32> {
        match std::mem::replace(self, BatchInputs::Features(Vec::new())) {
            BatchInputs::Features(mut x) => {
                x.clear();
                x
            }
            BatchInputs::Tokens(_) => Vec::new(),
        }
    }

    /// Takes the token buffer out, emptied, to refill (see [`BatchInputs::take_features`]).
    pub(crate) fn take_tokens(&mut self) -> Vec<u32> {
        match std::mem::replace(self, BatchInputs::Tokens(Vec::new())) {
            BatchInputs::Tokens(mut x) => {
                x.clear();
                x
            }
            BatchInputs::Features(_) => Vec::new(),
        }
    }

    /// Number of values (f32 features or token ids).
    pub fn len(&self) -> usize {
        match self {
            BatchInputs::Features(x) => x.len(),
            BatchInputs::Tokens(x) => x.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Labels of one batch, laid out contiguously.
#[derive(Clone, Debug, PartialEq)]
pub enum BatchLabels {
    /// One class index per sample; for token samples one per token (`size × T`, row-major).
    Classes(Vec<u32>),
    /// `size × dim` targets, row-major.
    Targets(Vec<f32>),
}

/// One batch gathered from a [`super::Dataset`]: `size × sample_len` inputs, row-major.
#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    pub x: BatchInputs,
    pub y: BatchLabels,
    /// Samples in the batch.
    pub size: usize,
}

impl Batch {
    /// An empty batch with the right label kind for `labels`, to reuse with `gather_into`.
    pub fn empty(labels: &Labels) -> Batch {
        Batch {
            x: match labels {
                Labels::Tokens { .. } => BatchInputs::Tokens(Vec::new()),
                Labels::Classes { .. } | Labels::Targets { .. } => {
                    BatchInputs::Features(Vec::new())
                }
            },
            y: match labels {
                Labels::Classes { .. } | Labels::Tokens { .. } => BatchLabels::Classes(Vec::new()),
                Labels::Targets { .. } => BatchLabels::Targets(Vec::new()),
            },
            size: 0,
        }
    }
}
