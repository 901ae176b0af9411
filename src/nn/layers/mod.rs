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
//! [`NamedLayer`] is a resolved layer with its name and shapes (`layer.rs`, with the three
//! stages' traits, and which also resolves a run of configs); [`plan`] holds the forward a layer is planned in, [`tape`]
//! what it records and the backward's replay, and [`precision`] the precision map's walk
//! over the same layers. A composition (a residual, a fork, a transformer block) is a
//! [`graph::GraphConfig`]: layers wired with joins ([`join`]), its backward derived.
//!
//! Adding a layer is a file here with those three types and one line in [`REGISTRY`]
//! (`registry.rs`, which also parses JSON layers: a composition's parser is handed the layer
//! parser, so no layer file imports the registry that lists it); a
//! new kernel it needs is its WGSL in `shaders/` and a dispatcher in `ops/`
//! (docs/architecture.md walks through an example). Adding an activation is one row of
//! [`crate::ops::unary`]'s table: [`unary::Unary`] is every row's layer.

pub mod attention;
pub mod attention_kernel;
pub mod attention_rope;
pub mod avgpool;
pub mod backward;
pub mod batchnorm;
pub mod conv2d;
pub mod counter;
pub mod dropout;
pub mod embedding;
pub mod flatten;
pub mod fork;
pub mod fusion;
pub mod graph;
pub mod join;
mod layer;
pub mod layernorm;
pub mod linear;
pub mod plan;
pub mod pool;
pub mod precision;
mod recipes;
pub mod recompute;
mod registry;
pub mod residual;
pub mod scale;
pub mod tape;
pub mod unary;

pub use crate::nn::buffers::{BufferDType, BufferDef};
pub use crate::nn::params::{Init, ParamDef};
pub use backward::{BackwardPlan, Like};
pub(crate) use layer::resolve_layers;
pub use layer::{
    Backward, BackwardJoin, Layer, LayerConfig, NamedLayer, ParamSpec, ParseConfig, ParseLayer,
    Resolved,
};
pub use plan::ForwardPlan;
pub use precision::PrecisionWalk;
pub(crate) use registry::layer_from_json;
pub use registry::{REGISTRY, layer_kinds};

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
