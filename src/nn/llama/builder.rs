//! The Llama's layers, as transformers' `LlamaForCausalLM` builds its modules: the token
//! embedding, `num_hidden_layers` decoder layers, the final RMSNorm and `lm_head` (tied to
//! the embedding or not). A decoder layer is one composition ([`llama_block`]); its backward
//! is derived.

use super::{INIT_STD, LlamaModel, MAX_LLAMA_LAYERS};
use crate::nn::layers::attention::AttentionConfig;
use crate::nn::layers::embedding::EmbeddingConfig;
use crate::nn::layers::graph::GraphConfig;
use crate::nn::layers::layernorm::RmsNormConfig;
use crate::nn::layers::linear::LinearConfig;
use crate::nn::layers::unary::UnaryConfig;
use crate::nn::layers::{LayerConfig, residual::Named};
use crate::ops::unary;
use crate::{Error, Result};

/// A bias-less projection to `out` features, transformers' init N(0, initializer_range²).
fn proj(out: usize) -> LinearConfig {
    LinearConfig {
        out,
        bias: false,
        init_std: Some(INIT_STD),
        tied_to: None,
    }
}

/// `LlamaDecoderLayer`: `h = x + o_proj(attn(input_layernorm(x)))`, then `y = h +
/// down_proj(silu(gate_proj(n)) · up_proj(n))` with `n = post_attention_layernorm(h)`.
/// q, k and v are three projections joined side by side for the attention (GQA and RoPE).
pub fn llama_block(m: &LlamaModel) -> GraphConfig {
    let c = &m.config;
    let (nh, nkv, hs) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
    let rms = || RmsNormConfig {
        eps: c.rms_norm_eps as f32,
    };
    let attention = AttentionConfig {
        heads: nh,
        kv_heads: Some(nkv),
        rope_theta: Some(c.rope_theta),
        dropout: 0.0,
    };
    let mut g = GraphConfig::new("llama_block");
    let x = GraphConfig::INPUT;
    let n = g.layer("input_layernorm", rms(), x);
    let q = g.layer("self_attn.q_proj", proj(nh * hs), n);
    let k = g.layer("self_attn.k_proj", proj(nkv * hs), n);
    let v = g.layer("self_attn.v_proj", proj(nkv * hs), n);
    let qkv = g.concat(&[q, k, v]);
    let a = g.layer("self_attn", attention, qkv);
    let a = g.layer("self_attn.o_proj", proj(c.hidden_size), a);
    let h = g.add(x, a);
    let n = g.layer("post_attention_layernorm", rms(), h);
    let gate = g.layer("mlp.gate_proj", proj(c.intermediate_size), n);
    let gate = g.layer("mlp.act_fn", UnaryConfig::new(&unary::SILU), gate);
    let up = g.layer("mlp.up_proj", proj(c.intermediate_size), n);
    let product = g.mul(gate, up);
    let mlp = g.layer("mlp.down_proj", proj(c.hidden_size), product);
    let y = g.add(h, mlp);
    g.output(y)
}

impl LlamaModel {
    /// The layers on sequences of `t` tokens (at most the training window), named as
    /// transformers' modules; parameters do not depend on `t`.
    pub fn layers(&self, name: &str, t: usize) -> Result<Vec<Named>> {
        let err = |m: String| Error::model(format!("{name}: {m}"));
        let c = &self.config;
        if c.num_hidden_layers > MAX_LLAMA_LAYERS {
            return Err(err(format!(
                "num_hidden_layers must be 1 to {MAX_LLAMA_LAYERS}, got {}",
                c.num_hidden_layers
            )));
        }
        let params = self.parameter_estimate();
        if params > crate::nn::MAX_PARAMETERS as f64 {
            return Err(err(format!(
                "the config makes about {params:.3e} parameters, over the {} (2^31) one model \
                 may have",
                crate::nn::MAX_PARAMETERS
            )));
        }
        if t == 0 || t > self.seq_len {
            return Err(err(format!(
                "sequences of {t} tokens do not fit the training window of {} (--seq-len, at \
                 most max_position_embeddings {})",
                self.seq_len, c.max_position_embeddings
            )));
        }
        fn named(name: impl Into<String>, config: impl LayerConfig + 'static) -> Named {
            (name.into(), Box::new(config))
        }
        let mut layers = vec![named(
            "model",
            EmbeddingConfig {
                vocab: c.vocab_size,
                dim: c.hidden_size,
                positions: None,
            },
        )];
        for i in 0..c.num_hidden_layers {
            layers.push(named(format!("model.layers.{i}"), llama_block(self)));
        }
        layers.push(named(
            "model.norm",
            RmsNormConfig {
                eps: c.rms_norm_eps as f32,
            },
        ));
        let tied = c
            .tie_word_embeddings
            .then(|| "model.wte.weight".to_string());
        layers.push(named(
            "lm_head",
            LinearConfig {
                tied_to: tied,
                ..proj(c.vocab_size)
            },
        ));
        Ok(layers)
    }

    /// Parameters the config describes, in f64: embeddings V·C (twice untied), per layer
    /// the four attention projections, the three MLP ones and two norms, the final norm.
    pub fn parameter_estimate(&self) -> f64 {
        let c = &self.config;
        let f = |n: usize| n as f64;
        let (v, h, i) = (f(c.vocab_size), f(c.hidden_size), f(c.intermediate_size));
        let (q, kv) = (
            f(c.num_attention_heads * c.head_dim),
            f(c.num_key_value_heads * c.head_dim),
        );
        let layer = h * q * 2.0 + h * kv * 2.0 + 3.0 * h * i + 2.0 * h;
        let heads = if c.tie_word_embeddings { 1.0 } else { 2.0 };
        heads * v * h + f(c.num_hidden_layers) * layer + h
    }
}
