//! Unary layers (activations): one layer type over [`crate::ops::unary`]'s table, so a row
//! there is a layer here, a JSON kind (`{"silu": {}}`) and a precision-map entry. Each runs in
//! its input's dtype (autocast lists none of them) and registers how its output is made, so a
//! Linear reading it recomputes it in the backward instead of keeping it, and may make this
//! layer's input gradient in the same kernel ([`super::recompute`]).

use serde::Deserialize;

use super::fusion::Fusable;
use super::{Backward, BackwardPlan, ForwardPlan, Layer, LayerConfig, Resolved};
use crate::amp::policy::{CastRule, Op};
use crate::error::Result;
use crate::ops::batchnorm::Activation;
use crate::ops::unary::{self, GELU, RELU, UnaryOp};
use crate::tensor::Tensor;

/// `{"relu": {}}`, `{"gelu": {}}`, ...: a row of the table, which takes no fields.
#[derive(Clone, Copy, Debug)]
pub struct UnaryConfig {
    pub op: &'static UnaryOp,
}

impl UnaryConfig {
    pub fn new(op: &'static UnaryOp) -> Self {
        Self { op }
    }

    /// The config of `op` from its JSON fields, which must be `{}`.
    pub fn parse(
        op: &'static UnaryOp,
        fields: serde_json::Value,
    ) -> serde_json::Result<Box<dyn LayerConfig>> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct NoFields {}
        serde_json::from_value::<NoFields>(fields)?;
        Ok(Box::new(Self::new(op)))
    }
}

impl LayerConfig for UnaryConfig {
    fn kind(&self) -> &'static str {
        self.op.name
    }

    fn resolve(&self, input: &[usize]) -> std::result::Result<Resolved, String> {
        Ok(Resolved::new(Unary { op: self.op }, input.to_vec()))
    }
}

/// A resolved unary layer: its output has its input's shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unary {
    pub op: &'static UnaryOp,
}

impl Layer for Unary {
    fn kind(&self) -> &'static str {
        self.op.name
    }

    fn repr(&self) -> String {
        self.op.repr.into()
    }

    fn op(&self) -> Op {
        Op::new(self.op.autocast, CastRule::Input)
    }

    /// `y = f(x)`, offered to the next layer ([`super::fusion`]: a max pool takes a ReLU).
    fn forward(&self, f: &mut ForwardPlan<'_>, x: Tensor) -> Result<(Tensor, Box<dyn Backward>)> {
        let y = f.activation(&x.shape()[1..]);
        // After a BatchNorm: one kernel for both (`fusion`). Not offered on then: a max pool
        // taking it would drop the normalisation.
        let after_norm = |what: &Fusable| matches!(what, Fusable::Normalised(n) if n.output().storage() == y.storage());
        let act = batchnorm_activation(self.op);
        let taken = act.and_then(|act| Some((act, f.take_fusable(&x, after_norm)?)));
        if let Some((act, Fusable::Normalised(n))) = taken {
            f.push(n.fused(f.ctx(), act, &y)?);
        } else {
            let what = Fusable::Unary {
                op: self.op,
                x: x.clone(),
            };
            f.push_fusable(unary::forward(f.ctx(), self.op, &x, &y)?, &y, what);
        }
        f.recomputable(&y, &x, self.op);
        let op = self.op;
        Ok((y, Box::new(UnaryBackward { op, x })))
    }
}

struct UnaryBackward {
    op: &'static UnaryOp,
    x: Tensor,
}

impl Backward for UnaryBackward {
    /// `dx = dy · f'(x)`, or the `dx` made already: by the Linear reading the output, in
    /// the kernel that recomputed it ([`super::recompute`]), or by the max pool that ran
    /// this kernel ([`super::fusion`]).
    fn backward(&self, b: &mut BackwardPlan<'_>, dy: Tensor) -> Result<Option<Tensor>> {
        let made = b.take_input_grad(self.op, &self.x, &dy)?;
        if !b.wants_input_grad() {
            if let Some(dx) = made {
                b.release(&dx);
            }
            return Ok(None);
        }
        if let Some(dx) = made {
            return Ok(Some(dx));
        }
        let dx = b.input_grad(&self.x)?;
        b.push(unary::backward(b.ctx(), self.op, &self.x, &dy, &dx)?);
        Ok(Some(dx))
    }
}

/// The BatchNorm kernels' form of `op`, where they have one (ReLU, exact GELU).
fn batchnorm_activation(op: &'static UnaryOp) -> Option<Activation> {
    if std::ptr::eq(op, &RELU) {
        Some(Activation::Relu)
    } else if std::ptr::eq(op, &GELU) {
        Some(Activation::Gelu)
    } else {
        None
    }
}
