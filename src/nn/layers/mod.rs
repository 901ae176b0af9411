//! Layers: one file per layer family. Each file holds, for its layer, the JSON form, shape
//! and parameter resolution (PyTorch `state_dict` names and init), the autocast op, and the
//! forward and backward planning side by side (llm.c's `X_forward` / `X_backward` pairs).
//!
//! A layer passes through three stages, one type each:
//! 1. a [`LayerConfig`]: what the JSON or a preset says, before shapes are known
//!    (`{"linear": {"out": 10}}` is a `linear::LinearConfig`);
//! 2. a [`Layer`]: resolved against its per-sample input shape, with its sizes, parameters
//!    and PyTorch repr (`linear::Linear`);
//! 3. planned: [`Layer::forward`] records the forward kernels into a [`ForwardPlan`] and
//!    returns a [`Backward`] holding what the backward pass needs (`linear::LinearBackward`);
//!    its [`Backward::backward`] records the backward kernels into a [`BackwardPlan`].
//!
//! [`NamedLayer`] is a resolved layer with its name and shapes (`named.rs`, which also
//! resolves a run of configs); [`plan`] holds the two loops a layer is planned in and
//! [`precision`] the precision map's walk over the same layers.
//!
//! Adding a layer is a file here with those three types and one line in [`REGISTRY`]; a
//! new kernel it needs is its WGSL in `shaders/` and a dispatcher in `ops/`
//! (docs/architecture.md walks through an example). Adding an activation is one row of
//! [`crate::ops::unary`]'s table: [`unary::Unary`] is every row's layer.

pub mod attention;
pub mod attention_kernel;
pub mod backward;
pub mod conv2d;
pub mod dropout;
pub mod embedding;
pub mod flatten;
pub mod fusion;
pub mod layernorm;
pub mod linear;
mod named;
pub mod plan;
pub mod pool;
pub mod precision;
mod recipes;
pub mod recompute;
pub mod residual;
pub mod unary;

use std::fmt;
use std::sync::Arc;

use serde::de::DeserializeOwned;

use crate::amp::policy::Op;
use crate::error::Result;
use crate::tensor::{DType, Tensor};
pub use backward::{BackwardPlan, Like};
pub use named::{NamedLayer, ParamSpec};
pub(crate) use named::{layer_from_json, resolve_layers};
pub use plan::ForwardPlan;
pub use precision::PrecisionWalk;

/// Parses one layer's fields (the object under its key) into its config.
pub type ParseConfig = fn(serde_json::Value) -> serde_json::Result<Box<dyn LayerConfig>>;

/// The layer kinds the JSON model format knows by key, besides the unary ones
/// ([`layer_kinds`] lists both).
pub const REGISTRY: &[(&str, ParseConfig)] = &[
    ("linear", parse::<linear::LinearConfig>),
    ("conv2d", parse::<conv2d::Conv2dConfig>),
    ("maxpool2d", parse::<pool::MaxPool2dConfig>),
    ("flatten", parse::<flatten::FlattenConfig>),
    ("layernorm", parse::<layernorm::LayerNormConfig>),
    ("dropout", parse::<dropout::DropoutConfig>),
    ("attention", parse::<attention::AttentionConfig>),
    ("embedding", parse::<embedding::EmbeddingConfig>),
    ("residual", residual::parse),
];

/// Every layer kind the JSON model format knows: [`REGISTRY`]'s, then one per row of the
/// unary table ([`crate::ops::unary::UNARY_OPS`]).
pub fn layer_kinds() -> impl Iterator<Item = &'static str> {
    let unary = crate::ops::unary::UNARY_OPS.iter().map(|op| op.name);
    REGISTRY.iter().map(|(kind, _)| *kind).chain(unary)
}

/// The config of a JSON layer of kind `kind` from its fields, or `None` for an unknown kind.
pub(crate) fn parse_kind(
    kind: &str,
    fields: serde_json::Value,
) -> Option<serde_json::Result<Box<dyn LayerConfig>>> {
    if let Some((_, parse)) = REGISTRY.iter().find(|(k, _)| *k == kind) {
        return Some(parse(fields));
    }
    let op = crate::ops::unary::by_name(kind)?;
    Some(unary::UnaryConfig::parse(op, fields))
}

