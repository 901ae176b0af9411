//! A model and the data it trains on, resolved together: the CLI's `train`, `compare` and
//! `bench`, and the app, all go through [`model_and_data`].
//!
//! Text sources are cut into windows of the model's block size, so for them the model comes
//! first; every other source is loaded first and the model adapts to its shapes.

use crate::data::{DataSource, Dataset, Split};
use crate::nn::gpt::{GPT_PRESETS, GptConfig, gpt_preset};
use crate::nn::model::{gpt_from_json, parse_json};
use crate::nn::{ModelSpec, preset};
use crate::{Error, Result};

/// Which model to train.
#[derive(Clone, Debug, PartialEq)]
pub enum ModelChoice {
    /// A preset's name ([`crate::nn::PRESETS`]).
    Preset(String),
    /// A JSON description (the text of a `.json` file; see [`ModelSpec::from_json`]).
    Json(String),
}

impl ModelChoice {
    /// The model a data set trains when none is named: a GPT for token data, the MLP for
    /// class labels, the linear model for regression targets.
    pub fn default_for(data: &Dataset) -> Self {
        let name = if data.is_tokens() {
            "gpt-tiny"
        } else if data.y.is_classification() {
            "mlp"
        } else {
            "linear"
        };
        ModelChoice::Preset(name.into())
    }

    /// Whether this is a GPT (a preset `gpt-*` or a `{"gpt": ...}` description).
    pub fn is_gpt(&self) -> bool {
        match self {
            ModelChoice::Preset(name) => GPT_PRESETS.contains(&name.as_str()),
            ModelChoice::Json(text) => matches!(gpt_json(text), Ok(Some(_))),
        }
    }

    /// The GPT configuration when this is a GPT, and the fields a JSON description left to
    /// nanoGPT's defaults (none for a preset).
    fn gpt(&self, vocab: usize) -> Result<Option<FilledGpt>> {
        match self {
            ModelChoice::Preset(name) if GPT_PRESETS.contains(&name.as_str()) => {
                Ok(Some((gpt_preset(name, vocab)?, Vec::new())))
            }
            ModelChoice::Preset(_) => Ok(None),
            ModelChoice::Json(text) => gpt_json(text),
        }
    }

    /// The model for data of `sample_shape` with `output_dim` outputs.
    fn build(&self, sample_shape: &[usize], output_dim: usize) -> Result<ModelSpec> {
        match self {
            ModelChoice::Preset(name) => preset(name, sample_shape, output_dim),
            ModelChoice::Json(text) => match (gpt_json(text)?, sample_shape) {
                // A GPT runs on the data's sequence length (at most its block size).
                (Some((config, _)), &[t]) => config.model_for("gpt", t),
                _ => ModelSpec::from_json(text),
            },
        }
    }

    /// Name for messages.
    fn name(&self) -> &str {
        match self {
            ModelChoice::Preset(name) => name,
            ModelChoice::Json(_) => "json",
        }
    }
}

/// A GPT configuration and the fields its description left to nanoGPT's defaults.
type FilledGpt = (GptConfig, Vec<&'static str>);

/// The `{"gpt": {...}}` configuration of a JSON description (`None`: another model).
fn gpt_json(text: &str) -> Result<Option<FilledGpt>> {
    gpt_from_json(&parse_json(text)?)
}

/// A GPT's vocabulary against the `vocab` ids of `data`: a text's must be its vocabulary
/// exactly (each id is a character of it); token data may leave ids unused (`exact` false).
/// The error says which fields a description left to nanoGPT's defaults, since those are
/// GPT-2's (a vocabulary of 50304).
fn check_vocab((config, filled): &FilledGpt, vocab: usize, data: &str, exact: bool) -> Result<()> {
    let v = config.vocab_size;
    if v == vocab || (!exact && v > vocab) {
        return Ok(());
    }
    let needs = if exact {
        format!("the {vocab} characters of {data}'s vocabulary (give \"vocab_size\": {vocab})")
    } else {
        format!("at least the {vocab} token ids {data} uses")
    };
    let defaults = if filled.is_empty() {
        String::new()
    } else {
        let values = serde_json::to_value(config).unwrap_or_default();
        let list: Vec<String> = filled
            .iter()
            .map(|f| format!("{f} {}", values.get(f).unwrap_or(&serde_json::Value::Null)))
            .collect();
        format!(
            "; the description gives no {}, so they took GPTConfig's defaults ({})",
            filled.join(", "),
            list.join(", ")
        )
    };
    Err(Error::model(format!(
        "gpt: vocab_size {v} must match {needs}{defaults}"
    )))
}

/// The model and its data: `model` (or the data's default model) on `source`, with the
/// data's shapes checked against the model (text cut into the model's block size).
/// `normalize` applies the usual mean/std transform to MNIST and Fashion-MNIST.
pub fn model_and_data(
    model: Option<&ModelChoice>,
    source: &DataSource,
    normalize: bool,
) -> Result<(ModelSpec, Split)> {
    if let Some(corpus) = source.load_text()? {
        let vocab = corpus.vocab().len();
        let choice = model
            .cloned()
            .unwrap_or_else(|| ModelChoice::Preset("gpt-tiny".into()));
        let Some(gpt) = choice.gpt(vocab)? else {
            return Err(Error::model(format!(
                "{}: a text data set trains a GPT (--model {} or a {{\"gpt\": ...}} JSON file)",
                choice.name(),
                GPT_PRESETS.join(", ")
            )));
        };
        check_vocab(&gpt, vocab, &corpus.name, true)?;
        let config = gpt.0;
        // The model first: a block_size of 0 is the description's problem, not the text's.
        let spec = config.model_for(choice.name(), config.block_size)?;
        let split = corpus.split(config.block_size)?;
        spec.check_dataset(&split.train)?;
        return Ok((spec, split));
    }
    model_for_split(model, source.load(normalize)?)
}

/// The model for a split already loaded from a source that is not text: `model`, or the
/// data's default model, checked against the data's shapes (a GPT on token data may widen
/// the class count to its vocabulary).
pub fn model_for_split(
    model: Option<&ModelChoice>,
    mut split: Split,
) -> Result<(ModelSpec, Split)> {
    let choice = model
        .cloned()
        .unwrap_or_else(|| ModelChoice::default_for(&split.train));
    // A GPT description may have a larger vocabulary than the token ids the file uses.
    if split.train.is_tokens()
        && let Some(gpt) = choice.gpt(split.train.output_dim())?
    {
        let used = split.train.output_dim();
        check_vocab(&gpt, used, &split.train.name, false)?;
        if gpt.0.vocab_size > used {
            split.train = split.train.with_num_classes(gpt.0.vocab_size)?;
        }
    }
    let train = &split.train;
    let spec = choice.build(&train.sample_shape, train.output_dim())?;
    spec.check_dataset(train)?;
    Ok((spec, split))
}
