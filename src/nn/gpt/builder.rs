//! The GPT's layers, as nanoGPT's `model.py` builds its modules: the embeddings, `n_layer`
//! blocks of two residuals (attention, MLP) and the final LayerNorm with the tied `lm_head`.

use super::{Activation, GptConfig, INIT_STD, MAX_GPT_LAYERS};
use crate::nn::layers::LayerConfig;
use crate::nn::layers::attention::AttentionConfig;
use crate::nn::layers::dropout::DropoutConfig;
use crate::nn::layers::embedding::EmbeddingConfig;
use crate::nn::layers::layernorm::LayerNormConfig;
use crate::nn::layers::linear::LinearConfig;
use crate::nn::layers::residual::residual;
use crate::nn::layers::unary::UnaryConfig;
use crate::ops::unary;
use crate::{Error, Result};

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
        if params > crate::nn::MAX_PARAMETERS as f64 {
            return Err(err(format!(
                "vocab_size {}, block_size {}, n_layer {} and n_embd {} make about {params:.3e} \
                 parameters, over the {} (2^31) one model may have",
                self.vocab_size,
                self.block_size,
                self.n_layer,
                self.n_embd,
                crate::nn::MAX_PARAMETERS
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
                residual(
                    vec![
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
                    Vec::new(),
                ),
            ));
            layers.push(named(
                block,
                residual(
                    vec![
                        named("ln_2", LayerNormConfig { bias }),
                        named("mlp.c_fc", linear(4 * c)),
                        ("mlp.gelu".to_string(), gelu()),
                        named("mlp.c_proj", c_proj.clone()),
                        named("mlp.dropout", DropoutConfig { p }),
                    ],
                    Vec::new(),
                ),
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
