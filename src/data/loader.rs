//! Batching, like a PyTorch `DataLoader` with `drop_last=False`.
//!
//! Epoch `e`'s order is a Fisher–Yates permutation drawn from a generator seeded by
//! `(seed, e)` when shuffling, else the file order. Batches take that order in chunks of
//! `batch_size`; the last, partial batch is kept. Only integer arithmetic on a fixed PRNG is
//! involved, so the order is the same on every run and every platform (not the same as
//! PyTorch's `RandomSampler`, which uses torch's RNG).

use super::Rng;
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
        if u32::try_from(n).is_err() {
            return Err(Error::data(format!(
                "cannot batch {n} samples: at most 2^32 - 1 (sample indices are 32-bit)"
            )));
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

    /// The order in which epoch `epoch` visits the samples (32-bit indices: 4 bytes per
    /// sample, the host memory an epoch of a 200-million-character text costs).
    pub fn order(&self, epoch: u64) -> Vec<u32> {
        let mut order: Vec<u32> = (0..self.n as u32).collect();
        if self.shuffle {
            Rng::from_words(&[self.seed, epoch, STREAM]).shuffle(&mut order);
        }
        order
    }

    /// Sample indices of each batch of epoch `epoch`; the last batch may be smaller.
    pub fn batches(&self, epoch: u64) -> EpochBatches {
        EpochBatches::new(self.order(epoch), self.batch_size)
    }
}

/// The batches of one epoch: its order cut into `batch_size` runs (the last may be shorter),
/// held as one flat list of indices; `batches[b]` is batch `b`'s sample indices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EpochBatches {
    order: Vec<u32>,
    batch_size: usize,
}

impl EpochBatches {
    /// `order` in runs of `batch_size` (at least 1).
    pub fn new(order: Vec<u32>, batch_size: usize) -> Self {
        Self {
            order,
            batch_size: batch_size.max(1),
        }
    }

    /// Number of batches.
    pub fn len(&self) -> usize {
        self.order.len().div_ceil(self.batch_size)
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The batches in order.
    pub fn iter(&self) -> std::slice::Chunks<'_, u32> {
        self.order.chunks(self.batch_size)
    }
}

impl std::ops::Index<usize> for EpochBatches {
    type Output = [u32];

    fn index(&self, b: usize) -> &[u32] {
        let start = b * self.batch_size;
        &self.order[start..(start + self.batch_size).min(self.order.len())]
    }
}

impl<'a> IntoIterator for &'a EpochBatches {
    type Item = &'a [u32];
    type IntoIter = std::slice::Chunks<'a, u32>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// A sample's index in a data set: the loader's 32-bit indices, or a `usize`.
pub trait SampleIndex: Copy + std::fmt::Display {
    fn index(self) -> usize;
}

impl SampleIndex for u32 {
    fn index(self) -> usize {
        self as usize
    }
}

impl SampleIndex for usize {
    fn index(self) -> usize {
        self
    }
}
