//! What the app trains, resolved the way the CLI resolves it ([`model_and_data`]): a preset
//! on the data set the setup panel names, text cut into the model's block size for a GPT.
//! The result is cached by (model, data set) so the precision map and restarts reuse it. A
//! Hugging Face folder the user picked ([`super::folder`]) is `hf:NAME`, on the text encoded
//! by its tokenizer.

use std::sync::Arc;

use super::config::SessionConfig;
use super::folder::{PickedFolder, is_folder_model};
use crate::data::{DataSource, Split, TokenizedText, Tokenizer};
use crate::error::{Error, Result};
use crate::gpu::GpuContext;
use crate::nn::{LossKind, ModelSpec};
use crate::train::{ModelChoice, model_and_data, model_and_tokenized, planning};

/// The models the setup panel offers: the presets of features and the GPTs
/// ([`crate::nn::PRESETS`]), then the family presets small enough for the app's data and a
/// browser: the BatchNorm ResNets on 1×28×28 images (each takes the chosen images' channels
/// and size) and the Llama family's `llama-tiny` on the embedded text.
pub const MODELS: [&str; 9] = [
    "linear",
    "mlp",
    "simple-cnn",
    "mnist-cnn",
    "resnet-tiny",
    "resnet8-fashion",
    "gpt-tiny",
    "gpt-char",
    "llama-tiny",
];

/// What a model trains on: text (a language model), images (the CNN presets, and a family's
/// model of features: a ResNet takes `[C, H, H]`), or any features (the linear model and
/// the MLP flatten whatever they get).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Takes {
    Text,
    Images,
    Features,
}

/// The presets of [`crate::nn::PRESETS`] that convolve their input (`[C, H, W]` images).
const CNN_PRESETS: [&str; 2] = ["simple-cnn", "mnist-cnn"];

fn takes(model: &str) -> Takes {
    if is_folder_model(model) {
        return Takes::Text;
    }
    match ModelChoice::Preset(model.into()).family() {
        Some(family) if family.takes_tokens() => Takes::Text,
        Some(_) => Takes::Images,
        None if CNN_PRESETS.contains(&model) => Takes::Images,
        None => Takes::Features,
    }
}

/// Whether the data set `dataset` suits what a model takes (an unparsable name suits
/// nothing, so the pairing falls back to a data set that works).
fn suits(takes: Takes, dataset: &str) -> bool {
    let Ok(source) = dataset.parse::<DataSource>() else {
        return false;
    };
    match takes {
        Takes::Text => source.is_text(),
        Takes::Images => matches!(
            source,
            DataSource::EmbeddedMnist
                | DataSource::Mnist
                | DataSource::FashionMnist
                | DataSource::Cifar10(_)
        ),
        Takes::Features => !source.is_text(),
    }
}

/// The data set a model trains on when the one selected does not suit it: the embedded text
/// for a language model (a GPT, a Llama), the embedded MNIST subset otherwise.
pub fn dataset_for(model: &str, dataset: &str) -> String {
    let takes = takes(model);
    match takes {
        _ if suits(takes, dataset) => dataset.into(),
        Takes::Text => DataSource::EMBEDDED_TEXT.into(),
        Takes::Images | Takes::Features => "default".into(),
    }
}

/// The model for a data set the setup panel just selected, when the one selected does not
/// suit it: `gpt-tiny` for text, `mlp` for the rest.
pub fn model_for(dataset: &str, model: &str) -> String {
    if suits(takes(model), dataset) {
        return model.into();
    }
    let text = dataset
        .parse::<DataSource>()
        .is_ok_and(|source| source.is_text());
    match (text, ModelChoice::default_for_text()) {
        (true, ModelChoice::Preset(name)) => name,
        _ => "mlp".into(),
    }
}

