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
//! positions=null}` (token ids `[T]` → `[T, dim]`), `residual {layers, shortcut=[]}`
//! (`layers(x) + shortcut(x)`, the shortcut the identity when empty), `fork {branches, join}`
//! (each branch, a list of layers, on the same input, joined by `"sum"`, `"product"` or
//! `"concat"` along the last dimension), `scale {factor}` (`y = factor · x`, airbench's `Mul`
//! after its head). Each kind is a file in [`crate::nn::layers`]. A whole GPT is
//! `{"gpt": {...}}` ([`crate::nn::gpt`]); airbench94's net `{"airbench": {...}}`
//! ([`crate::nn::resnet::airbench`]).
//!
//! Shapes are per sample, without the batch dimension: `[features]` or `[channels, height,
//! width]`. A JSON model is a `torch.nn.Sequential`: every layer, activations included, takes
//! its index as its name, so parameters are `{index}.weight` and `{index}.bias`; a
//! residual's branch layers are `{index}.{i}`, its shortcut's `{index}.shortcut.{i}`, a
//! fork's `{index}.{branch}.{i}` (an `nn.ModuleList` of `nn.Sequential`s). Layouts are
//! PyTorch's: Linear weight `[out, in]`, Conv2d weight `[out, in, kh, kw]`.
//!
//! `"keep_f32": true` beside a layer's kind (`{"linear": {"out": 10}, "keep_f32": true}`)
//! computes that layer in f32 whatever the precision mode ([`super::keep_f32`]);
//! `"trainable": false` (or `{"weight": false}`) there freezes its parameters
//! ([`super::frozen`]).

use std::sync::Arc;

use serde::Deserialize;

use super::MAX_LAYERS;
use super::families;
use super::family::{self, FamilyModel};
pub use super::json_syntax::parse_json;
use super::json_syntax::whole;
use super::layers::attention_kernel::AttentionKernel;
use super::layers::{
    BufferDef, Init, LayerConfig, NamedLayer, ParamSpec, checked_numel, layer_from_json,
    resolve_layers, too_large,
};
use crate::data::{Dataset, Rng};
use crate::tensor::DType;
use crate::{Error, Result};