fn parse<C: LayerConfig + DeserializeOwned + 'static>(
    fields: serde_json::Value,
) -> serde_json::Result<Box<dyn LayerConfig>> {
    Ok(Box::new(serde_json::from_value::<C>(fields)?))
}

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

    /// The layers this one is made of (a residual's branch), for descriptions.
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

/// How a parameter starts out.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    /// U(-bound, bound): PyTorch's default for Linear and Conv2d (kaiming_uniform_ with
    /// a = √5 for weights, 1/sqrt(fan_in) for biases; see [`init_bound`]).
    Uniform {
        bound: f32,
    },
    /// N(0, std²): nanoGPT's init for Linear and Embedding weights.
    Normal {
        std: f32,
    },
    Zeros,
    Ones,
}

/// A parameter of a layer: name relative to the layer, shape, initialisation.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamDef {
    pub name: String,
    pub shape: Vec<usize>,
    pub init: Init,
}

impl ParamDef {
    pub fn new(name: &str, shape: Vec<usize>, init: Init) -> Self {
        Self {
            name: name.to_string(),
            shape,
            init,
        }
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// The same parameter seen from a containing layer: `weight` under `ln_1` is
    /// `ln_1.weight`.
    pub fn under(self, prefix: &str) -> Self {
        Self {
            name: format!("{prefix}.{}", self.name),
            ..self
        }
    }
}

/// The uniform bound of PyTorch's default init for `fan_in`, computed as PyTorch does:
/// kaiming_uniform_ with a = √5 for weights (gain · sqrt(3/fan_in)), 1/sqrt(fan_in) for
/// biases; the two agree.
pub fn init_bound(fan_in: usize) -> f32 {
    let a = 5f64.sqrt();
    let gain = (2.0 / (1.0 + a * a)).sqrt();
    (gain * (3.0 / fan_in as f64).sqrt()) as f32
}

/// PyTorch's default `weight` (and `bias`) of a layer whose weight has `fan_in` inputs per
/// output: both U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
pub fn default_weight_and_bias(
    weight_shape: Vec<usize>,
    fan_in: usize,
    bias: bool,
) -> Vec<ParamDef> {
    let init = Init::Uniform {
        bound: init_bound(fan_in),
    };
    let out = weight_shape[0];
    let mut params = vec![ParamDef::new("weight", weight_shape, init)];
    if bias {
        params.push(ParamDef::new("bias", vec![out], init));
    }
    params
}

/// Python's spelling of a bool, for reprs.
pub fn py_bool(b: bool) -> &'static str {
    if b { "True" } else { "False" }
}

/// Most elements one tensor (per-sample activation or parameter) may have: kernels index
/// with `u32`. Shapes beyond it, or whose sizes overflow, are description errors.
pub const MAX_ELEMENTS: u64 = u32::MAX as u64;

/// Product of `dims` when it is at most [`MAX_ELEMENTS`].
pub fn checked_numel(dims: &[usize]) -> Option<usize> {
    dims.iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n as u64 <= MAX_ELEMENTS)
}

/// The error for a shape over [`MAX_ELEMENTS`].
pub fn too_large(shape: &[usize]) -> String {
    format!("shape {shape:?} has more than {MAX_ELEMENTS} elements")
}

/// `Err` when a size that must be positive is zero.
pub fn positive(value: usize, what: &str) -> std::result::Result<(), String> {
    if value == 0 {
        Err(format!("{what} must be at least 1"))
    } else {
        Ok(())
    }
}

/// An image input `[channels, height, width]`, or an error naming `kind`.
pub fn chw(kind: &str, input: &[usize]) -> std::result::Result<(usize, usize, usize), String> {
    match *input {
        [c, h, w] => Ok((c, h, w)),
        _ => Err(format!(
            "{kind} needs a per-sample input [channels, height, width], got {input:?} ({}-D)",
            input.len()
        )),
    }
}
