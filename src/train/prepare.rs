//! A model and the data it trains on, resolved together: the CLI's `train`, `compare` and
//! `bench`, and the app, all go through [`model_and_data`].
//!
//! Text sources are cut into windows of the model's block size, so for them the model comes
//! first; every other source is loaded first and the model adapts to its shapes.

use crate::data::hf::LlamaConfig;
use crate::data::{DataSource, Dataset, Split, TokenizedText};
use crate::nn::families;
use crate::nn::family::{Described, Family, FamilyModel};
use crate::nn::llama::LlamaModel;
use crate::nn::model::parse_json;
use crate::nn::{ModelSpec, preset};
use crate::{Error, Result};

/// Which model to train.
#[derive(Clone, Debug, PartialEq)]
pub enum ModelChoice {
    /// A preset's name ([`crate::nn::PRESETS`]).
    Preset(String),
    /// A JSON description (the text of a `.json` file; see [`ModelSpec::from_json`]).
    Json(String),
    /// A language model of a family trained on windows of `seq_len` tokens (`--seq-len`).
    Windowed {
        model: Box<ModelChoice>,
        seq_len: usize,
    },
}

impl ModelChoice {
    /// The model text and token data train when none is named: the default preset of the
    /// first family of language models (`gpt-tiny`).
    pub fn default_for_text() -> Self {
        let first = families::FAMILIES.iter().find(|f| f.takes_tokens());
        ModelChoice::Preset(first.map_or("gpt-tiny", |f| f.default_preset()).into())
    }

    /// A Hugging Face folder's model: its `config.json` as a Llama description (the CLI's
    /// `--model hf:DIR`, the app's picked folder).
    pub fn hf(config: LlamaConfig) -> Self {
        ModelChoice::Json(LlamaModel::new(config).description().to_string())
    }

    /// The model a data set trains when none is named: a GPT for token data, the MLP for
    /// class labels, the linear model for regression targets.
    pub fn default_for(data: &Dataset) -> Self {
        if data.is_tokens() {
            return Self::default_for_text();
        }
        let name = if data.y.is_classification() {
            "mlp"
        } else {
            "linear"
        };
        ModelChoice::Preset(name.into())
    }

    /// The family this model is of (a preset of it, or a `{"gpt": ...}` description), as
    /// far as can be told without building it (`None`: a Sequential, or an unreadable file).
    pub fn family(&self) -> Option<&'static dyn Family> {
        match self {
            ModelChoice::Preset(name) => families::of_preset(name),
            ModelChoice::Json(text) => parse_json(text).ok().and_then(|v| families::named_in(&v)),
            ModelChoice::Windowed { model, .. } => model.family(),
        }
    }

    /// Whether this is a language model (its family takes token ids): it trains on text.
    pub fn takes_tokens(&self) -> bool {
        self.family().is_some_and(|f| f.takes_tokens())
    }

    /// The family model when this is one of a family's, for data with `vocab` outputs, and
    /// the fields a JSON description left to the family's defaults (none for a preset).
    fn family_model(&self, vocab: usize) -> Result<Option<Described>> {
        match self {
            ModelChoice::Preset(name) => families::of_preset(name)
                .map(|f| f.preset(name, vocab).map(|m| (m, Vec::new())))
                .transpose(),
            ModelChoice::Json(text) => families::described_by(&parse_json(text)?),
            ModelChoice::Windowed { model, seq_len } => match model.family_model(vocab)? {
                Some((m, filled)) => Ok(Some((m.with_seq_len(*seq_len)?, filled))),
                None => Err(Error::model(format!(
                    "{}: --seq-len is for a language model of a family",
                    model.name()
                ))),
            },
        }
    }

    /// The model for data of `sample_shape` with `output_dim` outputs.
    fn build(&self, sample_shape: &[usize], output_dim: usize) -> Result<ModelSpec> {
        match self {
            ModelChoice::Preset(name) => preset(name, sample_shape, output_dim),
            ModelChoice::Windowed { model, .. } => {
                match (self.family_model(output_dim)?, sample_shape) {
                    (Some((m, _)), &[t]) => ModelSpec::of_family(m, model.name(), t),
                    _ => Err(Error::model(format!(
                        "{}: --seq-len is for a language model on token data",
                        model.name()
                    ))),
                }
            }
            ModelChoice::Json(text) => match (self.family_model(output_dim)?, sample_shape) {
                // A language model runs on the data's sequence length (at most its block).
                (Some((model, _)), &[t]) if model.tokens().is_some() => {
                    ModelSpec::of_family(model.clone(), model.family().name(), t)
                }
                _ => ModelSpec::from_json(text),
            },
        }
    }

    /// Name for messages.
    fn name(&self) -> &str {
        match self {
            ModelChoice::Preset(name) => name,
            ModelChoice::Json(_) => "json",
            ModelChoice::Windowed { model, .. } => model.name(),
        }
    }
}

