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

use serde::Deserialize;

use super::layers::LayerConfig;
use super::layers::attention::AttentionConfig;
use super::layers::dropout::DropoutConfig;
use super::layers::embedding::EmbeddingConfig;
use super::layers::layernorm::LayerNormConfig;
use super::layers::linear::LinearConfig;
use super::layers::residual::ResidualConfig;
use super::layers::unary::UnaryConfig;
use crate::ops::unary;
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

/// One layer config with its module name.
pub type Named = (String, Box<dyn LayerConfig>);

impl GptConfig {
    /// Parameters the fields describe, as nanoGPT counts them (with biases), in f64 so that
    /// absurd fields cannot overflow: embeddings (V + T)·C, per block 12·C² + 13·C, the
    /// final norm 2·C (the head is tied to the token embedding).
    pub fn parameter_estimate(&self) -> f64 {
        let (v, t, l, c) = (
            self.vocab_size as f64,
            self.block_size as f64,
            self.n_layer as f64,
            self.n_embd as f64,
        );
        (v + t) * c + l * (12.0 * c * c + 13.0 * c) + 2.0 * c
    }

    /// The GPT's layers on sequences of `t` tokens (at most `block_size`, as nanoGPT's
    /// forward allows), named as nanoGPT's modules; parameters do not depend on `t`.
    /// [`GptConfig::model_for`] (in `model.rs`) resolves them into a `ModelSpec`.
    pub fn layers(&self, name: &str, t: usize) -> Result<Vec<Named>> {
        let err = |m: String| Error::model(format!("{name}: {m}"));
        for (what, v) in [
            ("vocab_size", self.vocab_size),
            ("block_size", self.block_size),
            ("n_layer", self.n_layer),
            ("n_head", self.n_head),
            ("n_embd", self.n_embd),
        ] {
            if v == 0 {
                return Err(err(format!("{what} must be at least 1")));
            }
        }
        // Costs before anything is built: the blocks and the parameters the fields describe
        // (a 100-byte file with n_layer 1,000,000 once planned for minutes, 5.9 GB in).
        if self.n_layer > MAX_GPT_LAYERS {
            return Err(err(format!(
                "n_layer must be 1 to {MAX_GPT_LAYERS}, got {}",
                self.n_layer
            )));
        }
        let params = self.parameter_estimate();
        if params > super::MAX_PARAMETERS as f64 {
            return Err(err(format!(
                "vocab_size {}, block_size {}, n_layer {} and n_embd {} make about {params:.3e} \
                 parameters, over the {} (2^31) one model may have",
                self.vocab_size,
                self.block_size,
                self.n_layer,
                self.n_embd,
                super::MAX_PARAMETERS
            )));
        }
        if !self.n_embd.is_multiple_of(self.n_head) {
            return Err(err(format!(
                "n_embd {} is not a multiple of n_head {}",
                self.n_embd, self.n_head
            )));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(err(format!(
                "dropout must be in [0, 1), got {}",
                self.dropout
            )));
        }
        let (c, bias, p) = (self.n_embd, self.bias, self.dropout);
        fn named(name: impl Into<String>, config: impl LayerConfig + 'static) -> Named {
            (name.into(), Box::new(config))
        }
        // nanoGPT's _init_weights: Linear weights N(0, 0.02), biases 0; the residual
        // projections (`c_proj`) N(0, 0.02/√(2·n_layer)).
        let linear = |out| LinearConfig {
            out,
            bias,
            init_std: Some(INIT_STD),
            tied_to: None,
        };
        let c_proj = LinearConfig {
            init_std: Some(INIT_STD / (2.0 * self.n_layer as f32).sqrt()),
            ..linear(c)
        };
        let gelu = || -> Box<dyn LayerConfig> {
            match self.activation {
                Activation::Gelu => Box::new(UnaryConfig::new(&unary::GELU)),
                Activation::GeluTanh => Box::new(UnaryConfig::new(&unary::GELU_TANH)),
            }
        };
        let mut layers: Vec<Named> = vec![
            named(
                "transformer",
                EmbeddingConfig {
                    vocab: self.vocab_size,
                    dim: c,
                    positions: Some(self.block_size),
                },
            ),
            named("transformer.drop", DropoutConfig { p }),
        ];
        for i in 0..self.n_layer {
            let block = format!("transformer.h.{i}");
            layers.push(named(
                block.clone(),
                ResidualConfig {
                    branch: vec![
                        named("ln_1", LayerNormConfig { bias }),
                        named("attn.c_attn", linear(3 * c)),
                        named(
                            "attn",
                            AttentionConfig {
                                heads: self.n_head,
                                dropout: p,
                            },
                        ),
                        named("attn.c_proj", c_proj.clone()),
                        named("attn.resid_dropout", DropoutConfig { p }),
                    ],
                },
            ));
            layers.push(named(
                block,
                ResidualConfig {
                    branch: vec![
                        named("ln_2", LayerNormConfig { bias }),
                        named("mlp.c_fc", linear(4 * c)),
                        ("mlp.gelu".to_string(), gelu()),
                        named("mlp.c_proj", c_proj.clone()),
                        named("mlp.dropout", DropoutConfig { p }),
                    ],
                },
            ));
        }
        layers.push(named("transformer.ln_f", LayerNormConfig { bias }));
        layers.push(named(
            "lm_head",
            LinearConfig {
                out: self.vocab_size,
                bias: false,
                init_std: None,
                tied_to: Some("transformer.wte.weight".into()),
            },
        ));
        if t == 0 || t > self.block_size {
            return Err(err(format!(
                "sequences of {t} tokens do not fit block_size {}",
                self.block_size
            )));
        }
        Ok(layers)
    }
}
