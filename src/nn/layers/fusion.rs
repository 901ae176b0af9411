//! Fusions across layers in the forward: a layer whose kernel the next layer can do in its
//! own offers it ([`ForwardPlan::push_fusable`]), and the next layer takes it back
//! ([`ForwardPlan::take_fusable`]) and pushes one kernel that does both, with the same
//! per-element arithmetic (the same bits). The offered kernel's output is still written
//! (by the fused kernel), so every layer output a probe or a backward reads exists; only
//! the dispatch, and one read of the output, are gone. An offer lapses with the next push:
//! only the kernel right before a layer can be absorbed by it.
//!
//! Today: a residual's add, absorbed by the LayerNorm that reads the sum (a GPT's `ln_2`,
//! the next block's `ln_1`, and `ln_f`); an activation's kernel, absorbed by the max pool
//! after a ReLU (whose backward then makes the ReLU's input gradient too: [`GradHandoff`]).

use std::sync::{Arc, Mutex, PoisonError};

use super::backward::same_buffer;
use super::plan::ForwardPlan;
use crate::gpu::Kernel;
use crate::ops::unary::UnaryOp;
use crate::tensor::Tensor;

/// What an offered kernel computes.
#[derive(Clone, Debug)]
pub enum Fusable {
    /// `output = a + b` elementwise, in f32 whatever the storages (a residual's add).
    Add { a: Tensor, b: Tensor },
    /// `output = op(x)` elementwise, in `x`'s storage (an activation layer). A taker that
    /// also makes the activation's input gradient in its backward gives it to `grad`.
    Unary {
        op: &'static UnaryOp,
        x: Tensor,
        grad: GradHandoff,
    },
}

/// The input gradient of a layer whose kernel was taken, made by the taker's backward (which
/// runs first) and handed to the layer's backward, which then pushes nothing. Empty when the
/// taker did not make it: the layer then makes it itself.
#[derive(Clone, Debug, Default)]
pub struct GradHandoff(Arc<Mutex<Option<Tensor>>>);

impl GradHandoff {
    pub fn give(&self, grad: Tensor) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(grad);
    }

    pub fn take(&self) -> Option<Tensor> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

/// The last kernel of a forward plan, offered with what it computes.
pub struct Offer {
    /// Its place in the plan's kernel list (the last one while the offer stands).
    index: usize,
    output: Tensor,
    what: Fusable,
}

/// The same elements of the same buffer (a view, not a copy).
fn same_view(a: &Tensor, b: &Tensor) -> bool {
    same_buffer(a, b)
        && a.byte_offset() == b.byte_offset()
        && a.numel() == b.numel()
        && a.storage() == b.storage()
}

impl ForwardPlan<'_> {
    /// Push `kernel`, which writes `output` as `what` says, offering it to the next layer.
    pub fn push_fusable(&mut self, kernel: Kernel, output: &Tensor, what: Fusable) {
        self.push(kernel);
        let index = self.kernels_mut().len() - 1;
        self.offer = Some(Offer {
            index,
            output: output.clone(),
            what,
        });
    }

    /// When the last kernel pushed was offered and writes `input` (the taking layer's
    /// input), take it out of the plan and say what it computed: the caller pushes one
    /// kernel that computes it too, and writes `input` as it did.
    ///
    /// Only what `wanted` accepts is taken (an offer of another kind keeps its kernel, so a
    /// taker cannot drop a kernel it does not do).
    pub fn take_fusable(
        &mut self,
        input: &Tensor,
        wanted: impl FnOnce(&Fusable) -> bool,
    ) -> Option<Fusable> {
        let offer = self.offer.take()?;
        let last = self.kernels_mut().len().checked_sub(1)?;
        if offer.index != last || !same_view(&offer.output, input) || !wanted(&offer.what) {
            return None;
        }
        self.kernels_mut().pop();
        Some(offer.what)
    }
}
