//! GPT, as nanoGPT's `model.py` defines it: token and position embeddings, `n_layer` blocks
//! of pre-norm causal self-attention and MLP with residual connections, a final LayerNorm and
//! an `lm_head` whose weight is tied to the token embedding. Parameter names and shapes are
//! nanoGPT's (`transformer.wte.weight`, `transformer.h.0.ln_1.weight`,
//! `transformer.h.0.attn.c_attn.weight`, ..., `lm_head.weight`), so a checkpoint loads into
//! `GPT(GPTConfig(...)).load_state_dict(...)`.
//!
//! JSON: `{"gpt": {"vocab_size": 65, "block_size": 256, "n_layer": 6, "n_head": 6,
//! "n_embd": 384, "dropout": 0.2, "bias": false, "activation": "gelu"}}` (GPTConfig's fields
//! and defaults; `activation` is `gelu`, nanoGPT's exact `nn.GELU()`, or `gelu_tanh`, GPT-2's
//! approximation).
//!
//! The family ([`crate::nn::family`]), in one module: the config (GPTConfig's fields, the
//! external format: nanoGPT has no config file), its presets, nanoGPT's training recipe
//! ([`GPT`]), the builder (`builder.rs`: the layers, each block two residuals) and the table of
//! nanoGPT's `state_dict` names (`names.rs`).

mod builder;
mod names;

use std::sync::Arc;

use serde::Deserialize;

use super::family::{
    Built, Described, Family, FamilyModel, NameTable, Recipe, Tokens, describe_keyed,
};
use crate::{Error, Result};

/// nanoGPT's `GPTConfig`, plus the MLP's activation.
#[derive(Clone, Debug, Deserialize, PartialEq, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct GptConfig {
    #[serde(default = "defaults::vocab_size")]
    pub vocab_size: usize,
    #[serde(default = "defaults::block_size")]
    pub block_size: usize,
    #[serde(default = "defaults::n_layer")]
    pub n_layer: usize,
    #[serde(default = "defaults::n_head")]
    pub n_head: usize,
    #[serde(default = "defaults::n_embd")]
    pub n_embd: usize,
    #[serde(default)]
    pub dropout: f32,
    #[serde(default = "defaults::bias")]
    pub bias: bool,
    #[serde(default)]
    pub activation: Activation,
}

/// The fields of `{"gpt": {...}}`, in `GPTConfig`'s order.
pub const GPT_FIELDS: [&str; 8] = [
    "vocab_size",
    "block_size",
    "n_layer",
    "n_head",
    "n_embd",
    "dropout",
    "bias",
    "activation",
];

/// The MLP's GELU.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    /// `nn.GELU()`: the exact, erf form (nanoGPT's current model.py).
    #[default]
    Gelu,
    /// `nn.GELU(approximate='tanh')`: GPT-2's approximation.
    GeluTanh,
}

/// GPTConfig's defaults (GPT-2 small).
mod defaults {
    pub fn vocab_size() -> usize {
        50304
    }
    pub fn block_size() -> usize {
        1024
    }
    pub fn n_layer() -> usize {
        12
    }
    pub fn n_head() -> usize {
        12
    }
    pub fn n_embd() -> usize {
        768
    }
    pub fn bias() -> bool {
        true
    }
}

/// nanoGPT's standard deviation for Linear and Embedding weights.
pub const INIT_STD: f32 = 0.02;

/// Names accepted by [`gpt_preset`].
pub const GPT_PRESETS: [&str; 2] = ["gpt-char", "gpt-tiny"];