/// Fail when `spec`'s flat parameter buffers under any of `config`'s modes pass the
/// adapter's limits (a browser's 256 MiB per buffer: SmolLM2-135M's are 538 MB), naming the
/// buffers and the limit, before anything of it is made (each run checks again when built).
pub fn check_params_fit(
    ctx: &GpuContext,
    config: &SessionConfig,
    spec: &ModelSpec,
    loss: LossKind,
) -> Result<()> {
    for &precision in &config.modes {
        let optimizer = config.run_config(precision, loss).step.optimizer;
        planning::check_params_fit(ctx, spec, &spec.name, precision, &optimizer)?;
    }
    Ok(())
}

/// A model, its data and, for a picked folder, the tokenizer its text went through.
#[derive(Clone)]
pub struct Resolved {
    pub spec: ModelSpec,
    pub split: Arc<Split>,
    /// The picked folder's (`hf:NAME`): its samples decode through it.
    pub tokenizer: Option<Arc<Tokenizer>>,
}

/// A model and its data, cached by (model, data set), and the folder the user picked.
#[derive(Default)]
pub struct ModelCache {
    cached: Option<((String, String), Resolved)>,
    folder: Option<Arc<PickedFolder>>,
}

impl ModelCache {
    /// The preset `model` (or `hf:NAME`, the picked folder) on the data set `dataset`
    /// (loaded once per pair).
    pub fn get(&mut self, model: &str, dataset: &str) -> Result<Resolved> {
        let key = (model.to_string(), dataset.to_string());
        if let Some((k, resolved)) = &self.cached
            && *k == key
        {
            return Ok(resolved.clone());
        }
        let source: DataSource = dataset.parse()?;
        let resolved = match self.folder_for(model)? {
            Some(folder) => folder_on_text(&folder, model, dataset, &source)?,
            None => {
                let choice = ModelChoice::Preset(model.to_string());
                let (spec, split) = model_and_data(Some(&choice), &source, true)?;
                Resolved {
                    spec,
                    split: Arc::new(split),
                    tokenizer: None,
                }
            }
        };
        self.cached = Some((key, resolved.clone()));
        Ok(resolved)
    }

    /// Use `folder` for `hf:` models from now on (what was resolved of another is dropped).
    pub fn set_folder(&mut self, folder: PickedFolder) {
        self.folder = Some(Arc::new(folder));
        self.cached = None;
    }

    pub fn folder(&self) -> Option<&Arc<PickedFolder>> {
        self.folder.as_ref()
    }

    /// The picked folder when `model` names one (an error when none has been picked).
    pub fn folder_for(&self, model: &str) -> Result<Option<Arc<PickedFolder>>> {
        if !is_folder_model(model) {
            return Ok(None);
        }
        match &self.folder {
            Some(folder) => Ok(Some(folder.clone())),
            None => Err(Error::InvalidArgument(format!(
                "{model}: no Hugging Face folder has been picked (the page's folder input, or \
                 the setup panel's Hugging Face folder)"
            ))),
        }
    }
}

/// The picked folder's model on the text of `source`, encoded whole by the folder's
/// tokenizer: what `train --model hf:DIR --dataset DATASET` trains.
fn folder_on_text(
    folder: &PickedFolder,
    model: &str,
    dataset: &str,
    source: &DataSource,
) -> Result<Resolved> {
    let Some((name, text)) = source.read_text()? else {
        return Err(Error::InvalidArgument(format!(
            "{model} trains on text; `{dataset}` is not text (choose {})",
            DataSource::EMBEDDED_TEXT
        )));
    };
    let tokenizer = folder.tokenizer();
    let encoded = TokenizedText::encode(&name, &text, tokenizer)?;
    let (mut spec, split) =
        model_and_tokenized(Some(&folder.choice()), &encoded, tokenizer.vocab_size())?;
    // Messages name the folder (`hf:NAME`), not the description it became.
    spec.name = model.to_string();
    Ok(Resolved {
        spec,
        split: Arc::new(split),
        tokenizer: Some(tokenizer.clone()),
    })
}
