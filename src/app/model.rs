//! What the app trains, resolved the way the CLI resolves it ([`model_and_data`]): a preset
//! on the data set the setup panel names, text cut into the model's block size for a GPT.
//! The result is cached by (model, data set) so the precision map and restarts reuse it.

use std::sync::Arc;

use crate::data::{DataSource, Split};
use crate::error::Result;
use crate::nn::ModelSpec;
use crate::train::{ModelChoice, model_and_data};

/// The data set a model trains on when the one selected does not suit it: the embedded text
/// for a GPT, the embedded MNIST subset otherwise.
pub fn dataset_for(model: &str, dataset: &str) -> String {
    let gpt = ModelChoice::Preset(model.into()).takes_tokens();
    let text = dataset
        .parse::<DataSource>()
        .is_ok_and(|source| source.is_text());
    match (gpt, text) {
        (true, false) => DataSource::EMBEDDED_TEXT.into(),
        (false, true) => "default".into(),
        _ => dataset.into(),
    }
}

/// The model for a data set the setup panel just selected, when the one selected does not
/// suit it: `gpt-tiny` for text, `mlp` for the rest.
pub fn model_for(dataset: &str, model: &str) -> String {
    let gpt = ModelChoice::Preset(model.into()).takes_tokens();
    let text = dataset
        .parse::<DataSource>()
        .is_ok_and(|source| source.is_text());
    match (text, gpt) {
        (true, false) => match ModelChoice::default_for_text() {
            ModelChoice::Preset(name) => name,
            ModelChoice::Json(_) => model.into(),
        },
        (false, true) => "mlp".into(),
        _ => model.into(),
    }
}

/// A model and its data, cached by (model, data set).
#[derive(Default)]
pub struct ModelCache {
    cached: Option<((String, String), ModelSpec, Arc<Split>)>,
}

impl ModelCache {
    /// The preset `model` on the data set `dataset` (loaded once per pair).
    pub fn get(&mut self, model: &str, dataset: &str) -> Result<(ModelSpec, Arc<Split>)> {
        let key = (model.to_string(), dataset.to_string());
        if let Some((k, spec, split)) = &self.cached
            && *k == key
        {
            return Ok((spec.clone(), split.clone()));
        }
        let source: DataSource = dataset.parse()?;
        let choice = ModelChoice::Preset(model.to_string());
        let (spec, split) = model_and_data(Some(&choice), &source, true)?;
        let split = Arc::new(split);
        self.cached = Some((key, spec.clone(), split.clone()));
        Ok((spec, split))
    }
}
