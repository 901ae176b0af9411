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

use safetensors::tensor::TensorView;

use super::integers::{is_integer, to_u32};
use super::loader::SampleIndex;
use super::vocab::Vocab;
use super::{Dataset, Inputs, Labels};
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

impl Dataset {
    /// A token data set: `inputs` and `targets` (same count and block size), class ids below
    /// `num_classes`, and the vocabulary that decodes them when there is one (text).
    /// `sample_shape` is `[T]`; a batch of `B` samples has `B·T` ids and `B·T` labels.
    pub fn from_tokens(
        name: impl Into<String>,
        inputs: TokenSamples,
        targets: TokenSamples,
        num_classes: usize,
        vocab: Option<Arc<Vocab>>,
    ) -> Result<Dataset> {
        let n = inputs.len();
        let dataset = Dataset {
            name: name.into(),
            sample_shape: vec![inputs.block_size()],
            x: Inputs::Tokens { ids: inputs, vocab },
            y: Labels::Tokens {
                targets,
                num_classes,
            },
            n,
        };
        dataset.validate()?;
        Ok(dataset)
    }

    /// Whether the samples are token ids (a language-model data set).
    pub fn is_tokens(&self) -> bool {
        matches!(self.x, Inputs::Tokens { .. })
    }

    /// The vocabulary that decodes the token ids (text data sets).
    pub fn vocab(&self) -> Option<&Arc<Vocab>> {
        match &self.x {
            Inputs::Tokens { vocab, .. } => vocab.as_ref(),
            Inputs::Features(_) => None,
        }
    }

    /// The same token ids without the text's vocabulary: ids of a model's own vocabulary
    /// (`bench step` times SmolLM2 on the embedded text's character ids).
    pub fn without_vocab(mut self) -> Dataset {
        if let Inputs::Tokens { vocab, .. } = &mut self.x {
            *vocab = None;
        }
        self
    }

    /// The same data with a class count of `num_classes` (e.g. a model's vocabulary that is
    /// larger than the largest id + 1 a token file implies). It cannot drop a class the data
    /// uses, nor exceed a text's vocabulary.
    pub fn with_num_classes(mut self, num_classes: usize) -> Result<Dataset> {
        let used = self.output_dim();
        if num_classes < used {
            return Err(Error::data(format!(
                "{}: cannot use {num_classes} classes: the data uses {used}",
                self.name
            )));
        }
        if let Some(v) = self.vocab()
            && v.len() != num_classes
        {
            return Err(Error::data(format!(
                "{}: the vocabulary has {} characters, not {num_classes}",
                self.name,
                v.len()
            )));
        }
        match &mut self.y {
            Labels::Classes { num_classes: n, .. } | Labels::Tokens { num_classes: n, .. } => {
                *n = num_classes
            }
            Labels::Targets { .. } => {
                return Err(Error::data(format!(
                    "{}: regression targets have no class count",
                    self.name
                )));
            }
        }
        self.validate()?;
        Ok(self)
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

/// A token file's `x` and `y` (both integer `[N, T]`, already found in the file) as a data
/// set named `name`. Errors name the tensor and the first bad element (`x[3, 7] = -1`).
pub fn from_views(name: &str, x: &TensorView<'_>, y: &TensorView<'_>) -> Result<Dataset> {
    let err = |msg: String| Error::data(format!("{name}: {msg}"));
    let shape = x.shape();
    let &[rows, t] = shape else {
        return Err(err(format!(
            "integer `x` has shape {shape:?}: token inputs are [N, T] (for f32 inputs save \
             `x.float()`)"
        )));
    };
    if y.shape() != shape {
        return Err(err(format!(
            "integer `x` {shape:?} holds tokens, so `y` must hold their targets with the same \
             shape, but it has dtype {:?} and shape {:?}",
            y.dtype(),
            y.shape()
        )));
    }
    if !is_integer(y.dtype()) {
        return Err(err(format!(
            "`y` has dtype {:?}: token targets must be integers (I64, I32, I16, I8, U8, U16, \
             U32, U64)",
            y.dtype()
        )));
    }
    if rows == 0 || t == 0 {
        return Err(err(format!(
            "`x` has shape {shape:?}: no tokens (N and T must be at least 1)"
        )));
    }
    let xs = integers_to_u32(x, "x", t).map_err(err)?;
    let ys = integers_to_u32(y, "y", t).map_err(err)?;
    let num_classes = xs
        .iter()
        .chain(&ys)
        .copied()
        .max()
        .map_or(0, |m| m as usize + 1);
    let (inputs, targets) = TokenSamples::rows(xs, ys, t)?;
    Dataset::from_tokens(name, inputs, targets, num_classes, None)
}

/// Integers of any width and signedness to u32, naming the first negative or too-large
/// element as `tensor[row, col]`.
fn integers_to_u32(
    view: &TensorView<'_>,
    tensor: &str,
    cols: usize,
) -> std::result::Result<Vec<u32>, String> {
    let name = |i: usize| format!("{tensor}[{}, {}]", i / cols, i % cols);
    to_u32(
        view,
        tensor,
        |i, v| format!("{} = {v} is negative: token ids start at 0", name(i)),
        |i, v| format!("{} = {v} does not fit in u32 (token ids are u32)", name(i)),
    )
}
