//! A constant factor: `y = factor · x`, airbench's `Mul(scaling)` after its linear head
//! (`x * (1/9)`). No parameters; under autocast it runs in its input's dtype, as PyTorch's
//! `mul` by a Python float does (on no autocast list), and stores through the same f16 helper as
//! every op. Forward and backward are the same kernel (`dx = factor · dy`).

use serde::Deserialize;

use super::{Backward, BackwardPlan, ForwardPlan, Layer, LayerConfig, Like, Resolved};
use crate::amp::policy::{CastRule, Op};
use crate::error::Result;
use crate::ops::elementwise;
use crate::tensor::Tensor;

/// `{"scale": {"factor": 0.1111111}}`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScaleConfig {
    pub factor: f32,
}

impl LayerConfig for ScaleConfig {
    fn kind(&self) -> &'static str {
        "scale"
    }

    fn resolve(&self, input: &[usize]) -> std::result::Result<Resolved, String> {
        if !self.factor.is_finite() {
            return Err(format!("scale: factor must be finite, not {}", self.factor));
        }
        Ok(Resolved::new(
            Scale {
                factor: self.factor,
            },
            input.to_vec(),
        ))
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scale {
    pub factor: f32,
}

impl Layer for Scale {
    fn kind(&self) -> &'static str {
        "scale"
    }

    /// airbench's module prints as `Mul()`; the factor is said here so two models that differ
    /// in it do not print the same.
    fn repr(&self) -> String {
        format!("Mul(scale={})", self.factor)
    }

    fn op(&self) -> Op {
        Op::new("mul", CastRule::Input)
    }

    /// `y = factor · x`.
    fn forward(&self, f: &mut ForwardPlan<'_>, x: Tensor) -> Result<(Tensor, Box<dyn Backward>)> {
        let y = f.activation(&x.shape()[1..]);
        f.push(elementwise::scale(f.ctx(), &x, self.factor, &y)?);
        let backward = ScaleBackward {
            x: Like::of(&x),
            factor: self.factor,
        };
        Ok((y, Box::new(backward)))
    }
}

struct ScaleBackward {
    x: Like,
    factor: f32,
}

impl Backward for ScaleBackward {
    /// `dx = factor · dy`.
    fn backward(&self, b: &mut BackwardPlan<'_>, dy: Tensor) -> Result<Option<Tensor>> {
        if !b.wants_input_grad() {
            return Ok(None);
        }
        let dx = b.input_grad_like(&self.x)?;
        b.push(elementwise::scale(b.ctx(), &dy, self.factor, &dx)?);
        Ok(Some(dx))
    }
}
