//! A Hugging Face `config.json` of the Llama family ([`LlamaConfig`]): the fields transformers'
//! `LlamaConfig` has, with its defaults where a file leaves one out, read from the keys
//! transformers 4 writes (`rope_theta`, `rope_scaling`, `torch_dtype`) and those transformers
//! 5 writes (`rope_parameters`, `dtype`); every other key is kept and written back as read.

use serde_json::{Map, Value, json};

use crate::error::{Error, Result};

/// What a Llama-family model is: transformers' `LlamaConfig`.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    /// Grouped-query attention's key/value heads (default: `num_attention_heads`).
    pub num_key_value_heads: usize,
    /// Channels per head (default: `hidden_size / num_attention_heads`).
    pub head_dim: usize,
    /// The longest sequence the model takes (default 2048); the RoPE table's length.
    pub max_position_embeddings: usize,
    /// RMSNorm's epsilon (default 1e-6).
    pub rms_norm_eps: f64,
    /// RoPE's base (default 10000).
    pub rope_theta: f64,
    /// `lm_head` shares `embed_tokens`' weight (default false).
    pub tie_word_embeddings: bool,
    /// Every other key of the file, written back as read (token ids, `initializer_range`,
    /// `architectures`, ...).
    pub other: Map<String, Value>,
}

/// The keys this struct holds, and those it reads and rewrites itself.
const OWN: [&str; 11] = [
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "max_position_embeddings",
    "rms_norm_eps",
    "tie_word_embeddings",
    "rope_theta",
];
const ROPE_KEYS: [&str; 2] = ["rope_scaling", "rope_parameters"];

impl LlamaConfig {
    /// Parses the text of a `config.json`; `name` (its path) starts every error.
    pub fn from_json(text: &str, name: &str) -> Result<Self> {
        let bad = |msg: String| Error::Model(format!("{name}: {msg}"));
        let value: Value = serde_json::from_str(text).map_err(|e| bad(format!("not JSON: {e}")))?;
        let Value::Object(mut map) = value else {
            return Err(bad("not a JSON object".into()));
        };
        check_llama(&map).map_err(bad)?;
        let count =
            |map: &Map<String, Value>, key: &str| -> std::result::Result<Option<usize>, String> {
                match map.get(key) {
                    None | Some(Value::Null) => Ok(None),
                    Some(v) => v
                        .as_u64()
                        .filter(|&n| n > 0)
                        .map(|n| Some(n as usize))
                        .ok_or_else(|| format!("`{key}` must be a positive integer, not {v}")),
                }
            };
        let required = |key: &str| {
            count(&map, key)?.ok_or_else(|| format!("`{key}` is missing (a Llama config has it)"))
        };
        let number = |key: &str, default: f64| -> std::result::Result<f64, String> {
            match map.get(key) {
                None | Some(Value::Null) => Ok(default),
                Some(v) => v
                    .as_f64()
                    .filter(|x| x.is_finite() && *x > 0.0)
                    .ok_or_else(|| format!("`{key}` must be a positive number, not {v}")),
            }
        };
        let hidden_size = required("hidden_size").map_err(bad)?;
        let heads = required("num_attention_heads").map_err(bad)?;
        let kv_heads = count(&map, "num_key_value_heads")
            .map_err(bad)?
            .unwrap_or(heads);
        let head_dim = match count(&map, "head_dim").map_err(bad)? {
            Some(d) => d,
            None if hidden_size.is_multiple_of(heads) => hidden_size / heads,
            None => {
                return Err(bad(format!(
                    "hidden_size {hidden_size} is not a multiple of num_attention_heads {heads}"
                )));
            }
        };
        if !heads.is_multiple_of(kv_heads) {
            return Err(bad(format!(
                "num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}"
            )));
        }
        if !head_dim.is_multiple_of(2) {
            return Err(bad(format!(
                "head_dim {head_dim} is odd; RoPE's rotate-half pairs channel i with i + \
                 head_dim/2"
            )));
        }
        let tie = match map.get("tie_word_embeddings") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(v) => {
                return Err(bad(format!(
                    "`tie_word_embeddings` must be true or false, not {v}"
                )));
            }
        };
        let config = LlamaConfig {
            vocab_size: required("vocab_size").map_err(bad)?,
            hidden_size,
            intermediate_size: required("intermediate_size").map_err(bad)?,
            num_hidden_layers: required("num_hidden_layers").map_err(bad)?,
            num_attention_heads: heads,
            num_key_value_heads: kv_heads,
            head_dim,
            max_position_embeddings: count(&map, "max_position_embeddings")
                .map_err(bad)?
                .unwrap_or(2048),
            rms_norm_eps: number("rms_norm_eps", 1e-6).map_err(bad)?,
            rope_theta: rope_theta(&map).map_err(bad)?,
            tie_word_embeddings: tie,
            other: Map::new(),
        };
        for key in OWN.iter().chain(&ROPE_KEYS) {
            map.remove(*key);
        }
        Ok(LlamaConfig {
            other: map,
            ..config
        })
    }

    /// The `config.json` text transformers' `LlamaForCausalLM.from_pretrained` reads: the
    /// fields above under their names (RoPE as transformers 5's `rope_parameters`), `dtype`
    /// as the weights are saved, and every other key as read (`architectures` and
    /// `model_type` added when missing).
    pub fn to_json(&self, dtype: &str) -> String {
        let mut map = self.other.clone();
        map.remove("torch_dtype");
        map.entry("architectures")
            .or_insert_with(|| json!(["LlamaForCausalLM"]));
        map.entry("model_type").or_insert_with(|| json!("llama"));
        for (key, value) in [
            ("vocab_size", json!(self.vocab_size)),
            ("hidden_size", json!(self.hidden_size)),
            ("intermediate_size", json!(self.intermediate_size)),
            ("num_hidden_layers", json!(self.num_hidden_layers)),
            ("num_attention_heads", json!(self.num_attention_heads)),
            ("num_key_value_heads", json!(self.num_key_value_heads)),
            ("head_dim", json!(self.head_dim)),
            (
                "max_position_embeddings",
                json!(self.max_position_embeddings),
            ),
            ("rms_norm_eps", json!(self.rms_norm_eps)),
            ("tie_word_embeddings", json!(self.tie_word_embeddings)),
            (
                "rope_parameters",
                json!({"rope_theta": self.rope_theta, "rope_type": "default"}),
            ),
            ("dtype", json!(dtype)),
        ] {
            map.insert(key.to_string(), value);
        }
        let mut text = serde_json::to_string_pretty(&Value::Object(map)).expect("JSON");
        text.push('\n');
        text
    }
}

