//! Model descriptions: named layers resolved against the input shape, with PyTorch parameter
//! names and initialisation. No GPU here; [`crate::nn::network`] plans a model on the GPU.
//!
//! A model comes from a preset ([`crate::nn::preset`]), from Rust ([`ModelSpec::sequential`])
//! or from JSON ([`ModelSpec::from_json`]):
//!
//! ```json
//! {"input": [1, 28, 28], "layers": [
//!   {"conv2d": {"out": 32, "kernel": 3, "padding": 1}}, {"relu": {}},
//!   {"maxpool2d": {"kernel": 2}}, {"flatten": {}}, {"linear": {"out": 10}}]}
//! ```
//!
//! Layer kinds and their fields (defaults after `=`):
//! `linear {out, bias=true}`, `conv2d {out, kernel, stride=1, padding=0, bias=true}` (square
//! kernels, zero padding), `relu {}`, `gelu {}` (`nn.GELU()`, exact), `gelu_tanh {}`
//! (`nn.GELU(approximate='tanh')`), `maxpool2d {kernel, stride=kernel}` (no padding, floor
//! mode), `flatten {}` (all per-sample dimensions, like `nn.Flatten()`), `layernorm
//! {bias=true}` (over the last dimension), `dropout {p}`, `attention {heads, dropout=0}`
//! (causal self-attention on packed `[T, 3C]` projections), `embedding {vocab, dim,
//! positions=null}` (token ids `[T]` → `[T, dim]`), `residual {layers}` (`x + layers(x)`).
//! Each kind is a file in [`crate::nn::layers`]. A whole GPT is `{"gpt": {...}}`
//! ([`crate::nn::gpt`]).
//!
//! Shapes are per sample, without the batch dimension: `[features]` or `[channels, height,
//! width]`. A JSON model is a `torch.nn.Sequential`: every layer, activations included, takes
//! its index as its name, so parameters are `{index}.weight` and `{index}.bias`. Layouts are
//! PyTorch's: Linear weight `[out, in]`, Conv2d weight `[out, in, kh, kw]`.

use std::sync::Arc;

use serde::Deserialize;

use super::layers::{self, Init, Layer, LayerConfig, checked_numel, too_large};
use crate::data::{Dataset, Rng};
use crate::tensor::DType;
use crate::{Error, Result};

/// One layer of a model, in execution order.
#[derive(Clone, Debug)]
pub struct NamedLayer {
    /// The module's name, the prefix of its parameters: `"conv1"`, or `"0"` in a Sequential.
    pub name: String,
    pub layer: Arc<dyn Layer>,
    /// Per-sample input shape (no batch dimension).
    pub input_shape: Vec<usize>,
    /// Per-sample output shape (no batch dimension).
    pub output_shape: Vec<usize>,
}

impl NamedLayer {
    /// This layer's parameters in `state_dict` order (weight, then bias), with full names.
    pub fn parameters(&self) -> Vec<ParamSpec> {
        self.layer
            .parameters()
            .into_iter()
            .map(|p| {
                let p = p.under(&self.name);
                ParamSpec {
                    name: p.name,
                    shape: p.shape,
                    init: p.init,
                }
            })
            .collect()
    }
}

/// A parameter tensor: PyTorch `state_dict` name, shape and initialisation.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamSpec {
    pub name: String,
    pub shape: Vec<usize>,
    pub init: Init,
}

impl ParamSpec {
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// A model: input shape and layers with resolved shapes.
#[derive(Clone, Debug)]
pub struct ModelSpec {
    /// The preset's name, or `"json"` for a JSON description.
    pub name: String,
    /// Per-sample input shape.
    pub input_shape: Vec<usize>,
    pub layers: Vec<NamedLayer>,
    /// The GPT configuration this model was built from, if any (saved with checkpoints so
    /// `webgpu-amp sample` rebuilds the model).
    pub gpt: Option<super::gpt::GptConfig>,
}

/// Two models are equal when they print the same: names, shapes and every layer's repr.
impl PartialEq for ModelSpec {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && self.input_shape == other.input_shape
            && self.layers.len() == other.layers.len()
            && self.layers.iter().zip(&other.layers).all(|(a, b)| {
                a.name == b.name
                    && a.input_shape == b.input_shape
                    && a.output_shape == b.output_shape
                    && a.layer.repr() == b.layer.repr()
            })
    }
}

/// Stream tag so initialisation never shares numbers with shuffling or synthetic data.
const INIT_STREAM: u64 = 0x494e_4954; // "INIT"

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelJson {
    input: Vec<usize>,
    layers: Vec<serde_json::Value>,
}

/// A whole GPT: `{"gpt": {GPTConfig's fields}}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GptJson {
    gpt: super::gpt::GptConfig,
}

