//! A Hugging Face folder picked by the user, fine-tuned in the app: the page's folder input
//! hands its files' bytes ([`crate::data::hf::MemoryFolder`]), the native setup panel a
//! directory ([`crate::data::hf::DiskFolder`]). What the CLI's `--model hf:DIR` does, from
//! the same pieces:
//! - the model is the folder's `config.json` ([`ModelChoice::hf`]);
//! - the text (the embedded one) is encoded by the folder's `tokenizer.json`, and the
//!   samples are decoded by it;
//! - the first weights are the folder's tensors, read only once the model's size has been
//!   checked against the adapter's limits ([`PickedFolder::weights`]).
//!
//! The session names it `hf:NAME` (the folder's name), the way the CLI names `hf:DIR`.

use std::sync::Arc;

use crate::data::hf::{FolderSource, HfFolder, LlamaConfig, TOKENIZER, read_config, read_tensors};
use crate::data::{Tokenizer, file_caps::TOKENIZER_FILE};
use crate::error::{Error, Result};
use crate::nn::ModelSpec;
use crate::train::ModelChoice;
use crate::train::checkpoint::Checkpoint;

/// How a model name says "the picked folder" (`hf:NAME`).
pub const HF_PREFIX: &str = "hf:";

/// Whether `model` names a picked folder.
pub fn is_folder_model(model: &str) -> bool {
    model.starts_with(HF_PREFIX)
}

/// A folder the user picked: its files, its config and its tokenizer (both read when it is
/// picked, so a folder that is not a Llama one is refused at once).
pub struct PickedFolder {
    name: String,
    source: Box<dyn FolderSource>,
    config: LlamaConfig,
    tokenizer: Arc<Tokenizer>,
}

impl std::fmt::Debug for PickedFolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PickedFolder")
            .field("name", &self.name)
            .field("config", &self.config)
            .finish()
    }
}

impl PickedFolder {
    /// The folder `source` holds, named `name`. Errors name the file: no or a bad
    /// `config.json` (not a Llama), no `tokenizer.json` (the app trains on text through it).
    pub fn new(name: &str, source: Box<dyn FolderSource>) -> Result<Self> {
        let config = read_config(&*source)?;
        if !source.has(TOKENIZER) {
            return Err(Error::Checkpoint(format!(
                "{}: the folder has no {TOKENIZER}; the app fine-tunes a folder on text \
                 encoded by its own tokenizer (transformers' `tokenizer.save_pretrained(dir)` \
                 writes it)",
                source.location()
            )));
        }
        let bytes = source.read(TOKENIZER, TOKENIZER_FILE)?;
        let tokenizer = Tokenizer::from_bytes(&bytes, &source.file(TOKENIZER))?;
        Ok(Self {
            name: name.to_string(),
            source,
            config,
            tokenizer: Arc::new(tokenizer),
        })
    }

    /// The model name a session config gives it: `hf:NAME`.
    pub fn model_name(&self) -> String {
        format!("{HF_PREFIX}{}", self.name)
    }

    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    /// The model its `config.json` describes.
    pub fn choice(&self) -> ModelChoice {
        ModelChoice::hf(self.config.clone())
    }

    pub fn tokenizer(&self) -> &Arc<Tokenizer> {
        &self.tokenizer
    }

    /// The folder's tensors as `spec`'s parameters (read now: call it after the limits
    /// check). Missing, unexpected or mis-shaped tensors are errors naming them.
    pub fn weights(&self, spec: &ModelSpec) -> Result<Vec<(String, Vec<f32>)>> {
        let (tensors, stored_as) = read_tensors(&*self.source)?;
        let folder = HfFolder {
            config: self.config.clone(),
            tensors,
            stored_as,
        };
        Checkpoint::from_hf(folder).params_for_model(spec, &self.source.location())
    }
}

impl PickedFolder {
    /// One line on what was picked, for the page's status and the setup panel.
    pub fn summary(&self) -> String {
        let c = &self.config;
        format!(
            "{}: a Llama of {} layers, hidden size {}, {} heads ({} key/value), vocabulary {}; \
             its tokenizer has {} ids",
            self.model_name(),
            c.num_hidden_layers,
            c.hidden_size,
            c.num_attention_heads,
            c.num_key_value_heads,
            c.vocab_size,
            self.tokenizer.vocab_size()
        )
    }
}
