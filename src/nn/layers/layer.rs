//! What a layer is: its three stages' traits ([`LayerConfig`], [`Layer`], [`Backward`]), a
//! layer with its name and shapes ([`NamedLayer`]), its parameters with full names
//! ([`ParamSpec`]), and the resolution of a run of layer configs (from Rust or JSON) against
//! an input shape: what a model and a composition ([`super::graph`]) are built from. The
//! traits and [`NamedLayer`] name each other (a composition's layers are named layers), so
//! they share this file; the plans they are planned in ([`ForwardPlan`], [`BackwardPlan`],
//! [`PrecisionWalk`]) know no layer, and the code that walks layers through a plan is
//! `plan/walk.rs` and [`PrecisionWalk::run_layers`] here.

use std::fmt;
use std::sync::Arc;

use super::backward::BackwardPlan;
use super::plan::ForwardPlan;
use super::precision::PrecisionWalk;
use super::{checked_numel, too_large};
use crate::amp::policy::Op;
use crate::error::Result;
use crate::nn::buffers::BufferDef;
use crate::nn::params::{Init, ParamDef};
use crate::tensor::{DType, Tensor};

/// Parses one layer's fields (the object under its key) into its config; a composition's
/// parses its layers with the [`ParseLayer`] it is handed.
pub type ParseConfig =
    fn(serde_json::Value, &ParseLayer) -> serde_json::Result<Box<dyn LayerConfig>>;

/// Parses one JSON layer, `{"kind": {fields}}` ([`super::layer_from_json`]), or says why not.
pub type ParseLayer =
    dyn Fn(serde_json::Value) -> std::result::Result<Box<dyn LayerConfig>, String>;

/// Stage 1: a layer as described, before its input shape is known.
pub trait LayerConfig: fmt::Debug + Send + Sync {
    /// The JSON key of this kind (`"linear"`).
    fn kind(&self) -> &'static str;

    /// Resolves against the per-sample input shape (no batch dimension). Errors are plain
    /// sentences; the model prefixes them with the layer's index and name.
    fn resolve(&self, input: &[usize]) -> std::result::Result<Resolved, String>;
}

/// A resolved layer and its per-sample output shape.
pub struct Resolved {
    pub layer: Arc<dyn Layer>,
    pub output_shape: Vec<usize>,
}

impl Resolved {
    pub fn new(layer: impl Layer + 'static, output_shape: Vec<usize>) -> Self {
        Self {
            layer: Arc::new(layer),
            output_shape,
        }
    }
}

/// Stage 2: a layer with its sizes known.
pub trait Layer: fmt::Debug + Send + Sync {
    /// The JSON key of this kind (`"linear"`).
    fn kind(&self) -> &'static str;

    /// PyTorch's `repr` of the module (`Linear(in_features=784, out_features=10, bias=True)`).
    fn repr(&self) -> String;

    /// The op as the precision policy sees it (name and autocast list).
    fn op(&self) -> Op;

    /// Parameters in `state_dict` order, named relative to the layer (`weight`, `bias`).
    fn parameters(&self) -> Vec<ParamDef> {
        Vec::new()
    }

    /// Buffers: persistent tensors that are not parameters (PyTorch's `register_buffer`:
    /// running statistics, counters, RoPE tables), in `state_dict` order, named relative to
    /// the layer. The optimizer, weight decay, clipping, the low-precision cast and the
    /// parameter count never see them; checkpoints save them in their own dtype
    /// ([`crate::nn::buffers`]).
    fn buffers(&self) -> Vec<BufferDef> {
        Vec::new()
    }

    /// Parameters this layer uses but another owns: (name relative to this layer, the
    /// owner's full name). GPT's `lm_head.weight` is `transformer.wte.weight`.
    fn tied_parameters(&self) -> Vec<(String, String)> {
        Vec::new()
    }

    /// The dtype this layer's input must have when it is not a float activation: an
    /// embedding takes token ids (u32). A model whose first layer says so takes ids.
    fn input_dtype(&self) -> Option<DType> {
        None
    }

    /// The layers this one is made of (a composition's), for descriptions.
    fn sublayers(&self) -> &[NamedLayer] {
        &[]
    }

    /// The dtype of the output for an input planned in `compute` (the dtype the policy
    /// chose for this layer), for the precision map. A layer made of layers walks them.
    fn walk_precision(&self, w: &mut PrecisionWalk<'_>, compute: DType) -> DType {
        let _ = w;
        compute
    }