/// Parses one JSON layer, `{"kind": {fields}}`, through [`layers::REGISTRY`].
pub(crate) fn layer_from_json(
    value: serde_json::Value,
) -> std::result::Result<Box<dyn LayerConfig>, String> {
    let kinds = || {
        layers::REGISTRY
            .iter()
            .map(|(k, _)| format!("{{\"{k}\": {{...}}}}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let serde_json::Value::Object(object) = value else {
        return Err(format!(
            "expected an object with one key, the layer kind (one of {})",
            kinds()
        ));
    };
    let mut entries = object.into_iter();
    let (Some((kind, fields)), None) = (entries.next(), entries.next()) else {
        return Err(format!(
            "a layer is an object with exactly one key, the layer kind (one of {})",
            kinds()
        ));
    };
    let Some((_, parse)) = layers::REGISTRY.iter().find(|(k, _)| *k == kind) else {
        return Err(format!(
            "unknown layer kind `{kind}` (expected one of {})",
            kinds()
        ));
    };
    parse(fields).map_err(|e| format!("{kind}: {e}"))
}

impl ModelSpec {
    /// Resolves named layer configs in order; errors name the layer's index and name.
    pub fn build(
        name: &str,
        input_shape: &[usize],
        layers: &[(String, Box<dyn LayerConfig>)],
    ) -> Result<ModelSpec> {
        if input_shape.is_empty() || input_shape.contains(&0) {
            return Err(Error::model(format!(
                "{name}: input shape {input_shape:?} must be non-empty with no zero dimension"
            )));
        }
        if checked_numel(input_shape).is_none() {
            return Err(Error::model(format!(
                "{name}: input {}",
                too_large(input_shape)
            )));
        }
        if layers.is_empty() {
            return Err(Error::model(format!("{name}: the model has no layers")));
        }
        let layers = resolve_layers(input_shape, layers)
            .map_err(|msg| Error::model(format!("{name}: {msg}")))?;
        let spec = ModelSpec {
            name: name.to_string(),
            input_shape: input_shape.to_vec(),
            layers,
            gpt: None,
        };
        spec.check_tied_parameters()?;
        Ok(spec)
    }

    /// Parses a JSON description (see the module docs). Unknown layer kinds or fields,
    /// impossible shapes and zero sizes are errors naming the layer's index.
    pub fn from_json(json: &str) -> Result<ModelSpec> {
        // `{"gpt": {...}}` describes a whole GPT; anything else is a Sequential.
        if let Ok(serde_json::Value::Object(top)) = serde_json::from_str(json)
            && top.contains_key("gpt")
        {
            let GptJson { gpt } = serde_json::from_str(json).map_err(|e| {
                Error::model(format!(
                    "json: {e} (a GPT is {{\"gpt\": {{\"vocab_size\", \"block_size\", \"n_layer\", \"n_head\", \"n_embd\", \"dropout\", \"bias\", \"activation\"}}}})"
                ))
            })?;
            return gpt.model("gpt");
        }
        let model: ModelJson = serde_json::from_str(json).map_err(|e| {
            Error::model(format!(
                "json: {e} (expected {{\"input\": [C, H, W] or [features], \"layers\": [...]}})"
            ))
        })?;
        let layers = model
            .layers
            .into_iter()
            .enumerate()
            .map(|(index, value)| {
                let config = layer_from_json(value)
                    .map_err(|e| Error::model(format!("json: layer {index}: {e}")))?;
                Ok((index.to_string(), config))
            })
            .collect::<Result<Vec<_>>>()?;
        ModelSpec::build("json", &model.input, &layers)
    }

    /// The dtype of the model's input: token ids (u32) when its first layer takes them (an
    /// embedding), f32 features otherwise.
    pub fn input_dtype(&self) -> DType {
        self.layers
            .first()
            .and_then(|l| l.layer.input_dtype())
            .unwrap_or(DType::F32)
    }

    /// Per-sample output shape (of the last layer).
    pub fn output_shape(&self) -> &[usize] {
        self.layers
            .last()
            .map_or(&self.input_shape, |l| &l.output_shape)
    }

    /// Every parameter in PyTorch `state_dict` order.
    pub fn parameters(&self) -> Vec<ParamSpec> {
        self.layers
            .iter()
            .flat_map(NamedLayer::parameters)
            .collect()
    }

    /// Parameters used under a second name (weight tying): `(alias, owner)` full names, e.g.
    /// `("lm_head.weight", "transformer.wte.weight")`. Checkpoints write the alias too (as
    /// PyTorch's `state_dict` does) and accept it on load.
    pub fn tied_parameters(&self) -> Vec<(String, String)> {
        fn walk(prefix: &str, layers: &[NamedLayer], out: &mut Vec<(String, String)>) {
            for l in layers {
                let path = if prefix.is_empty() {
                    l.name.clone()
                } else {
                    format!("{prefix}.{}", l.name)
                };
                for (alias, owner) in l.layer.tied_parameters() {
                    out.push((format!("{path}.{alias}"), owner));
                }
                walk(&path, l.layer.sublayers(), out);
            }
        }
        let mut out = Vec::new();
        walk("", &self.layers, &mut out);
        out
    }

    /// Every tied parameter names an owner of the same shape.
    fn check_tied_parameters(&self) -> Result<()> {
        let params = self.parameters();
        for (alias, owner) in self.tied_parameters() {
            if !params.iter().any(|p| p.name == owner) {
                return Err(Error::model(format!(
                    "{}: `{alias}` is tied to `{owner}`, which no layer has",
                    self.name
                )));
            }
        }
        Ok(())
    }

    /// Total number of parameter values.
    pub fn num_parameters(&self) -> usize {
        self.parameters().iter().map(ParamSpec::numel).sum()
    }

    /// Checks that the model fits a data set: token ids into a model that takes them (an
    /// embedding first), features into one that does not, and the shapes
    /// ([`ModelSpec::check_data`]).
    pub fn check_dataset(&self, data: &Dataset) -> Result<()> {
        let takes_tokens = self.input_dtype() == DType::U32;
        if data.is_tokens() != takes_tokens {
            let (model, data_kind) = if takes_tokens {
                ("token ids (it starts with an embedding)", "f32 features")
            } else {
                (
                    "f32 features",
                    "token ids (use a GPT model, e.g. --model gpt-tiny)",
                )
            };
            return Err(Error::model(format!(
                "{}: the model takes {model} but {} holds {data_kind}",
                self.name, data.name
            )));
        }
        self.check_data(&data.sample_shape, data.output_dim())
    }

    /// Checks that the model fits the data: its input is the data's sample shape and its
    /// output is `[output_dim]` (the class count or the target width), or, for a model of
    /// token ids, one row of `output_dim` per token (`[T, vocabulary]`).
    pub fn check_data(&self, sample_shape: &[usize], output_dim: usize) -> Result<()> {
        if self.input_shape != sample_shape {
            return Err(Error::model(format!(
                "{}: the model takes input {:?} per sample but the data's samples are {sample_shape:?}",
                self.name, self.input_shape
            )));
        }
        let mut want = Vec::new();
        if self.input_dtype() == DType::U32 {
            want.extend_from_slice(sample_shape);
        }
        want.push(output_dim);
        if self.output_shape() != want {
            return Err(Error::model(format!(
                "{}: the model's output is {:?} per sample but the data needs {want:?} \
                 (classes, vocabulary or target width)",
                self.name,
                self.output_shape()
            )));
        }
        Ok(())
    }

    /// Initial parameters, drawn in `state_dict` order from one seeded stream, each as its
    /// layer says (PyTorch's defaults: see [`layers::Init`]). Deterministic per seed on every
    /// platform, but not torch's RNG stream.
    pub fn init_params(&self, seed: u64) -> Vec<(String, Vec<f32>)> {
        let mut rng = Rng::from_words(&[seed, INIT_STREAM]);
        self.parameters()
            .into_iter()
            .map(|param| {
                let n = param.numel();
                let values = match param.init {
                    Init::Uniform { bound } => (0..n).map(|_| rng.uniform(-bound, bound)).collect(),
                    Init::Normal { std } => (0..n).map(|_| std * rng.normal() as f32).collect(),
                    Init::Zeros => vec![0.0; n],
                    Init::Ones => vec![1.0; n],
                };
                (param.name, values)
            })
            .collect()
    }

    /// One line per layer: name, PyTorch repr, input → output shape.
    pub fn summary(&self) -> String {
        let mut s = format!("{} (input {:?})\n", self.name, self.input_shape);
        for layer in &self.layers {
            s.push_str(&format!(
                "  ({}): {}  {:?} -> {:?}\n",
                layer.name,
                layer.layer.repr(),
                layer.input_shape,
                layer.output_shape
            ));
        }
        s.push_str(&format!("  parameters: {}\n", self.num_parameters()));
        s
    }
}

/// Resolves named layer configs in order from `input`; errors name the layer's index and
/// name (`layer 3 `conv2` (conv2d): ...`).
pub(crate) fn resolve_layers(
    input: &[usize],
    layers: &[(String, Box<dyn LayerConfig>)],
) -> std::result::Result<Vec<NamedLayer>, String> {
    let mut shape = input.to_vec();
    let mut resolved = Vec::with_capacity(layers.len());
    for (index, (layer_name, config)) in layers.iter().enumerate() {
        let layer = config
            .resolve(&shape)
            .and_then(|r| check_sizes(&*r.layer, &r.output_shape).map(|()| r))
            .map_err(|msg| {
                let label = if *layer_name == index.to_string() {
                    String::new()
                } else {
                    format!(" `{layer_name}`")
                };
                format!("layer {index}{label} ({}): {msg}", config.kind())
            })?;
        resolved.push(NamedLayer {
            name: layer_name.clone(),
            layer: layer.layer,
            input_shape: shape,
            output_shape: layer.output_shape.clone(),
        });
        shape = layer.output_shape;
    }
    Ok(resolved)
}

/// Checks a resolved layer's output and parameter sizes against [`layers::MAX_ELEMENTS`].
fn check_sizes(layer: &dyn Layer, output: &[usize]) -> std::result::Result<(), String> {
    checked_numel(output).ok_or_else(|| too_large(output))?;
    for p in layer.parameters() {
        checked_numel(&p.shape).ok_or_else(|| format!("{} {}", p.name, too_large(&p.shape)))?;
    }
    Ok(())
}
