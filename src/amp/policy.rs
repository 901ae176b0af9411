//! The precision policy: which dtype each op computes in, as data.
//!
//! Follows PyTorch's CUDA autocast lists: matmul / linear / conv run in the low-precision
//! dtype; softmax, log-softmax, exp/log/pow, sums and means, norms and every loss run in f32;
//! ops not listed (ReLU, GELU, max-pool, flatten) run in their input dtype. Each layer says
//! which list its op is on ([`Op`]); any op or layer can be overridden. The policy describes
//! itself through [`Policy::precision_map`].

use std::collections::BTreeMap;

use crate::dtype::DType;
use crate::error::{Error, Result};

/// The user-facing precision modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Precision {
    /// Everything f32 (no scaler).
    #[serde(rename = "f32")]
    F32,
    /// Autocast to f16, f32 master weights, dynamic GradScaler.
    #[serde(rename = "amp-f16")]
    AmpF16,
    /// Autocast to bf16, f32 master weights, scaler off by default.
    #[serde(rename = "amp-bf16")]
    AmpBf16,
    /// Everything f16, no master weights (the failure mode the tutorials warn about).
    #[serde(rename = "f16")]
    F16,
}

impl Precision {
    pub const ALL: [Precision; 4] = [
        Precision::F32,
        Precision::AmpF16,
        Precision::AmpBf16,
        Precision::F16,
    ];

    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "f32" | "fp32" => Ok(Self::F32),
            "amp-f16" | "amp" | "amp-fp16" => Ok(Self::AmpF16),
            "amp-bf16" => Ok(Self::AmpBf16),
            "f16" | "fp16" => Ok(Self::F16),
            other => Err(Error::InvalidArgument(format!(
                "unknown precision `{other}` (expected f32, amp-f16, amp-bf16 or f16)"
            ))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::AmpF16 => "amp-f16",
            Self::AmpBf16 => "amp-bf16",
            Self::F16 => "f16",
        }
    }

    /// The dtype autocast-listed ops (matmul, conv) compute in.
    pub fn low_dtype(self) -> DType {
        match self {
            Self::F32 => DType::F32,
            Self::AmpF16 | Self::F16 => DType::F16,
            Self::AmpBf16 => DType::BF16,
        }
    }

    /// Which tensors [`Precision::low_dtype`] covers (for people: `webgpu-amp info`).
    pub fn low_dtype_scope(self) -> &'static str {
        match self {
            Self::F32 => "every tensor",
            Self::AmpF16 | Self::AmpBf16 => {
                "autocast activations and weight copies (f32 master weights)"
            }
            Self::F16 => "weights, activations and gradients (no master weights)",
        }
    }

    /// Whether parameters keep f32 master copies (false only for pure `f16`).
    pub fn master_weights(self) -> bool {
        self != Self::F16
    }

    /// Whether the GradScaler is on unless the user says otherwise (PyTorch: needed for f16,
    /// not for bf16 whose range is f32's).
    pub fn scaler_enabled_by_default(self) -> bool {
        self == Self::AmpF16
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Which of PyTorch's CUDA autocast lists an op is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CastRule {
    /// Run in the mode's low-precision dtype (autocast's "lower_precision_fp" list).
    LowPrecision,
    /// Run in f32 (autocast's "fp32" list).
    F32,
    /// Run in whatever dtype the input has (ops autocast does not list).
    Input,
    /// Run in the dtype of the op's weights (unlisted ops whose float input is a weight, like
    /// an embedding lookup): f32 master weights under AMP, f16 in pure f16.
    Weight,
}

/// An op as the precision policy sees it: its name (PyTorch's module or function name, as
/// the precision map shows it) and the autocast list it is on. Each layer declares its own
/// (`nn::layers`), so adding a layer never touches the policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct Op {
    pub name: &'static str,
    pub rule: CastRule,
}

impl Op {
    pub const fn new(name: &'static str, rule: CastRule) -> Self {
        Self { name, rule }
    }
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// The policy of one precision mode, with per-op and per-layer overrides.
#[derive(Clone, Debug)]
pub struct Policy {
    pub precision: Precision,
    /// Op name → autocast list, replacing the list the op declares.
    pub op_rules: BTreeMap<&'static str, CastRule>,
    /// Layer index → compute dtype, replacing the rule for that layer.
    pub overrides: BTreeMap<usize, DType>,
}

impl Policy {
    pub fn new(precision: Precision) -> Self {
        Self {
            precision,
            op_rules: BTreeMap::new(),
            overrides: BTreeMap::new(),
        }
    }

    /// Force layer `index` to compute in `dtype` (e.g. keep a sensitive layer in f32).
    pub fn with_override(mut self, index: usize, dtype: DType) -> Self {
        self.overrides.insert(index, dtype);
        self
    }

    /// Put every op named `name` on autocast list `rule`.
    pub fn with_op_rule(mut self, name: &'static str, rule: CastRule) -> Self {
        self.op_rules.insert(name, rule);
        self
    }

    /// The dtype layer `index` (an `op`) computes in, given its input dtype.
    pub fn compute_dtype(&self, index: usize, op: Op, input: DType) -> DType {
        if let Some(d) = self.overrides.get(&index) {
            return *d;
        }
        let rule = self.op_rules.get(op.name).copied().unwrap_or(op.rule);
        // Pure f16 mode: the whole model is f16 (model.half()); the fp32 list (losses,
        // reductions) still computes in f32.
        if self.precision == Precision::F16 {
            return match rule {
                CastRule::F32 => DType::F32,
                _ => DType::F16,
            };
        }
        match rule {
            CastRule::LowPrecision => self.precision.low_dtype(),
            CastRule::F32 | CastRule::Weight => DType::F32,
            CastRule::Input => input,
        }
    }

    /// The precision-map row of layer `index` (an `op` named `name`) on an `input`: its
    /// compute dtype and the casts autocast inserts; the output is the compute dtype (a
    /// layer made of layers corrects it).
    pub fn row(
        &self,
        index: usize,
        name: &str,
        op: Op,
        input: DType,
        has_params: bool,
    ) -> PrecisionRow {
        let compute = self.compute_dtype(index, op, input);
        let mut casts = Vec::new();
        if compute != input && input.is_float() {
            casts.push(format!("input {input}→{compute}"));
        }
        if has_params && compute != DType::F32 {
            if self.precision.master_weights() {
                casts.push(format!("weights f32→{compute} (once per step, cached)"));
            } else {
                casts.push(format!("weights stored in {compute} (no master copy)"));
            }
        }
        PrecisionRow {
            index,
            name: name.to_string(),
            op,
            input_dtype: input,
            compute_dtype: compute,
            output_dtype: compute,
            casts,
        }
    }
}

/// One row of the precision map: what a layer computes in and which casts autocast inserts.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct PrecisionRow {
    pub index: usize,
    pub name: String,
    pub op: Op,
    pub input_dtype: DType,
    pub compute_dtype: DType,
    pub output_dtype: DType,
    /// Human-readable casts inserted for this layer (inputs and weights).
    pub casts: Vec<String>,
}

impl Policy {
    /// Walk a chain of ops (name, op, has_params) from an f32 input and describe each.
    pub fn precision_map(&self, layers: &[(String, Op, bool)]) -> Vec<PrecisionRow> {
        let mut dtype = DType::F32;
        let mut rows = Vec::new();
        for (index, (name, op, has_params)) in layers.iter().enumerate() {
            let row = self.row(index, name, *op, dtype, *has_params);
            dtype = row.output_dtype;
            rows.push(row);
        }
        rows
    }
}
