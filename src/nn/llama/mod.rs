//! Llama, as transformers' `LlamaForCausalLM` defines it: a token embedding, decoder layers
//! of pre-norm grouped-query attention with RoPE and a SwiGLU MLP (RMSNorm, no biases), a
//! final RMSNorm and an `lm_head` tied to the embedding or not. SmolLM2, Llama 2/3 and
//! TinyLlama are this model with other sizes. Parameter names are transformers'
//! (`model.embed_tokens.weight`, `model.layers.0.self_attn.q_proj.weight`, ...,
//! `lm_head.weight`), so a checkpoint loads into `LlamaForCausalLM(config)`.
//!
//! JSON: `{"llama": {config.json's keys}, "seq_len": 128}`: a Hugging Face `config.json`
//! ([`LlamaConfig`]: `hidden_size`, `intermediate_size`, `num_hidden_layers`,
//! `num_attention_heads`, `num_key_value_heads`, `rms_norm_eps`, `rope_theta`, `vocab_size`,
//! `tie_word_embeddings`, `max_position_embeddings`) and the training window (`--seq-len`;
//! default min(1024, max_position_embeddings), as transformers' `run_clm.py` picks its
//! block size).
//!
//! The family ([`crate::nn::family`]) in one module: the config and presets here, the layers
//! in `builder.rs`, transformers' `state_dict` names in `names.rs`.

mod builder;
mod names;

use std::sync::Arc;

use serde_json::{Value, json};

use super::family::{Described, Family, FamilyModel, NameTable, Tokens};
use crate::data::hf::{HostTensor, LlamaConfig, SaveDtype, folder_files};
use crate::{Error, Result};

pub use builder::llama_block;

/// transformers' `initializer_range` default: Linear and Embedding weights N(0, 0.02²).
pub const INIT_STD: f32 = 0.02;

/// Names accepted by [`llama_preset`].
pub const LLAMA_PRESETS: [&str; 2] = ["llama-tiny", "smollm2-135m"];

/// The most decoder layers a Llama may have (Llama 3.1 405B has 126).
pub const MAX_LLAMA_LAYERS: usize = 256;

/// The window `run_clm.py` trains on when none is given: `min(1024, model_max_length)`.
pub const DEFAULT_WINDOW: usize = 1024;

/// One Llama: its config and the window it trains on (at most `max_position_embeddings`).
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaModel {
    pub config: LlamaConfig,
    pub seq_len: usize,
}

impl LlamaModel {
    /// `config` on its default window.
    pub fn new(config: LlamaConfig) -> Self {
        let seq_len = config.max_position_embeddings.min(DEFAULT_WINDOW);
        LlamaModel { config, seq_len }
    }

    /// This model trained on windows of `seq_len` tokens: 1 to `max_position_embeddings`.
    pub fn with_seq_len(self, seq_len: usize) -> Result<Self> {
        let max = self.config.max_position_embeddings;
        if seq_len == 0 || seq_len > max {
            return Err(Error::model(format!(
                "--seq-len {seq_len}: the model takes 1 to max_position_embeddings = {max} tokens"
            )));
        }
        Ok(LlamaModel { seq_len, ..self })
    }
}

/// `config.json` text of a preset.
fn preset_json(name: &str, vocab_size: usize) -> Option<String> {
    let config = match name {
        // HuggingFaceTB/SmolLM2-135M's published config.json (the fields a LlamaConfig
        // reads; scripts/gpu_report_torch_models.py's SMOLLM2_135M is the same).
        "smollm2-135m" => json!({
            "model_type": "llama", "vocab_size": 49152, "hidden_size": 576,
            "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9,
            "num_key_value_heads": 3, "max_position_embeddings": 8192, "rms_norm_eps": 1e-5,
            "rope_theta": 100000.0, "tie_word_embeddings": true, "hidden_act": "silu",
            "initializer_range": 0.041666666666666664, "bos_token_id": 0, "eos_token_id": 0,
        }),
        // Small enough for CI on a software adapter and a browser: GQA (4 over 2 heads),
        // tied, rope_theta 10000, the vocabulary of the data.
        "llama-tiny" => json!({
            "model_type": "llama", "vocab_size": vocab_size, "hidden_size": 64,
            "intermediate_size": 160, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "max_position_embeddings": 64, "rms_norm_eps": 1e-5,
            "rope_theta": 10000.0, "tie_word_embeddings": true, "hidden_act": "silu",
        }),
        _ => return None,
    };
    Some(config.to_string())
}