/// A model: input shape and layers with resolved shapes.
#[derive(Clone, Debug)]
pub struct ModelSpec {
    /// The preset's name, or `"json"` for a JSON description.
    pub name: String,
    /// Per-sample input shape.
    pub input_shape: Vec<usize>,
    pub layers: Vec<NamedLayer>,
    /// The family model this model was built from, if any ([`super::family`]): what a
    /// checkpoint stores to rebuild it, its tokens, its names' convention.
    pub family: Option<Arc<dyn FamilyModel>>,
    /// How its attention layers run (fused by default). How, not what: the parameters, the
    /// checkpoint and the equality of two models do not depend on it.
    pub attention: AttentionKernel,
    /// Layers computed in f32 whatever the precision mode, by their precision-map names
    /// ([`super::keep_f32`]). How, not what, like `attention`.
    pub keep_f32: Vec<String>,
    /// Parameters that do not train (PyTorch's `requires_grad=False`), by full name
    /// ([`super::frozen`]). How, not what: checkpoints hold them as any other.
    pub frozen: Vec<String>,
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
            family: None,
            attention: AttentionKernel::default(),
            keep_f32: Vec::new(),
            frozen: Vec::new(),
        };
        spec.check_tied_parameters()?;
        Ok(spec)
    }

    /// Parses a JSON description (see the module docs). A syntax error names its line and
    /// column; unknown keys (top-level ones included), layer kinds or fields, impossible
    /// shapes and zero sizes are errors naming the layer's index.
    pub fn from_json(json: &str) -> Result<ModelSpec> {
        // `{"gpt": {...}}` describes a whole model of a family; anything else is a
        // Sequential.
        let value = parse_json(json)?;
        if let Some((model, _)) = families::described_by(&value)? {
            let name = model.family().name();
            let t = model.tokens().map_or(0, |t| t.block_size);
            return ModelSpec::of_family(model, name, t);
        }
        let model: ModelJson = serde_json::from_value(value).map_err(|e| {
            Error::model(format!(
                "json: {e} (expected {{\"input\": [C, H, W] or [features], \"layers\": [...]}})"
            ))
        })?;
        if model.layers.len() > MAX_LAYERS {
            return Err(Error::model(format!(
                "json: {} layers: a model may have at most {MAX_LAYERS}",
                model.layers.len()
            )));
        }
        let mut keep_f32 = Vec::new();
        let mut trainable = Vec::new();
        let layers = model
            .layers
            .into_iter()
            .enumerate()
            .map(|(index, mut value)| {
                let err = |e: String| Error::model(format!("json: layer {index}: {}", whole(e)));
                // `"keep_f32": true` beside the kind keeps the layer in f32.
                let keep = value.as_object_mut().and_then(|o| o.remove("keep_f32"));
                match keep {
                    None | Some(serde_json::Value::Bool(false)) => {}
                    Some(serde_json::Value::Bool(true)) => keep_f32.push(index.to_string()),
                    Some(other) => {
                        return Err(err(format!("keep_f32 must be true or false, not {other}")));
                    }
                }
                // `"trainable": false` beside the kind freezes its parameters (resolved below).
                if let Some(t) = value.as_object_mut().and_then(|o| o.remove("trainable")) {
                    trainable.push((index, t));
                }
                let config = layer_from_json(value).map_err(err)?;
                Ok((index.to_string(), config))
            })
            .collect::<Result<Vec<_>>>()?;
        let mut spec = ModelSpec::build("json", &model.input, &layers)?;
        // Named by index, as the precision map names a JSON model's layers.
        spec.keep_f32 = keep_f32;
        let names: Vec<String> = spec.parameters().into_iter().map(|p| p.name).collect();
        for (index, value) in trainable {
            let frozen = super::frozen::json_trainable(index, &value, &names)
                .map_err(|e| Error::model(format!("json: layer {index}: {e}")))?;
            spec.frozen.extend(frozen);
        }
        super::frozen::check_some_trainable(&spec.name, &names, &spec.frozen)?;
        Ok(spec)
    }

    /// A family's model named `name` on sequences of `t` tokens (a language model; `t` at
    /// most its block size), with the family model kept so checkpoints describe it and
    /// `sample` rebuilds it.
    pub fn of_family(model: Arc<dyn FamilyModel>, name: &str, t: usize) -> Result<ModelSpec> {
        let (input, layers) = model.build(name, t)?;
        let mut spec = ModelSpec::build(name, &input, &layers)?;
        spec.frozen = model.frozen();
        spec.family = Some(model);
        Ok(spec)
    }

    /// This model with its attention layers run by `kernel`.
    pub fn with_attention(mut self, kernel: AttentionKernel) -> ModelSpec {
        self.attention = kernel;
        self
    }

    /// The description a checkpoint stores (metadata `model`) so the model can be rebuilt
    /// without its flags: its family's JSON form (`{"gpt": {GPTConfig's fields}}`, which
    /// [`ModelSpec::from_json`] reads back); `None` for other models.
    pub fn description(&self) -> Option<serde_json::Value> {
        self.family.as_ref().map(|f| f.description())
    }

    /// A language model's vocabulary and context, as its family says (`None`: a model of
    /// features, which cannot be sampled).
    pub fn tokens(&self) -> Option<family::Tokens> {
        self.family.as_ref().and_then(|f| f.tokens())
    }

    /// The name `name` (ours) has in the convention of the model's family (nanoGPT's for a
    /// GPT): what checkpoints are written under. Ours for a model of no family.
    pub fn export_name(&self, name: &str) -> Result<String> {
        match &self.family {
            Some(f) => f.names().export(name),
            None => Ok(name.to_string()),
        }
    }

    /// Our name for `name` of the family's convention (what checkpoints are read under); a
    /// name the table does not know stays as it is (and is then reported as unexpected).
    pub fn import_name(&self, name: &str) -> String {
        match &self.family {
            Some(f) => f.names().import(name).unwrap_or_else(|_| name.to_string()),
            None => name.to_string(),
        }
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

    /// Every buffer (persistent state that is not a parameter: running statistics,
    /// counters) in PyTorch `state_dict` order, with full names ([`super::buffers`]).
    pub fn buffers(&self) -> Vec<BufferDef> {
        self.layers.iter().flat_map(NamedLayer::buffers).collect()
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

    /// This model with the parameters `patterns` match frozen too (`--freeze`; `*` and `?`
    /// globs over full names, [`super::frozen`]): an unknown name lists the nearest.
    pub fn freeze(mut self, patterns: &[String]) -> Result<ModelSpec> {
        let names: Vec<String> = self.parameters().into_iter().map(|p| p.name).collect();
        super::frozen::freeze_matching(&names, patterns, &mut self.frozen)?;
        super::frozen::check_some_trainable(&self.name, &names, &self.frozen)?;
        Ok(self)
    }

    /// Parameter values that do not train ([`ModelSpec::frozen`]).
    pub fn num_frozen(&self) -> usize {
        let params = self.parameters().into_iter();
        params
            .filter(|p| self.frozen.contains(&p.name))
            .map(|p| p.numel())
            .sum()
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
    /// layer says (PyTorch's defaults: see [`Init`]). Deterministic per seed on every
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
        s.push_str(&format!("  parameters: {}", self.num_parameters()));
        let frozen = self.num_frozen();
        if frozen > 0 {
            s.push_str(&format!(
                " ({} trainable, {frozen} frozen)",
                self.num_parameters() - frozen
            ));
        }
        s.push('\n');
        s
    }
}
