//! How the forward made the activations a backward may recompute ([`super::recompute`]):
//! each registered output with the kernel and input that made it.

use std::sync::Arc;

use crate::error::Result;
use crate::gpu::{GpuContext, Kernel};
use crate::ops::unary::{self, UnaryOp};
use crate::tensor::{Storage, Tensor};

/// How an activation is made again: the unary op's forward on `input`.
#[derive(Clone)]
pub struct Recipe {
    input: Tensor,
    op: &'static UnaryOp,
}

impl Recipe {
    /// The kernel that writes the activation into `out`.
    pub fn kernel(&self, ctx: &GpuContext, out: &Tensor) -> Result<Kernel> {
        unary::forward(ctx, self.op, &self.input, out)
    }

    /// Whether [`Self::fused_kernel`] takes an activation stored as `output` (whose gradient
    /// then has that storage too) with its input's gradient in the input's storage.
    pub fn fuses(&self, output: Storage) -> bool {
        output == self.input.storage()
    }

    /// The kernel that writes the activation into `out` and, from `dy` (the activation's
    /// gradient), its input's gradient into `dx`: the op's forward and backward at once.
    pub fn fused_kernel(
        &self,
        ctx: &GpuContext,
        dy: &Tensor,
        out: &Tensor,
        dx: &Tensor,
    ) -> Result<Kernel> {
        unary::forward_backward(ctx, self.op, &self.input, dy, out, dx)
    }

    pub fn input(&self) -> &Tensor {
        &self.input
    }

    pub fn op(&self) -> &'static UnaryOp {
        self.op
    }
}

/// The activations of a forward that can be recomputed: each output with its recipe.
#[derive(Default)]
pub(super) struct Recomputable {
    outputs: Vec<(Tensor, Recipe)>,
}

impl Recomputable {
    pub(super) fn register(&mut self, output: &Tensor, input: &Tensor, op: &'static UnaryOp) {
        let recipe = Recipe {
            input: input.clone(),
            op,
        };
        self.outputs.push((output.clone(), recipe));
    }

    /// Forget what is registered in the buffer of `t`, a new activation: transient
    /// activations share buffers ([`crate::nn::transient`]), so an output registered there
    /// earlier is gone, and a tensor found there later is not it.
    pub(super) fn forget(&mut self, t: &Tensor) {
        self.outputs
            .retain(|(y, _)| !Arc::ptr_eq(y.buffer(), t.buffer()));
    }

    /// The recipe of `x` when it is exactly a registered output (same buffer, offset, shape
    /// and storage) that no activation has replaced since.
    pub(super) fn find(&self, x: &Tensor) -> Option<Recipe> {
        self.outputs
            .iter()
            .find(|(y, _)| {
                Arc::ptr_eq(y.buffer(), x.buffer())
                    && y.byte_offset() == x.byte_offset()
                    && y.shape() == x.shape()
                    && y.storage() == x.storage()
            })
            .map(|(_, recipe)| recipe.clone())
    }
}
