//! Fusions across layers. In the forward, a layer whose kernel the next layer can do in its
//! own offers it ([`ForwardPlan::push_fusable`]), and the next layer takes it back
//! ([`ForwardPlan::take_fusable`]) and pushes one kernel that does both, with the same
//! per-element arithmetic (the same bits). The offered kernel's output is still written
//! (by the fused kernel), so every layer output a probe or a backward reads exists; only
//! the dispatch, and one read of the output, are gone. An offer lapses with the next push:
//! only the kernel right before a layer can be absorbed by it.
//!
//! Today: a sum join's add (a residual's), absorbed by the LayerNorm that reads the sum (a
//! GPT's `ln_2`, the next block's `ln_1`, and `ln_f`); an activation's kernel, absorbed by the
//! max pool after a ReLU (whose backward then makes the ReLU's input gradient too, handed on
//! as a Linear's is: [`HandedOn`]); a BatchNorm's normalisation, absorbed by the ReLU or GELU
//! after it (a ResNet's `bn → relu`, airbench's `bn → gelu`: one kernel writes the BatchNorm's
//! output and the activation's, saving a dispatch and a read of the activation; the
//! backward is unchanged, the activation's kernel reading the BatchNorm's output as before).
//!
//! In the backward, kernels may offer to write a low-dtype copy of their output as well
//! ([`BackwardPlan::push_offering_copy`]), and a cast of that output takes it
//! ([`BackwardPlan::cast_grad`]): a LayerNorm's input gradient, which a residual casts to its
//! branch's f16 (the copy rounds as the cast kernel does: the same bits).
//!
//! This file holds what the plans keep; the methods are theirs (`plan/`, `backward.rs`).
//!
//! [`ForwardPlan::push_fusable`]: super::plan::ForwardPlan::push_fusable
//! [`ForwardPlan::take_fusable`]: super::plan::ForwardPlan::take_fusable
//! [`BackwardPlan::push_offering_copy`]: super::backward::BackwardPlan::push_offering_copy
//! [`BackwardPlan::cast_grad`]: super::backward::BackwardPlan::cast_grad

use std::sync::Arc;

use crate::error::Result;
use crate::gpu::Kernel;
use crate::ops::batchnorm::Normalise;
use crate::ops::unary::UnaryOp;
use crate::tensor::Tensor;

/// What an offered kernel computes.
#[derive(Clone, Debug)]
pub enum Fusable {
    /// `output = a + b` elementwise, in f32 whatever the storages (a residual's add).
    Add { a: Tensor, b: Tensor },
    /// `output = op(x)` elementwise, in `x`'s storage (an activation layer). A taker that
    /// also makes the activation's input gradient in its backward hands it on
    /// ([`BackwardPlan::give_input_grad`](super::backward::BackwardPlan::give_input_grad)).
    Unary { op: &'static UnaryOp, x: Tensor },
    /// A BatchNorm's normalisation (training or eval), which an activation after it can make
    /// again with itself fused ([`Normalise::fused`]).
    Normalised(Box<Normalise>),
}

/// The last kernel of a forward plan, offered with what it computes.
pub struct Offer {
    /// Its place in the plan's kernel list (the last one while the offer stands).
    pub(super) index: usize,
    pub(super) output: Tensor,
    pub(super) what: Fusable,
}

/// Makes an offer's kernels again, writing the copy into the tensor it is given too.
pub(super) type WithCopy<'a> = Box<dyn FnOnce(&Tensor) -> Result<Vec<Kernel>> + 'a>;

/// Pushed backward kernels that can be made again writing a copy of `output` too.
pub struct CopyOffer<'a> {
    /// Their place in the plan's kernel list (the last ones while the offer stands).
    pub(super) range: std::ops::Range<usize>,
    pub(super) output: Tensor,
    pub(super) with_copy: WithCopy<'a>,
}

/// An activation's input gradient made ahead of its backward: by the kernel that recomputed
/// its output ([`Kept::values_and_input_grad`](super::recompute::Kept::values_and_input_grad)),
/// or by the layer that ran its forward kernel (a max pool after a ReLU).
pub struct HandedOn {
    pub(super) op: &'static UnaryOp,
    /// The activation's input and the gradient of its output, as the kernel read them.
    pub(super) x: Tensor,
    pub(super) dy: Tensor,
    /// The input gradient it wrote.
    pub(super) dx: Tensor,
    /// The kernels pushed when the layer that made it was done (`BackwardPlan::hand_on`):
    /// while no other follows, `x` and `dy` still hold what the kernel read, so `dx` is what
    /// the activation's backward kernel would write then. `None` until then.
    pub(super) after: Option<usize>,
}

/// The same elements of the same buffer (a view, not a copy; a reshape between two layers
/// keeps them the same).
pub(super) fn same_view(a: &Tensor, b: &Tensor) -> bool {
    Arc::ptr_eq(a.buffer(), b.buffer())
        && a.byte_offset() == b.byte_offset()
        && a.numel() == b.numel()
        && a.storage() == b.storage()
}
