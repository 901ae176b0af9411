//! Token data sets: samples of `T` token ids (u32), each id with one target class (the
//! next token), for language models.
//!
//! Two kinds, one type ([`TokenSamples`]: samples as views into one shared id array, nothing
//! copied per sample):
//! - a **stream** cut into windows ([`TokenSamples::windows`]): sample `i` is
//!   `ids[i .. i + T]` with targets `ids[i + 1 .. i + T + 1]`, so a stream of `len` ids has
//!   `len - T` samples (character-level text, [`super::text`]);
//! - **pre-cut sequences** ([`TokenSamples::rows`]): a safetensors file with integer `x`
//!   `[N, T]` (inputs) and `y` `[N, T]` (targets) in any integer dtype PyTorch writes (I64,
//!   I32, I16, I8, U8, U16, U32, U64), range-checked into u32 ([`from_views`]). The class
//!   count is the largest id in `x` and `y` plus one. Written from PyTorch with
//!   `safetensors.torch.save_file({"x": x, "y": y}, "tokens.safetensors")`; under
//!   `--no-shuffle` the rows train in file order, batch after batch as a PyTorch
//!   `DataLoader(TensorDataset(x, y), batch_size=B)` yields them.
//!
//! A batch of `B` samples carries `B·T` input ids and `B·T` class labels (row-major:
//! sample by sample, position by position); a model for it outputs `[T, V]` per sample and
//! the loss averages over the `B·T` rows.

use std::ops::Range;
use std::sync::Arc;

use super::loader::SampleIndex;
use crate::{Error, Result};

/// Samples of `block_size` token ids, each a slice of one shared id array: sample `i` is
/// `ids[start + i·stride .. start + i·stride + block_size]`.
#[derive(Clone)]
pub struct TokenSamples {
    ids: Arc<[u32]>,
    start: usize,
    /// 1 for windows over a stream, `block_size` for pre-cut rows.
    stride: usize,
    count: usize,
    block_size: usize,
}

impl TokenSamples {
    /// Inputs and targets of the windows over the stream `ids[range]`: input sample `i` is
    /// `ids[range.start + i ..][..T]`, its targets the same window shifted by one. There are
    /// `range.len() - T` samples; the range must hold at least `T + 1` ids.
    pub fn windows(
        ids: Arc<[u32]>,
        range: Range<usize>,
        block_size: usize,
    ) -> Result<(TokenSamples, TokenSamples)> {
        if block_size == 0 {
            return Err(Error::data("the block size must be at least 1"));
        }
        if range.start > range.end || range.end > ids.len() {
            return Err(Error::data(format!(
                "token range {range:?} is outside the {} ids of the stream",
                ids.len()
            )));
        }
        if range.len() <= block_size {
            return Err(Error::data(format!(
                "a stream of {} tokens has no window of block_size + 1 = {} tokens",
                range.len(),
                block_size + 1
            )));
        }
        let count = range.len() - block_size;
        let inputs = TokenSamples {
            ids: ids.clone(),
            start: range.start,
            stride: 1,
            count,
            block_size,
        };
        let targets = TokenSamples {
            start: range.start + 1,
            ..inputs.clone()
        };
        Ok((inputs, targets))
    }

