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
//! resolves a run of configs); [`plan`] holds the forward a layer is planned in, [`tape`]
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
pub mod layernorm;
pub mod linear;
mod named;
pub mod plan;
pub mod pool;
pub mod precision;
mod recipes;
pub mod recompute;
mod registry;
pub mod residual;
pub mod tape;
pub mod unary;

use std::fmt;
use std::sync::Arc;

use crate::amp::policy::Op;
use crate::error::Result;
use crate::tensor::{DType, Tensor};
pub use backward::{BackwardPlan, Like};
pub(crate) use named::resolve_layers;
pub use named::{NamedLayer, ParamSpec};
pub use plan::ForwardPlan;
pub use precision::PrecisionWalk;
pub(crate) use registry::layer_from_json;
pub use registry::{REGISTRY, layer_kinds};

/// Parses one layer's fields (the object under its key) into its config; a composition's
/// parses its layers with the [`ParseLayer`] it is handed.
pub type ParseConfig =
    fn(serde_json::Value, &ParseLayer) -> serde_json::Result<Box<dyn LayerConfig>>;

/// Parses one JSON layer, `{"kind": {fields}}` ([`layer_from_json`]), or says why not.
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
/// concatenation: [`join`]): what its forward kept for the inputs' gradients.
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

/// The dtype a buffer is stored and saved in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BufferDType {
    F32,
    /// PyTorch's `torch.int64` (`num_batches_tracked`): two u32 words on the GPU, low first.
    I64,
}

impl BufferDType {
    /// u32 words per element.
    pub fn words(self) -> usize {
        match self {
            BufferDType::F32 => 1,
            BufferDType::I64 => 2,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            BufferDType::F32 => "float32",
            BufferDType::I64 => "int64",
        }
    }
}

/// A buffer of a layer: name relative to the layer, shape, dtype and initial values (every
/// element `init`: zeros, ones; or a table computed on the host), and whether checkpoints
/// save it (PyTorch's `persistent`).
#[derive(Clone, Debug, PartialEq)]
pub struct BufferDef {
    pub name: String,
    pub shape: Vec<usize>,
    pub dtype: BufferDType,
    pub init: f64,
    /// f32 initial values, one per element, instead of `init` everywhere.
    pub table: Option<Arc<[f32]>>,
    /// Saved in checkpoints and read back by `--resume`; `false`: PyTorch's
    /// `register_buffer(..., persistent=False)` (RoPE's table, which transformers recomputes
    /// from the config), made from its definition whenever the model is built.
    pub persistent: bool,
}

impl BufferDef {
    pub fn new(name: &str, shape: Vec<usize>, dtype: BufferDType, init: f64) -> Self {
        Self {
            name: name.to_string(),
            shape,
            dtype,
            init,
            table: None,
            persistent: true,
        }
    }

    /// A non-persistent f32 buffer holding `values` (`shape`'s elements).
    pub fn table(name: &str, shape: Vec<usize>, values: Arc<[f32]>) -> Self {
        Self {
            table: Some(values),
            persistent: false,
            ..Self::new(name, shape, BufferDType::F32, 0.0)
        }
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// The same buffer seen from a containing layer (`running_mean` under `bn1` is
    /// `bn1.running_mean`).
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