    /// Stage 3: plan the forward pass of `x` (already in the dtype the policy chose, which
    /// [`ForwardPlan::dtype`] tells). Returns the output and the layer's backward.
    fn forward(&self, f: &mut ForwardPlan<'_>, x: Tensor) -> Result<(Tensor, Box<dyn Backward>)>;
}

/// Stage 3, backward: what a planned forward kept for its gradient.
pub trait Backward {
    /// Plan the backward pass: `dy` is the gradient of the layer's output. Parameter
    /// gradients accumulate into the flat gradient buffer; the input's gradient is returned
    /// when [`BackwardPlan::wants_input_grad`] (else `None`).
    fn backward(&self, b: &mut BackwardPlan<'_>, dy: Tensor) -> Result<Option<Tensor>>;
}

/// The backward of a join, an op of several inputs (a composition's sum, product or
/// concatenation: [`super::join`]): what its forward kept for the inputs' gradients.
pub trait BackwardJoin {
    /// The gradient of each input (`None` where `wants` says none is needed) from `dy`, the
    /// gradient of the output.
    fn backward(
        &self,
        b: &mut BackwardPlan<'_>,
        dy: &Tensor,
        wants: &[bool],
    ) -> Result<Vec<Option<Tensor>>>;
}

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

impl NamedLayer {
    /// This layer's buffers in `state_dict` order, with full names.
    pub fn buffers(&self) -> Vec<BufferDef> {
        self.layer
            .buffers()
            .into_iter()
            .map(|b| b.under(&self.name))
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

/// Resolves named layer configs in order from `input`; errors name the layer's index and
/// name (`layer 3 `conv2` (conv2d): ...`).
pub(crate) fn resolve_layers(
    input: &[usize],
    layers: &[(String, Box<dyn LayerConfig>)],
) -> std::result::Result<Vec<NamedLayer>, String> {
    let mut shape = input.to_vec();
    let mut resolved = Vec::with_capacity(layers.len());
    for (index, (layer_name, config)) in layers.iter().enumerate() {
        let layer = resolve_one(&shape, layer_name, config.as_ref(), Some(index))?;
        shape.clone_from(&layer.output_shape);
        resolved.push(layer);
    }
    Ok(resolved)
}

/// Resolves one named layer config on `input`; errors name the layer (and its index in a
/// list, when it is in one).
pub(crate) fn resolve_one(
    input: &[usize],
    layer_name: &str,
    config: &dyn LayerConfig,
    index: Option<usize>,
) -> std::result::Result<NamedLayer, String> {
    let layer = config
        .resolve(input)
        .and_then(|r| check_sizes(&*r.layer, &r.output_shape).map(|()| r))
        .map_err(|msg| {
            let kind = config.kind();
            match index {
                Some(i) if layer_name == i.to_string() => format!("layer {i} ({kind}): {msg}"),
                Some(i) => format!("layer {i} `{layer_name}` ({kind}): {msg}"),
                None => format!("`{layer_name}` ({kind}): {msg}"),
            }
        })?;
    Ok(NamedLayer {
        name: layer_name.to_string(),
        layer: layer.layer,
        input_shape: input.to_vec(),
        output_shape: layer.output_shape,
    })
}

/// Checks a resolved layer's output and parameter sizes against [`super::MAX_ELEMENTS`].
fn check_sizes(layer: &dyn Layer, output: &[usize]) -> std::result::Result<(), String> {
    checked_numel(output).ok_or_else(|| too_large(output))?;
    for p in layer.parameters() {
        checked_numel(&p.shape).ok_or_else(|| format!("{} {}", p.name, too_large(&p.shape)))?;
    }
    Ok(())
}

/// The full names of `layer`'s own parameters under `path` (those of the layers it is made
/// of are theirs): the weight gradients its probe counts.
pub(crate) fn own_parameters(layer: &dyn Layer, path: &str) -> Vec<String> {
    let inner = |param: &str| {
        let prefix = |name: &str| format!("{name}.");
        layer
            .sublayers()
            .iter()
            .any(|l| param.starts_with(&prefix(&l.name)))
    };
    let full = |name: &str| match path {
        "" => name.to_string(),
        path => format!("{path}.{name}"),
    };
    let params = layer.parameters().into_iter().filter(|p| !inner(&p.name));
    params.map(|p| full(&p.name)).collect()
}

impl PrecisionWalk<'_> {
    /// The rows of `layers` run in order from an `x` input; returns the output dtype.
    pub fn run_layers(&mut self, layers: &[NamedLayer], x: DType) -> DType {
        layers
            .iter()
            .fold(x, |x, l| self.run_layer(&l.name, &*l.layer, x))
    }

    /// The row of one layer (and, for a layer made of layers, theirs after it).
    pub fn run_layer(&mut self, name: &str, layer: &dyn Layer, x: DType) -> DType {
        let has_params = !layer.parameters().is_empty() || !layer.tied_parameters().is_empty();
        let row = self.open_row(name, layer.op(), x, has_params);
        let out = layer.walk_precision(self, row.compute);
        self.close_row(row, out)
    }
}
