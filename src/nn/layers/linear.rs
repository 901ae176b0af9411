//! `nn.Linear`: `y = x · Wᵀ + b` over the last dimension, weight `[out, in]`, on autocast's
//! low-precision list. Forward and backward are the three products of `ops::matmul`. The
//! weight may be another layer's (GPT's `lm_head` shares the token embedding).

use serde::Deserialize;

use super::recompute::Kept;
use super::{
    Backward, BackwardPlan, ForwardPlan, Init, Layer, LayerConfig, ParamDef, Resolved,
    default_weight_and_bias, positive, py_bool,
};
use crate::amp::policy::{CastRule, Op};
use crate::error::Result;
use crate::ops::matmul::{MatmulOpts, matmul};
use crate::ops::{Accumulate, reduce};
use crate::tensor::Tensor;

/// `{"linear": {"out": N, "bias": true, "init_std": null, "tied_to": null}}`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinearConfig {
    pub out: usize,
    #[serde(default = "yes")]
    pub bias: bool,
    /// Initialise the weight from N(0, std²) and the bias with zeros (nanoGPT) instead of
    /// PyTorch's default U(±1/√in).
    #[serde(default)]
    pub init_std: Option<f32>,
    /// Use the parameter with this full name as the weight (weight tying) instead of an own.
    #[serde(default)]
    pub tied_to: Option<String>,
}

impl LinearConfig {
    /// `nn.Linear(in, out, bias)` with PyTorch's default init.
    pub fn new(out: usize, bias: bool) -> Self {
        Self {
            out,
            bias,
            init_std: None,
            tied_to: None,
        }
    }
}

fn yes() -> bool {
    true
}

impl LayerConfig for LinearConfig {
    fn kind(&self) -> &'static str {
        "linear"
    }

    fn resolve(&self, input: &[usize]) -> std::result::Result<Resolved, String> {
        positive(self.out, "`out`")?;
        // Features, or a sequence of feature vectors; images need a flatten first.
        let (&in_features, outer) = match input {
            [f] | [_, f] => (f, &input[..input.len() - 1]),
            _ => {
                return Err(format!(
                    "linear takes [features] or [sequence, features] per sample, got {input:?} ({}-D); add {{\"flatten\": {{}}}} before it",
                    input.len()
                ));
            }
        };
        if let Some(std) = self.init_std
            && !(std.is_finite() && std >= 0.0)
        {
            return Err(format!("`init_std` must be finite and >= 0, got {std}"));
        }
        let layer = Linear {
            in_features,
            out_features: self.out,
            bias: self.bias,
            init_std: self.init_std,
            tied_to: self.tied_to.clone(),
        };
        let mut output = outer.to_vec();
        output.push(self.out);
        Ok(Resolved::new(layer, output))
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Linear {
    pub in_features: usize,
    pub out_features: usize,
    pub bias: bool,
    pub init_std: Option<f32>,
    pub tied_to: Option<String>,
}

impl Linear {
    /// The weight: its own, or the one it is tied to.
    fn weight(&self, f: &ForwardPlan<'_>) -> Result<Tensor> {
        match &self.tied_to {
            Some(name) => f.param_at(name),
            None => f.param("weight"),
        }
    }
}

impl Layer for Linear {
    fn kind(&self) -> &'static str {
        "linear"
    }

    fn repr(&self) -> String {
        format!(
            "Linear(in_features={}, out_features={}, bias={})",
            self.in_features,
            self.out_features,
            py_bool(self.bias)
        )
    }

    fn op(&self) -> Op {
        Op::new("Linear", CastRule::LowPrecision)
    }

    fn parameters(&self) -> Vec<ParamDef> {
        let shape = vec![self.out_features, self.in_features];
        let mut params = match self.init_std {
            None => default_weight_and_bias(shape, self.in_features, self.bias),
            Some(std) => {
                let mut p = vec![ParamDef::new("weight", shape, Init::Normal { std })];
                if self.bias {
                    p.push(ParamDef::new("bias", vec![self.out_features], Init::Zeros));
                }
                p
            }
        };
        if self.tied_to.is_some() {
            params.retain(|p| p.name != "weight");
        }
        params
    }

    fn tied_parameters(&self) -> Vec<(String, String)> {
        self.tied_to
            .iter()
            .map(|owner| ("weight".to_string(), owner.clone()))
            .collect()
    }

    /// `y = x · Wᵀ (+ b)`, every row of the last dimension.
    fn forward(&self, f: &mut ForwardPlan<'_>, x: Tensor) -> Result<(Tensor, Box<dyn Backward>)> {
        let w = self.weight(f)?;
        let b = self.bias.then(|| f.param("bias")).transpose()?;
        let rows = x.numel() / self.in_features;
        let mut out_shape = x.shape()[1..].to_vec();
        *out_shape.last_mut().expect("resolved as 1-D or 2-D") = self.out_features;
        let y = f.activation(&out_shape);
        let (x2, y2) = (
            x.reshape(&[rows, self.in_features])?,
            y.reshape(&[rows, self.out_features])?,
        );
        let opts = MatmulOpts {
            trans_b: true,
            bias: b.as_ref(),
            ..Default::default()
        };
        f.push(matmul(f.ctx(), &x2, &w, &y2, opts)?);
        let backward = LinearBackward {
            x: f.keep(x),
            w,
            bias: self.bias,
            tied_to: self.tied_to.clone(),
        };
        Ok((y, Box::new(backward)))
    }
}

