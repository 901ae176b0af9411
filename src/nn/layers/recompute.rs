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
//!
//! The activation's own backward reads the same input. So when the reader's input gradient
//! (the activation's output gradient) is made first, one kernel makes both: the activation
//! again and its input's gradient ([`Kept::values_and_input_grad`], the op's forward and
//! backward expressions at once). That gradient is handed on, and the activation's backward
//! takes it instead of pushing its kernel ([`BackwardPlan::take_input_grad`]): a GPT block's
//! MLP backward is one dispatch shorter.

use super::backward::Like;
use super::fusion::{HandedOn, same_view};
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

    /// Whether [`Self::values_and_input_grad`] makes the input gradient too: the values are
    /// recomputed and their storages fit the fused kernel.
    pub fn fuses_input_grad(&self) -> bool {
        match self {
            Kept::Tensor(_) => false,
            Kept::Recomputed { like, recipe } => recipe.fuses(like.storage),
        }
    }

    /// [`Self::values`], and when [`Self::fuses_input_grad`], from the same kernel the
    /// gradient of the activation's input, from `dy` (the gradient of the values, already
    /// complete): handed on to the activation's backward ([`BackwardPlan::take_input_grad`])
    /// once the caller, done, says so ([`BackwardPlan::hand_on`]).
    pub fn values_and_input_grad(&self, b: &mut BackwardPlan<'_>, dy: &Tensor) -> Result<Tensor> {
        let Kept::Recomputed { like, recipe } = self else {
            return self.values(b);
        };
        if !self.fuses_input_grad() {
            return self.values(b);
        }
        let out = b.input_grad_like(like)?;
        let dx = b.input_grad(recipe.input())?;
        b.push(recipe.fused_kernel(b.ctx(), dy, &out, &dx)?);
        let made = HandedOn {
            op: recipe.op(),
            x: recipe.input().clone(),
            dy: dy.clone(),
            dx,
            after: None,
        };
        if let Some(stale) = b.handed_on.replace(made) {
            b.release(&stale.dx);
        }
        Ok(out)
    }

    /// Give back the buffer [`Self::values`] recomputed into (nothing for a kept tensor).
    /// Kernels pushed later may overwrite it: they run after the ones that read it.
    pub fn done(&self, b: &mut BackwardPlan<'_>, values: &Tensor) {
        if let Kept::Recomputed { .. } = self {
            b.release(values);
        }
    }
}

impl BackwardPlan<'_> {
    /// Hand on the input gradient [`Kept::values_and_input_grad`] made, if it did: the layer
    /// calling this is done, and none of its kernels since that one wrote the activation's
    /// input or output gradient (a Linear's weight and bias gradients only read them).
    pub fn hand_on(&mut self) {
        let now = self.kernel_count();
        if let Some(made) = &mut self.handed_on {
            made.after.get_or_insert(now);
        }
    }

    /// Hand on `dx`, the gradient of `x`, the input of activation `op` whose output's
    /// gradient is `dy`, made by the layer being planned (which ran the activation's
    /// forward kernel in its own, and is done: [`super::fusion`]). The activation's backward
    /// takes it ([`Self::take_input_grad`]) if it runs next on those same tensors.
    pub fn give_input_grad(&mut self, op: &'static UnaryOp, x: &Tensor, dy: &Tensor, dx: Tensor) {
        let made = HandedOn {
            op,
            x: x.clone(),
            dy: dy.clone(),
            dx,
            after: Some(self.kernel_count()),
        };
        if let Some(stale) = self.handed_on.replace(made) {
            self.release(&stale.dx);
        }
    }

    /// The gradient of `x`, the input of activation `op` whose output's gradient is `dy`,
    /// when a kernel made it from these same tensors (the one that recomputed the output, or
    /// the one of the layer that ran it) and no kernel has run since (so it is the bits
    /// `op`'s backward kernel would write), shaped
    /// like `x`. A gradient handed on that does not fit is given back.
    pub fn take_input_grad(
        &mut self,
        op: &'static UnaryOp,
        x: &Tensor,
        dy: &Tensor,
    ) -> Result<Option<Tensor>> {
        let Some(made) = self.handed_on.take() else {
            return Ok(None);
        };
        let fits = std::ptr::eq(made.op, op)
            && made.after == Some(self.kernel_count())
            && same_view(&made.x, x)
            && same_view(&made.dy, dy);
        if !fits {
            self.release(&made.dx);
            return Ok(None);
        }
        made.dx.reshape(x.shape()).map(Some)
    }
}
