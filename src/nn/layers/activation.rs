//! Elementwise activations, in their input's dtype (autocast lists none of them): `nn.ReLU`,
//! `nn.GELU()` (exact, erf form) and `nn.GELU(approximate='tanh')`. Each registers how its
//! output is made, so a Linear reading it recomputes it in the backward instead of keeping
//! it ([`super::recompute`]).

use serde::Deserialize;

use super::{Backward, BackwardPlan, ForwardPlan, Layer, LayerConfig, Resolved};
use crate::amp::policy::{CastRule, Op};
use crate::error::Result;
use crate::ops::elementwise;
use crate::tensor::Tensor;

/// `{"relu": {}}`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReluConfig {}

impl LayerConfig for ReluConfig {
    fn kind(&self) -> &'static str {
        "relu"
    }

    fn resolve(&self, input: &[usize]) -> std::result::Result<Resolved, String> {
        Ok(Resolved::new(Relu, input.to_vec()))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Relu;

impl Layer for Relu {
    fn kind(&self) -> &'static str {
        "relu"
    }

    fn repr(&self) -> String {
        "ReLU()".into()
    }

    fn op(&self) -> Op {
        Op::new("Relu", CastRule::Input)
    }

    /// `y = max(x, 0)`.
    fn forward(&self, f: &mut ForwardPlan<'_>, x: Tensor) -> Result<(Tensor, Box<dyn Backward>)> {
        let y = f.activation(&x.shape()[1..]);
        f.push(elementwise::relu_forward(f.ctx(), &x, &y)?);
        f.recomputable(&y, &x, elementwise::relu_forward);
        Ok((y, Box::new(ReluBackward { x })))
    }
}

struct ReluBackward {
    x: Tensor,
}

impl Backward for ReluBackward {
    /// `dx = dy · [x > 0]`.
    fn backward(&self, b: &mut BackwardPlan<'_>, dy: Tensor) -> Result<Option<Tensor>> {
        if !b.wants_input_grad() {
            return Ok(None);
        }
        let dx = b.input_grad(&self.x)?;
        b.push(elementwise::relu_backward(b.ctx(), &self.x, &dy, &dx)?);
        Ok(Some(dx))
    }
}

/// `{"gelu": {}}`: `nn.GELU()`, the exact form `x · Φ(x)` (nanoGPT's current model).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GeluConfig {}

impl LayerConfig for GeluConfig {
    fn kind(&self) -> &'static str {
        "gelu"
    }

    fn resolve(&self, input: &[usize]) -> std::result::Result<Resolved, String> {
        Ok(Resolved::new(Gelu, input.to_vec()))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gelu;

impl Layer for Gelu {
    fn kind(&self) -> &'static str {
        "gelu"
    }

    fn repr(&self) -> String {
        "GELU(approximate='none')".into()
    }

    fn op(&self) -> Op {
        Op::new("Gelu", CastRule::Input)
    }

    /// `y = x/2 · (1 + erf(x/√2))`.
    fn forward(&self, f: &mut ForwardPlan<'_>, x: Tensor) -> Result<(Tensor, Box<dyn Backward>)> {
        let y = f.activation(&x.shape()[1..]);
        f.push(elementwise::gelu_erf_forward(f.ctx(), &x, &y)?);
        f.recomputable(&y, &x, elementwise::gelu_erf_forward);
        Ok((y, Box::new(GeluBackward { x })))
    }
}

struct GeluBackward {
    x: Tensor,
}

impl Backward for GeluBackward {
    /// `dx = dy · (Φ(x) + x φ(x))`.
    fn backward(&self, b: &mut BackwardPlan<'_>, dy: Tensor) -> Result<Option<Tensor>> {
        if !b.wants_input_grad() {
            return Ok(None);
        }
        let dx = b.input_grad(&self.x)?;
        b.push(elementwise::gelu_erf_backward(b.ctx(), &self.x, &dy, &dx)?);
        Ok(Some(dx))
    }
}

/// `{"gelu_tanh": {}}`: `nn.GELU(approximate='tanh')`, GPT-2's approximation.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GeluTanhConfig {}

impl LayerConfig for GeluTanhConfig {
    fn kind(&self) -> &'static str {
        "gelu_tanh"
    }

    fn resolve(&self, input: &[usize]) -> std::result::Result<Resolved, String> {
        Ok(Resolved::new(GeluTanh, input.to_vec()))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GeluTanh;

impl Layer for GeluTanh {
    fn kind(&self) -> &'static str {
        "gelu_tanh"
    }

    fn repr(&self) -> String {
        "GELU(approximate='tanh')".into()
    }

    fn op(&self) -> Op {
        Op::new("GeluTanh", CastRule::Input)
    }

    /// `y = x/2 · (1 + tanh(√(2/π) · (x + 0.044715 x³)))`.
    fn forward(&self, f: &mut ForwardPlan<'_>, x: Tensor) -> Result<(Tensor, Box<dyn Backward>)> {
        let y = f.activation(&x.shape()[1..]);
        f.push(elementwise::gelu_forward(f.ctx(), &x, &y)?);
        f.recomputable(&y, &x, elementwise::gelu_forward);
        Ok((y, Box::new(GeluTanhBackward { x })))
    }
}

struct GeluTanhBackward {
    x: Tensor,
}

impl Backward for GeluTanhBackward {
    /// `dx = dy · gelu_tanh'(x)`.
    fn backward(&self, b: &mut BackwardPlan<'_>, dy: Tensor) -> Result<Option<Tensor>> {
        if !b.wants_input_grad() {
            return Ok(None);
        }
        let dx = b.input_grad(&self.x)?;
        b.push(elementwise::gelu_backward(b.ctx(), &self.x, &dy, &dx)?);
        Ok(Some(dx))
    }
}
