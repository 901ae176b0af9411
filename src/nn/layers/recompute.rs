//! Activations the backward recomputes instead of keeping (llm.c's GELU recompute). An
//! elementwise activation's output is cheap to make again from its input, which its own
//! backward keeps anyway: a GPT's GELU output (`[B, T, 4C]`, the largest activation of a
//! block) is read by `mlp.c_proj`'s weight gradient, and keeping it for that alone costs as
//! much memory as `mlp.c_fc`'s output. So the activation registers how it is made
//! ([`ForwardPlan::recomputable`]), the layer that reads it keeps the recipe instead of the
//! tensor ([`ForwardPlan::keep`]), and its backward runs the same forward kernel on the same
//! input into a buffer of the gradient arena, given back once read ([`Kept::values`],
//! [`Kept::done`]). The same kernel on the same input gives the same bits, so gradients do
//! not change; the output, read by forward kernels only, becomes a transient activation
//! ([`crate::nn::transient`]) and shares a buffer.

use super::backward::Like;
use super::recipes::Recipe;
use super::{BackwardPlan, ForwardPlan};
use crate::error::Result;
use crate::ops::unary::UnaryOp;
use crate::tensor::Tensor;

/// What a backward keeps of a tensor whose values it reads: the tensor, or how to make it.
pub enum Kept {
    Tensor(Tensor),
    Recomputed { like: Like, recipe: Recipe },
}

impl ForwardPlan<'_> {
    /// Say that `output` is `op(input)`, so a layer reading it may keep the recipe.
    pub fn recomputable(&self, output: &Tensor, input: &Tensor, op: &'static UnaryOp) {
        self.recomputable_mut().register(output, input, op);
    }

    /// What a backward should keep of `x`, an input whose values it reads: how to make it
    /// again when it is a registered output no activation has replaced, else `x` itself.
    pub fn keep(&self, x: Tensor) -> Kept {
        let found = self.recomputable_mut().find(&x);
        match found {
            Some(recipe) => Kept::Recomputed {
                like: Like::of(&x),
                recipe,
            },
            None => Kept::Tensor(x),
        }
    }
}

impl Kept {
    /// The shape and storage of the tensor.
    pub fn like(&self) -> Like {
        match self {
            Kept::Tensor(t) => Like::of(t),
            Kept::Recomputed { like, .. } => like.clone(),
        }
    }

    /// The values: the tensor kept, or made again (its forward kernel pushed) in a buffer of
    /// the gradient arena. Pass the result to [`Self::done`] once the kernels that read it
    /// are pushed.
    pub fn values(&self, b: &mut BackwardPlan<'_>) -> Result<Tensor> {
        match self {
            Kept::Tensor(t) => Ok(t.clone()),
            Kept::Recomputed { like, recipe } => {
                let out = b.input_grad_like(like)?;
                b.push(recipe.kernel(b.ctx(), &out)?);
                Ok(out)
            }
        }
    }

    /// Give back the buffer [`Self::values`] recomputed into (nothing for a kept tensor).
    /// Kernels pushed later may overwrite it: they run after the ones that read it.
    pub fn done(&self, b: &mut BackwardPlan<'_>, values: &Tensor) {
        if let Kept::Recomputed { .. } = self {
            b.release(values);
        }
    }
}