/// What the gradient of a Linear needs: its input (or how to recompute it, an activation's
/// output: [`super::recompute`]) and weight (in the compute dtype).
struct LinearBackward {
    x: Kept,
    w: Tensor,
    bias: bool,
    tied_to: Option<String>,
}

impl Backward for LinearBackward {
    /// `dW += dyᵀ · x`, `db += Σ_rows dy`, `dx = dy · W`.
    fn backward(&self, b: &mut BackwardPlan<'_>, dy: Tensor) -> Result<Option<Tensor>> {
        let ctx = b.ctx();
        let like = self.x.like();
        let numel: usize = like.shape.iter().product();
        let (rows, inner, out) = (
            numel / self.w.shape()[1],
            self.w.shape()[1],
            self.w.shape()[0],
        );
        let dy = dy.reshape(&[rows, out])?;
        let input_grad = |b: &mut BackwardPlan<'_>| -> Result<Tensor> {
            let dx = b.input_grad_like(&like)?;
            let dx2 = dx.reshape(&[rows, inner])?;
            b.push(matmul(ctx, &dy, &self.w, &dx2, MatmulOpts::default())?);
            Ok(dx)
        };
        // A frozen weight's (and bias's) gradient is left out: nothing reads it, and its input
        // need not be made again.
        let trains_weight = match &self.tied_to {
            Some(name) => b.trains_at(name),
            None => b.trains("weight"),
        };
        // Computed in the forward's dtype and rounded to it (PyTorch's f16 weight gradient
        // under autocast), then added to the f32 gradient.
        let round_to = Some(self.w.dtype());
        let mut dx = None;
        if trains_weight {
            // An activation's output recomputed for the weight gradient: with the input
            // gradient made first, the kernel that recomputes it makes the activation's input
            // gradient too (one dispatch less; [`Kept::values_and_input_grad`]).
            let values = if b.wants_input_grad() && self.x.fuses_input_grad() {
                let made = input_grad(b)?;
                let values = self.x.values_and_input_grad(b, &made)?;
                dx = Some(made);
                values
            } else {
                self.x.values(b)?
            };
            let x = values.reshape(&[rows, inner])?;
            let dw = match &self.tied_to {
                Some(name) => b.param_grad_at(name)?,
                None => b.param_grad("weight")?,
            };
            let opts = MatmulOpts {
                trans_a: true,
                accumulate: true,
                round_to,
                ..Default::default()
            };
            b.push(matmul(ctx, &dy, &x, &dw, opts)?);
            // Nothing after the weight gradient reads the input.
            self.x.done(b, &values);
        }
        if self.bias && b.trains("bias") {
            let db = b.param_grad("bias")?;
            b.push(reduce::bias_grad(ctx, &dy, &db, Accumulate::Add, round_to)?);
        }
        if !b.wants_input_grad() {
            return Ok(None);
        }
        match dx {
            Some(dx) => {
                // The weight and bias gradients since only read the activation's values.
                b.hand_on();
                Ok(Some(dx))
            }
            None => input_grad(b).map(Some),
        }
    }
}