/// What this build runs of the family: `model_type` llama, SiLU, no projection biases.
fn check_llama(map: &Map<String, Value>) -> std::result::Result<(), String> {
    if let Some(t) = map.get("model_type").and_then(Value::as_str)
        && t != "llama"
    {
        return Err(format!(
            "model_type `{t}`: this build reads Llama-family configs (model_type llama)"
        ));
    }
    if let Some(act) = map.get("hidden_act").and_then(Value::as_str)
        && act != "silu"
    {
        return Err(format!(
            "hidden_act `{act}`: the Llama MLP here is SwiGLU (silu)"
        ));
    }
    for key in ["attention_bias", "mlp_bias"] {
        if map.get(key) == Some(&Value::Bool(true)) {
            return Err(format!(
                "`{key}: true`: projections with biases are not supported"
            ));
        }
    }
    Ok(())
}

/// `rope_theta` from transformers 5's `rope_parameters` or 4's top-level key (default
/// 10000); a scaled RoPE (llama3, linear, dynamic, yarn) is refused.
fn rope_theta(map: &Map<String, Value>) -> std::result::Result<f64, String> {
    let mut theta = map.get("rope_theta").cloned();
    for key in ROPE_KEYS {
        let Some(Value::Object(rope)) = map.get(key) else {
            if let Some(v) = map.get(key).filter(|v| !v.is_null()) {
                return Err(format!("`{key}` must be an object or null, not {v}"));
            }
            continue;
        };
        let kind = rope
            .get("rope_type")
            .or_else(|| rope.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("default");
        if kind != "default" {
            return Err(format!(
                "`{key}` asks for RoPE scaling `{kind}`; this build has the default RoPE only"
            ));
        }
        if let Some(t) = rope.get("rope_theta") {
            theta = Some(t.clone());
        }
    }
    match theta {
        None | Some(Value::Null) => Ok(10_000.0),
        Some(v) => v
            .as_f64()
            .filter(|t| t.is_finite() && *t > 1.0)
            .ok_or_else(|| format!("`rope_theta` must be a number above 1, not {v}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SmolLM2-135M's config.json in transformers 4's keys.
    const SMOLLM2: &str = r#"{
      "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
      "bos_token_id": 0, "eos_token_id": 0, "hidden_act": "silu", "hidden_size": 576,
      "initializer_range": 0.041666666666666664, "intermediate_size": 1536,
      "is_llama_config": true, "max_position_embeddings": 8192, "model_type": "llama",
      "num_attention_heads": 9, "num_hidden_layers": 30, "num_key_value_heads": 3,
      "pad_token_id": null, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
      "rope_interleaved": false, "rope_scaling": null, "rope_theta": 100000,
      "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.42.3",
      "use_cache": true, "vocab_size": 49152
    }"#;

    #[test]
    fn smollm2s_config_reads_and_writes_back() {
        let c = LlamaConfig::from_json(SMOLLM2, "config.json").unwrap();
        assert_eq!(
            (c.hidden_size, c.intermediate_size, c.num_hidden_layers),
            (576, 1536, 30)
        );
        assert_eq!(
            (c.num_attention_heads, c.num_key_value_heads, c.head_dim),
            (9, 3, 64)
        );
        assert_eq!((c.vocab_size, c.max_position_embeddings), (49152, 8192));
        assert_eq!((c.rms_norm_eps, c.rope_theta), (1e-5, 100_000.0));
        assert!(c.tie_word_embeddings);
        assert_eq!(c.other["bos_token_id"], json!(0));
        let again = LlamaConfig::from_json(&c.to_json("float32"), "out").unwrap();
        assert_eq!(
            again,
            LlamaConfig {
                other: again.other.clone(),
                ..c.clone()
            }
        );
        let written: Value = serde_json::from_str(&c.to_json("float32")).unwrap();
        assert_eq!(written["rope_parameters"]["rope_theta"], json!(100_000.0));
        assert_eq!(written["dtype"], json!("float32"));
        assert!(written.get("torch_dtype").is_none());
        assert_eq!(written["initializer_range"], json!(0.041666666666666664));
    }

    #[test]
    fn defaults_and_transformers_5_keys() {
        let c = LlamaConfig::from_json(
            r#"{"vocab_size": 10, "hidden_size": 8, "intermediate_size": 12,
                "num_hidden_layers": 1, "num_attention_heads": 2,
                "rope_parameters": {"rope_theta": 50000.0, "rope_type": "default"}}"#,
            "c",
        )
        .unwrap();
        assert_eq!((c.num_key_value_heads, c.head_dim), (2, 4));
        assert_eq!((c.rope_theta, c.rms_norm_eps), (50_000.0, 1e-6));
        assert_eq!(c.max_position_embeddings, 2048);
        assert!(!c.tie_word_embeddings);
    }

    #[test]
    fn what_this_build_cannot_run_is_refused_by_name() {
        let base = r#""vocab_size": 10, "hidden_size": 8, "intermediate_size": 12,
                      "num_hidden_layers": 1, "num_attention_heads": 2"#;
        let err = |extra: &str| {
            let text = format!("{{{base}{extra}}}");
            LlamaConfig::from_json(&text, "dir/config.json")
                .unwrap_err()
                .to_string()
        };
        for (extra, needle) in [
            (r#", "model_type": "mistral""#, "model_type `mistral`"),
            (
                r#", "num_key_value_heads": 3"#,
                "not a multiple of num_key_value_heads 3",
            ),
            (r#", "hidden_act": "gelu""#, "hidden_act `gelu`"),
            (r#", "attention_bias": true"#, "attention_bias: true"),
            (
                r#", "rope_scaling": {"rope_type": "llama3", "factor": 8.0}"#,
                "RoPE scaling `llama3`",
            ),
            (r#", "head_dim": 3"#, "head_dim 3 is odd"),
            (r#", "rope_theta": -1"#, "rope_theta"),
        ] {
            let e = err(extra);
            assert!(
                e.contains("dir/config.json") && e.contains(needle),
                "{extra}: {e}"
            );
        }
        let e = LlamaConfig::from_json(r#"{"hidden_size": 8}"#, "c").unwrap_err();
        assert!(
            e.to_string().contains("`num_attention_heads` is missing"),
            "{e}"
        );
    }
}
