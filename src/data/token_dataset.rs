//! Token data sets: [`Dataset::from_tokens`] and a token file's `x` and `y` ([`from_views`]),
//! apart from `tokens.rs` (the samples), which the data set's own types name.

use std::sync::Arc;

use safetensors::tensor::TensorView;

use super::integers::{is_integer, to_u32};
use super::tokens::TokenSamples;
use super::vocab::Vocab;
use super::{Dataset, Inputs, Labels};
use crate::{Error, Result};

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