/// `gpt-char`: nanoGPT's `train_shakespeare_char` "baby GPT" (6 layers, 6 heads, 384 wide,
/// block 256, dropout 0.2, no biases, exact GELU). `gpt-tiny`: 2 layers, 4 heads, 64 wide,
/// block 64, no dropout, no biases, exact GELU — small enough for CI on a software adapter and
/// a browser on a CPU adapter. Both take the vocabulary size from the data.
pub fn gpt_preset(name: &str, vocab_size: usize) -> Result<GptConfig> {
    let base = GptConfig {
        vocab_size,
        block_size: 256,
        n_layer: 6,
        n_head: 6,
        n_embd: 384,
        dropout: 0.2,
        bias: false,
        activation: Activation::Gelu,
    };
    match name {
        "gpt-char" => Ok(base),
        "gpt-tiny" => Ok(GptConfig {
            block_size: 64,
            n_layer: 2,
            n_head: 4,
            n_embd: 64,
            dropout: 0.0,
            ..base
        }),
        _ => Err(Error::model(format!(
            "unknown GPT preset `{name}` (expected one of {})",
            GPT_PRESETS.join(", ")
        ))),
    }
}

/// The most blocks (`n_layer`) a GPT may have: 256, over twice GPT-3's 96 (each block is
/// a dozen layers, and [`super::MAX_LAYERS`] bounds those).
pub const MAX_GPT_LAYERS: usize = 256;

/// The GPT family.
pub struct GptFamily;

/// The GPT family, as [`crate::nn::family::FAMILIES`] lists it.
pub static GPT: GptFamily = GptFamily;

/// nanoGPT's `config/train_shakespeare_char.py` recipe: AdamW at lr 1e-3 with β2 0.99 and
/// weight decay 0.1 for matrices and embeddings only (`configure_optimizers`), clipping at 1,
/// a cosine schedule warming up over 1/50 of its decay (100 of 5000 iterations) to a floor of
/// lr/10 (`min_lr = 1e-4`, in Python's f64 arithmetic: in f32, 1e-3 / 10 is one step above).
pub const RECIPE: Recipe = Recipe {
    optimizer: "adamw",
    lr: 1e-3,
    weight_decay: 0.1,
    beta2: 0.99,
    clip_grad_norm: 1.0,
    warmup_divisor: super::family::COSINE_WARMUP_DIVISOR,
    min_lr_divisor: super::family::COSINE_MIN_LR_DIVISOR,
    decay_matrices_only: true,
};

impl Family for GptFamily {
    fn name(&self) -> &'static str {
        "gpt"
    }

    fn config_name(&self) -> &'static str {
        "GPTConfig"
    }

    fn presets(&self) -> &'static [&'static str] {
        &GPT_PRESETS
    }

    /// `gpt-tiny`: small enough for CI on a software adapter and for a browser.
    fn default_preset(&self) -> &'static str {
        "gpt-tiny"
    }

    fn preset(&self, name: &str, output_dim: usize) -> Result<Arc<dyn FamilyModel>> {
        Ok(Arc::new(gpt_preset(name, output_dim)?))
    }

    /// The GPT of a `{"gpt": {...}}` description, and the `GPTConfig` fields it leaves to
    /// nanoGPT's defaults. Keys beside `gpt` are refused, as unknown keys inside it are.
    fn describes(&self, value: &serde_json::Value) -> Result<Option<Described>> {
        describe_keyed::<GptConfig>(value, "gpt", "a GPT", &GPT_FIELDS)
    }

    fn recipe(&self) -> Option<Recipe> {
        Some(RECIPE)
    }

    fn takes_tokens(&self) -> bool {
        true
    }

    fn bench_data(&self) -> &'static str {
        "hamlet"
    }
}

impl FamilyModel for GptConfig {
    fn family(&self) -> &'static dyn Family {
        &GPT
    }

    /// `{"gpt": {GPTConfig's fields, "activation"}}`.
    fn description(&self) -> serde_json::Value {
        serde_json::json!({ "gpt": self })
    }

    fn tokens(&self) -> Option<Tokens> {
        Some(Tokens {
            vocab_size: self.vocab_size,
            block_size: self.block_size,
        })
    }

    /// The model on sequences of `t` tokens (at most `block_size`): input `[t]`, output
    /// `[t, vocab]`; parameters do not depend on `t`.
    fn build(&self, name: &str, t: usize) -> Result<Built> {
        Ok((vec![t], self.layers(name, t)?))
    }

    fn names(&self) -> NameTable {
        names::NANOGPT
    }
}