/// Preset `name`: `smollm2-135m` (SmolLM2-135M's exact config: its own 49152-token
/// vocabulary, which must hold the data's `vocab_size` ids) or `llama-tiny` (2 layers, 64
/// wide, 4 heads over 2 key/value heads, 64 positions, the data's vocabulary).
pub fn llama_preset(name: &str, vocab_size: usize) -> Result<LlamaModel> {
    let text = preset_json(name, vocab_size).ok_or_else(|| {
        Error::model(format!(
            "unknown Llama preset `{name}` (expected one of {})",
            LLAMA_PRESETS.join(", ")
        ))
    })?;
    let config = LlamaConfig::from_json(&text, name)?;
    if vocab_size > config.vocab_size {
        return Err(Error::model(format!(
            "{name}: the data uses {vocab_size} token ids, over the model's vocabulary of {}",
            config.vocab_size
        )));
    }
    Ok(LlamaModel::new(config))
}

/// The Llama family.
pub struct LlamaFamily;

/// The Llama family, as [`crate::nn::families::FAMILIES`] lists it.
pub static LLAMA: LlamaFamily = LlamaFamily;

impl Family for LlamaFamily {
    fn name(&self) -> &'static str {
        "llama"
    }

    fn config_name(&self) -> &'static str {
        "LlamaConfig"
    }

    fn presets(&self) -> &'static [&'static str] {
        &LLAMA_PRESETS
    }

    fn default_preset(&self) -> &'static str {
        "llama-tiny"
    }

    fn preset(&self, name: &str, output_dim: usize) -> Result<Arc<dyn FamilyModel>> {
        Ok(Arc::new(llama_preset(name, output_dim)?))
    }

    /// The Llama of `{"llama": {config.json}, "seq_len": N}` (`seq_len` optional). A
    /// config.json has no defaults to report: its missing keys are transformers' defaults,
    /// which [`LlamaConfig`] applies.
    fn describes(&self, value: &Value) -> Result<Option<Described>> {
        let Some(top) = value.as_object() else {
            return Ok(None);
        };
        let Some(config) = top.get("llama") else {
            return Ok(None);
        };
        if let Some(other) = top.keys().find(|k| *k != "llama" && *k != "seq_len") {
            return Err(Error::model(format!(
                "json: unknown key `{other}` beside `llama` (a Llama is {{\"llama\": \
                 {{config.json}}, \"seq_len\": N}})"
            )));
        }
        let model = LlamaModel::new(LlamaConfig::from_json(&config.to_string(), "json")?);
        let model = match top.get("seq_len") {
            None => model,
            Some(n) => {
                let n = n.as_u64().ok_or_else(|| {
                    Error::model(format!(
                        "json: `seq_len` must be a positive integer, not {n}"
                    ))
                })?;
                model.with_seq_len(n as usize)?
            }
        };
        Ok(Some((Arc::new(model), Vec::new())))
    }

    fn takes_tokens(&self) -> bool {
        true
    }

    fn bench_data(&self) -> &'static str {
        "hamlet"
    }
}

impl FamilyModel for LlamaModel {
    fn family(&self) -> &'static dyn Family {
        &LLAMA
    }

    /// `{"llama": {config.json as transformers 5 writes it}, "seq_len": N}`.
    fn description(&self) -> Value {
        let config: Value =
            serde_json::from_str(&self.config.to_json("float32")).expect("our own JSON");
        json!({ "llama": config, "seq_len": self.seq_len })
    }

    /// `config.json` and `model.safetensors` (f32) as `save_pretrained` writes them.
    fn export_folder(&self, tensors: &[HostTensor]) -> Result<Vec<(&'static str, Vec<u8>)>> {
        folder_files(&self.config, tensors, SaveDtype::F32)
    }

    /// The vocabulary, and the training window as the context.
    fn tokens(&self) -> Option<Tokens> {
        Some(Tokens {
            vocab_size: self.config.vocab_size,
            block_size: self.seq_len,
        })
    }

    fn build(&self, name: &str, t: usize) -> Result<super::family::Built> {
        Ok((vec![t], self.layers(name, t)?))
    }

    fn names(&self) -> NameTable {
        names::TRANSFORMERS
    }

    fn with_seq_len(&self, seq_len: usize) -> Result<Arc<dyn FamilyModel>> {
        Ok(Arc::new(self.clone().with_seq_len(seq_len)?))
    }
}
