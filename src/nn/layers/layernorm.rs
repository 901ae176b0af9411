//! `nn.LayerNorm(C, bias=...)` over the last dimension, eps 1e-5. On autocast's fp32 list:
//! its input arrives cast to f32 and statistics are f32. Its output is f32, or, when the
//! layer after it computes in a low dtype (a Linear under amp-f16), that dtype: the kernel
//! rounds its f32 result once as the cast autocast would insert does (the same bits), and
//! the cast kernel and its backward's are gone. In a residual branch its input gradient is
//! added straight onto the skip path's when that is f32 (the residual's accumulate goes).
//! Fusions ([`super::fusion`]): a residual's add before it is done in its forward kernel,
//! and its backward kernel also writes the low-dtype copy of its input gradient that the
//! residual before it would cast.
//!
//! `{"rmsnorm": {"eps": 1e-5}}` is transformers' `LlamaRMSNorm` on the same kernels (their RMS
//! variant, the same fusions): `weight · (x · rsqrt(mean(x²) + eps)).to(x.dtype)`, no mean,
//! no bias, f32 statistics; a config's `rms_norm_eps`.

use serde::Deserialize;

use super::fusion::Fusable;
use super::{
    Backward, BackwardPlan, ForwardPlan, Init, Layer, LayerConfig, ParamDef, Resolved, positive,
    py_bool,
};
use crate::amp::policy::{CastRule, Op};
use crate::error::Result;
use crate::ops::layernorm;
use crate::tensor::{DType, Tensor};

/// PyTorch's default epsilon.
pub const EPS: f32 = 1e-5;

/// `{"layernorm": {"bias": true}}`: normalises the last dimension of its input.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayerNormConfig {
    #[serde(default = "yes")]
    pub bias: bool,
}

fn yes() -> bool {
    true
}

impl LayerConfig for LayerNormConfig {
    fn kind(&self) -> &'static str {
        "layernorm"
    }

    fn resolve(&self, input: &[usize]) -> std::result::Result<Resolved, String> {
        let features = normalised(input)?;
        let layer = LayerNorm {
            features,
            bias: self.bias,
            rms_eps: None,
        };
        Ok(Resolved::new(layer, input.to_vec()))
    }
}

/// The last dimension of `input`, which a norm normalises.
fn normalised(input: &[usize]) -> std::result::Result<usize, String> {
    let Some(&features) = input.last() else {
        return Err("a norm needs at least a 1-D input per sample".into());
    };
    positive(features, "the normalised dimension")?;
    Ok(features)
}

/// `{"rmsnorm": {"eps": 1e-5}}`: transformers' `LlamaRMSNorm(C, eps)` over the last dimension.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RmsNormConfig {
    #[serde(default = "rms_eps")]
    pub eps: f32,
}

/// `LlamaRMSNorm`'s default epsilon.
fn rms_eps() -> f32 {
    1e-6
}

impl LayerConfig for RmsNormConfig {
    fn kind(&self) -> &'static str {
        "rmsnorm"
    }

    fn resolve(&self, input: &[usize]) -> std::result::Result<Resolved, String> {
        let features = normalised(input)?;
        if !(self.eps.is_finite() && self.eps > 0.0) {
            return Err(format!("`eps` must be positive, got {}", self.eps));
        }
        let layer = LayerNorm {
            features,
            bias: false,
            rms_eps: Some(self.eps),
        };
        Ok(Resolved::new(layer, input.to_vec()))
    }
}

/// A LayerNorm, or an RMSNorm (`rms_eps`: its epsilon; no bias).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LayerNorm {
    pub features: usize,
    pub bias: bool,
    pub rms_eps: Option<f32>,
}