    /// Pre-cut rows: `x` and `y` hold `N × T` ids each, row-major.
    pub fn rows(
        x: Vec<u32>,
        y: Vec<u32>,
        block_size: usize,
    ) -> Result<(TokenSamples, TokenSamples)> {
        if block_size == 0 {
            return Err(Error::data("the sequence length T must be at least 1"));
        }
        if x.len() != y.len() || !x.len().is_multiple_of(block_size) {
            return Err(Error::data(format!(
                "{} input and {} target ids do not make rows of {block_size}",
                x.len(),
                y.len()
            )));
        }
        let count = x.len() / block_size;
        let make = |ids: Vec<u32>| TokenSamples {
            ids: ids.into(),
            start: 0,
            stride: block_size,
            count,
            block_size,
        };
        Ok((make(x), make(y)))
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Ids per sample (`T`).
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// The ids of sample `i`, or `None` past the end.
    pub fn sample(&self, i: usize) -> Option<&[u32]> {
        (i < self.count).then(|| {
            let at = self.start + i * self.stride;
            &self.ids[at..at + self.block_size]
        })
    }

    /// Samples `range` (zero-copy).
    pub fn slice(&self, range: Range<usize>) -> Result<TokenSamples> {
        if range.start > range.end || range.end > self.count {
            return Err(Error::data(format!(
                "sample range {range:?} is outside 0..{}",
                self.count
            )));
        }
        Ok(TokenSamples {
            start: self.start + range.start * self.stride,
            count: range.len(),
            ..self.clone()
        })
    }

    /// Every id some sample uses, in array order.
    pub fn covered(&self) -> &[u32] {
        if self.count == 0 {
            return &[];
        }
        let end = self.start + (self.count - 1) * self.stride + self.block_size;
        &self.ids[self.start..end]
    }

    /// The largest id any sample uses.
    pub fn max_id(&self) -> Option<u32> {
        self.covered().iter().copied().max()
    }

    /// The first id (in array order) that is not below `bound`, described for a message
    /// ("token 70 of sample 3 at position 5"), if any.
    pub fn first_at_or_above(&self, bound: usize) -> Option<String> {
        let at = self.covered().iter().position(|&t| t as usize >= bound)?;
        let id = self.covered()[at];
        // The first sample that holds this position.
        let sample = if self.stride == 1 {
            at.saturating_sub(self.block_size - 1)
        } else {
            at / self.stride
        };
        let pos = at - sample * self.stride;
        Some(format!("token {id} of sample {sample} at position {pos}"))
    }

    /// Appends the ids of `indices`' samples, in order, to `out`. Indices must be in range.
    pub(crate) fn gather_into<I: SampleIndex>(&self, indices: &[I], out: &mut Vec<u32>) {
        out.reserve(indices.len() * self.block_size);
        for &i in indices {
            let at = self.start + i.index() * self.stride;
            out.extend_from_slice(&self.ids[at..at + self.block_size]);
        }
    }
}

impl PartialEq for TokenSamples {
    /// Same samples (same count, length and ids), however they are stored.
    fn eq(&self, other: &Self) -> bool {
        if self.count != other.count || self.block_size != other.block_size {
            return false;
        }
        if self.stride == other.stride {
            return self.covered() == other.covered();
        }
        (0..self.count).all(|i| self.sample(i) == other.sample(i))
    }
}

impl std::fmt::Debug for TokenSamples {
    /// A summary (a stream may hold millions of ids): kind, count, block size, the first ids.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let head = &self.covered()[..self.covered().len().min(8)];
        f.debug_struct("TokenSamples")
            .field("samples", &self.count)
            .field("block_size", &self.block_size)
            .field("stride", &self.stride)
            .field("first_ids", &head)
            .finish()
    }
}

/// Checks a token data set's inputs against its targets and class count (for
/// [`Dataset::validate`]).
pub(crate) fn validate(
    who: &str,
    n: usize,
    sample_shape: &[usize],
    inputs: &TokenSamples,
    targets: &TokenSamples,
    num_classes: usize,
) -> Result<()> {
    let t = inputs.block_size();
    if sample_shape != [t] {
        return Err(Error::data(format!(
            "{who}: token samples of {t} ids need sample shape [{t}], not {sample_shape:?}"
        )));
    }
    if inputs.len() != n || targets.len() != n || targets.block_size() != t {
        return Err(Error::data(format!(
            "{who}: {} input samples of {t} ids and {} target samples of {} ids for {n} samples",
            inputs.len(),
            targets.len(),
            targets.block_size()
        )));
    }
    if n == 0 {
        return Err(Error::data(format!("{who}: no samples")));
    }
    for (what, set) in [("input", inputs), ("target", targets)] {
        if let Some(bad) = set.first_at_or_above(num_classes) {
            return Err(Error::data(format!(
                "{who}: {what} {bad} is not below the class count {num_classes}"
            )));
        }
    }
    Ok(())
}