/// A language model's vocabulary against the `vocab` ids of `data`: a text's must be its
/// vocabulary exactly (each id is a character of it); token data may leave ids unused
/// (`exact` false). The error says which fields a description left to the family's defaults
/// (a GPT's are GPT-2's: a vocabulary of 50304).
fn check_vocab((model, filled): &Described, vocab: usize, data: &str, exact: bool) -> Result<()> {
    let Some(tokens) = model.tokens() else {
        return Ok(());
    };
    let v = tokens.vocab_size;
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
        let description = model.description();
        let values = description
            .get(model.family().name())
            .cloned()
            .unwrap_or_default();
        let list: Vec<String> = filled
            .iter()
            .map(|f| format!("{f} {}", values.get(f).unwrap_or(&serde_json::Value::Null)))
            .collect();
        format!(
            "; the description gives no {}, so they took {}'s defaults ({})",
            filled.join(", "),
            model.family().config_name(),
            list.join(", ")
        )
    };
    Err(Error::model(format!(
        "{}: vocab_size {v} must match {needs}{defaults}",
        model.family().name()
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
        let choice = model.cloned().unwrap_or_else(ModelChoice::default_for_text);
        let found = choice.family_model(vocab)?;
        let Some(described) = found.filter(|(m, _)| m.tokens().is_some()) else {
            return Err(Error::model(format!(
                "{}: a text data set trains a language model (--model {}, or a JSON file of \
                 one: {{\"gpt\": ...}})",
                choice.name(),
                families::token_presets().join(", ")
            )));
        };
        check_vocab(&described, vocab, &corpus.name, true)?;
        let model = described.0;
        let block = model.tokens().map_or(0, |t| t.block_size);
        // The model first: a block_size of 0 is the description's problem, not the text's.
        let spec = ModelSpec::of_family(model, choice.name(), block)?;
        let split = corpus.split(block)?;
        spec.check_dataset(&split.train)?;
        return Ok((spec, split));
    }
    model_for_split(model, source.load(normalize)?)
}

/// A language model on a text a tokenizer of `tokenizer_vocab` ids encoded: `model` (or
/// the text default, a GPT), whose vocabulary is the tokenizer's where the model takes the
/// data's (`llama-tiny`, `gpt-tiny`) and its own otherwise (`smollm2-135m`, `hf:DIR`), on
/// windows of its training context (`--seq-len`). A model that takes no token ids (an MLP)
/// is an error, and so is an id at or above the model's vocab_size.
pub fn model_and_tokenized(
    model: Option<&ModelChoice>,
    text: &TokenizedText,
    tokenizer_vocab: usize,
) -> Result<(ModelSpec, Split)> {
    let choice = model.cloned().unwrap_or_else(ModelChoice::default_for_text);
    let found = choice.family_model(tokenizer_vocab)?;
    let Some((model, _)) = found.filter(|(m, _)| m.tokens().is_some()) else {
        return Err(Error::model(format!(
            "{}: --tokenizer encodes text into token ids, and this model has no vocabulary of \
             ids; give a language model (--model {}, hf:DIR, or a JSON file of one)",
            choice.name(),
            families::token_presets().join(", ")
        )));
    };
    let tokens = model.tokens().expect("a language model has tokens");
    let spec = ModelSpec::of_family(model, choice.name(), tokens.block_size)?;
    let split = text.split(tokens.block_size, tokens.vocab_size)?;
    spec.check_dataset(&split.train)?;
    Ok((spec, split))
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
    // A language model's description may have a larger vocabulary than the token ids the
    // file uses.
    if split.train.is_tokens()
        && let Some(described) = choice.family_model(split.train.output_dim())?
        && let Some(tokens) = described.0.tokens()
    {
        let used = split.train.output_dim();
        check_vocab(&described, used, &split.train.name, false)?;
        if tokens.vocab_size > used {
            split.train = split.train.with_num_classes(tokens.vocab_size)?;
        }
    }
    let train = &split.train;
    let spec = choice.build(&train.sample_shape, train.output_dim())?;
    spec.check_dataset(train)?;
    Ok((spec, split))
}