impl Layer for LayerNorm {
    fn kind(&self) -> &'static str {
        match self.rms_eps {
            None => "layernorm",
            Some(_) => "rmsnorm",
        }
    }

    fn repr(&self) -> String {
        match self.rms_eps {
            None => format!(
                "LayerNorm(({},), eps=1e-05, elementwise_affine=True, bias={})",
                self.features,
                py_bool(self.bias)
            ),
            Some(eps) => format!("LlamaRMSNorm(({},), eps={eps:e})", self.features),
        }
    }

    fn op(&self) -> Op {
        match self.rms_eps {
            None => Op::new("LayerNorm", CastRule::F32),
            // LlamaRMSNorm computes in f32 itself; autocast's fp32 list in effect.
            Some(_) => Op::new("RMSNorm", CastRule::F32),
        }
    }

    fn parameters(&self) -> Vec<ParamDef> {
        let mut params = vec![ParamDef::new("weight", vec![self.features], Init::Ones)];
        if self.bias {
            params.push(ParamDef::new("bias", vec![self.features], Init::Zeros));
        }
        params
    }

    /// `y = (x − mean) / sqrt(var + eps) · weight + bias`, per row of the last dimension.
    fn forward(&self, f: &mut ForwardPlan<'_>, x: Tensor) -> Result<(Tensor, Box<dyn Backward>)> {
        let rows = x.numel() / self.features;
        let x2 = x.reshape(&[rows, self.features])?;
        let weight = f.param("weight")?;
        let bias = self.bias.then(|| f.param("bias")).transpose()?;
        // The low dtype of the layer after it, written at once instead of by a cast.
        let out = f.consumer_dtype().unwrap_or(f.dtype());
        let y = f.activation_in(&x.shape()[1..], out);
        let stats =
            |what| Tensor::zeros_labelled(f.ctx(), what, &[rows], f.ctx().storage_for(DType::F32));
        let mean = (self.rms_eps)
            .is_none()
            .then(|| stats("activation (layernorm mean)"));
        let rstd = stats("activation (layernorm rstd)");
        let y2 = y.reshape(&[rows, self.features])?;
        // A residual's add that made x is done here, in the same kernel (the same bits).
        let add = |w: &Fusable| matches!(w, Fusable::Add { .. });
        let fused = f.take_fusable(&x, add);
        if let Some(eps) = self.rms_eps {
            let kernel = match fused {
                Some(Fusable::Add { a, b }) => layernorm::rmsnorm_forward_add(
                    f.ctx(),
                    (&a, &b),
                    &x2,
                    &weight,
                    (&y2, &rstd),
                    eps,
                )?,
                _ => layernorm::rmsnorm_forward(f.ctx(), &x2, &weight, &y2, &rstd, eps)?,
            };
            f.push(kernel);
            let backward = LayerNormBackward {
                x,
                weight,
                mean: None,
                rstd,
                bias: false,
                features: self.features,
            };
            return Ok((y, Box::new(backward)));
        }
        let mean = mean.expect("a LayerNorm's mean");
        let kernel = if let Some(Fusable::Add { a, b }) = fused {
            layernorm::layernorm_forward_add(
                f.ctx(),
                (&a, &b),
                &x2,
                &weight,
                bias.as_ref(),
                &y2,
                (&mean, &rstd),
                EPS,
            )?
        } else {
            layernorm::layernorm_forward(
                f.ctx(),
                &x2,
                &weight,
                bias.as_ref(),
                &y2,
                &mean,
                &rstd,
                EPS,
            )?
        };
        f.push(kernel);
        let backward = LayerNormBackward {
            x,
            weight,
            mean: Some(mean),
            rstd,
            bias: self.bias,
            features: self.features,
        };
        Ok((y, Box::new(backward)))
    }
}

struct LayerNormBackward {
    x: Tensor,
    weight: Tensor,
    /// None: an RMSNorm.
    mean: Option<Tensor>,
    rstd: Tensor,
    bias: bool,
    features: usize,
}

impl Backward for LayerNormBackward {
    /// `dweight += Σ dy·x̂`, `dbias += Σ dy`, `dx = rstd · (dy·w − mean(dy·w) − x̂ · mean(dy·w·x̂))`.
    fn backward(&self, b: &mut BackwardPlan<'_>, dy: Tensor) -> Result<Option<Tensor>> {
        let rows = self.x.numel() / self.features;
        let two_d = |t: &Tensor| t.reshape(&[rows, self.features]);
        let dweight = b.param_grad("weight")?;
        let dbias = self.bias.then(|| b.param_grad("bias")).transpose()?;
        // Onto a residual's f32 skip gradient when it offers one; else the kernel writes dx
        // whether or not it is needed: give it scratch from the arena.
        let (dx, accumulate) = match b.take_accumulation(&self.x, &dy) {
            Some(target) => (target, true),
            None => (b.input_grad(&self.x)?, false),
        };
        let (dy2, x2, dx2) = (two_d(&dy)?, two_d(&self.x)?, two_d(&dx)?);
        let (weight, mean, rstd) = (self.weight.clone(), self.mean.clone(), self.rstd.clone());
        let ctx = b.ctx();
        // Owns what it reads: the copy's kernel may be made after this backward returns.
        let kernels = move |low_copy: Option<&Tensor>| {
            let input_grad = layernorm::InputGrad {
                dx: &dx2,
                accumulate,
                low_copy,
            };
            match &mean {
                Some(mean) => layernorm::layernorm_backward_into(
                    ctx,
                    &dy2,
                    &x2,
                    &weight,
                    (mean, &rstd),
                    input_grad,
                    &dweight,
                    dbias.as_ref(),
                ),
                None => layernorm::rmsnorm_backward_into(
                    ctx,
                    (&dy2, &x2, &weight),
                    &rstd,
                    input_grad,
                    &dweight,
                ),
            }
        };
        let pushed = kernels(None)?;
        if pushed.is_empty() || !b.wants_input_grad() {
            for k in pushed {
                b.push(k);
            }
        } else {
            // A residual casting dx to its branch's dtype has this kernel write the copy.
            let features = self.features;
            let with_copy = move |low: &Tensor| {
                let low = low.reshape(&[rows, features])?;
                kernels(Some(&low))
            };
            b.push_offering_copy(pushed, &dx, with_copy);
        }
        if b.wants_input_grad() {
            Ok(Some(dx))
        } else {
            b.release(&dx);
            Ok(None)
        }
    }
}
