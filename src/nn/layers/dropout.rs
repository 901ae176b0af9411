//! `nn.Dropout(p)`: in training, each element is kept with probability 1 − p and scaled by
//! 1/(1 − p); in evaluation it is the identity. Masks come from a counter-based hash of
//! (seed, micro-batch counter, layer, element), so they are the same under every precision,
//! on every backend and after a resume. Runs in its input's dtype.

use serde::Deserialize;

use super::plan::Mode;
use super::{Backward, BackwardPlan, ForwardPlan, Layer, LayerConfig, Like, Resolved};
use crate::amp::policy::{CastRule, Op};
use crate::error::Result;
use crate::ops::dropout::{self, DropoutKey};
use crate::tensor::Tensor;

/// `{"dropout": {"p": 0.1}}`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DropoutConfig {
    pub p: f32,
}

impl LayerConfig for DropoutConfig {
    fn kind(&self) -> &'static str {
        "dropout"
    }

    fn resolve(&self, input: &[usize]) -> std::result::Result<Resolved, String> {
        check_p(self.p)?;
        Ok(Resolved::new(Dropout { p: self.p }, input.to_vec()))
    }
}

/// PyTorch's check: 0 ≤ p ≤ 1.
pub fn check_p(p: f32) -> std::result::Result<(), String> {
    if (0.0..=1.0).contains(&p) {
        Ok(())
    } else {
        Err(format!(
            "dropout probability has to be between 0 and 1, but got {p}"
        ))
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dropout {
    pub p: f32,
}

impl Layer for Dropout {
    fn kind(&self) -> &'static str {
        "dropout"
    }

    fn repr(&self) -> String {
        format!("Dropout(p={}, inplace=False)", self.p)
    }

    fn op(&self) -> Op {
        Op::new("Dropout", CastRule::Input)
    }

    /// `y = x · mask / (1 − p)` in training, `y = x` in evaluation. With p = 0, and in an
    /// evaluation plan, no kernel at all: the output is the input.
    fn forward(&self, f: &mut ForwardPlan<'_>, x: Tensor) -> Result<(Tensor, Box<dyn Backward>)> {
        if self.p == 0.0 || f.mode() == Mode::Eval {
            return Ok((x, Box::new(Identity)));
        }
        let key = f.dropout_key(self.p);
        let y = f.activation(&x.shape()[1..]);
        f.push(dropout::dropout(f.ctx(), &f.dropout_state(), key, &x, &y)?);
        let x = Like::of(&x);
        Ok((y, Box::new(DropoutBackward { x, key })))
    }
}

struct DropoutBackward {
    /// Only the input's shape: the mask is regenerated, the values are not needed.
    x: Like,
    key: DropoutKey,
}

impl Backward for DropoutBackward {
    /// `dx = dy · mask / (1 − p)`, the same mask regenerated.
    fn backward(&self, b: &mut BackwardPlan<'_>, dy: Tensor) -> Result<Option<Tensor>> {
        if !b.wants_input_grad() {
            return Ok(None);
        }
        let dx = b.input_grad_like(&self.x)?;
        b.push(dropout::dropout(
            b.ctx(),
            &b.dropout_state(),
            self.key,
            &dy,
            &dx,
        )?);
        Ok(Some(dx))
    }
}

/// The backward of an op whose output is its input.
pub struct Identity;

impl Backward for Identity {
    fn backward(&self, b: &mut BackwardPlan<'_>, dy: Tensor) -> Result<Option<Tensor>> {
        Ok(b.wants_input_grad().then_some(dy))
    }
}
