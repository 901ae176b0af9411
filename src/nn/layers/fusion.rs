//! Fusions across layers in the forward: a layer whose kernel the next layer can do in its
//! own offers it ([`ForwardPlan::push_fusable`]), and the next layer takes it back
//! ([`ForwardPlan::take_fusable`]) and pushes one kernel that does both, with the same
//! per-element arithmetic (the same bits). The offered kernel's output is still written
//! (by the fused kernel), so every layer output a probe or a backward reads exists; only
//! the dispatch, and one read of the output, are gone. An offer lapses with the next push:
//! only the kernel right before a layer can be absorbed by it.
//!
//! Today: a residual's add, absorbed by the LayerNorm that reads the sum (a GPT's `ln_2`,
//! the next block's `ln_1`, and `ln_f`).
//!
//! In the backward, a kernel may offer to write a low-dtype copy of its output as well
//! ([`BackwardPlan::push_offering_copy`]), and a cast of that output takes it
//! ([`BackwardPlan::cast_grad`]): a LayerNorm's input gradient, which a residual casts to its
//! branch's f16 (the copy rounds as the cast kernel does: the same bits).

use super::backward::{BackwardPlan, Like, same_buffer};
use super::plan::ForwardPlan;
use crate::error::Result;
use crate::gpu::Kernel;
use crate::ops::elementwise;
use crate::tensor::Tensor;

/// What an offered kernel computes.
#[derive(Clone, Debug)]
pub enum Fusable {
    /// `output = a + b` elementwise, in f32 whatever the storages (a residual's add).
    Add { a: Tensor, b: Tensor },
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
    pub fn take_fusable(&mut self, input: &Tensor) -> Option<Fusable> {
        let offer = self.offer.take()?;
        let last = self.kernels_mut().len().checked_sub(1)?;
        if offer.index != last || !same_view(&offer.output, input) {
            return None;
        }
        self.kernels_mut().pop();
        Some(offer.what)
    }
}

/// Makes an offer's kernels again, writing the copy into the tensor it is given too.
type WithCopy<'a> = Box<dyn FnOnce(&Tensor) -> Result<Vec<Kernel>> + 'a>;

/// Pushed backward kernels that can be made again writing a copy of `output` too.
pub struct CopyOffer<'a> {
    /// Their place in the plan's kernel list (the last ones while the offer stands).
    range: std::ops::Range<usize>,
    output: Tensor,
    with_copy: WithCopy<'a>,
}

impl<'a> BackwardPlan<'a> {
    /// Push `kernels`, which write `output`; `with_copy(low)` makes them again (as many, in
    /// the same roles), writing `output` converted to `low`'s storage into `low` as well.
    /// The offer lapses with the next push.
    pub fn push_offering_copy(
        &mut self,
        kernels: Vec<Kernel>,
        output: &Tensor,
        with_copy: impl FnOnce(&Tensor) -> Result<Vec<Kernel>> + 'a,
    ) {
        let start = self.kernels_mut().len();
        for k in kernels {
            self.push(k);
        }
        self.copy_offer = Some(CopyOffer {
            range: start..self.kernels_mut().len(),
            output: output.clone(),
            with_copy: Box::new(with_copy),
        });
    }

    /// `from` converted to the storage of `like`, in a new gradient: written by the
    /// offering kernels when `from` is their output (in a buffer none of them reads), else
    /// by a cast kernel.
    pub fn cast_grad(&mut self, from: &Tensor, like: &Like) -> Result<Tensor> {
        if let Some(offer) = self.copy_offer.take()
            && offer.range.end == self.kernels_mut().len()
            && same_view(&offer.output, from)
        {
            let bound: Vec<_> = self.kernels_mut()[offer.range.clone()]
                .iter()
                .flat_map(|k| k.buffers().iter().cloned())
                .collect();
            let to = self.input_grad_avoiding(like, &bound)?;
            let kernels = (offer.with_copy)(&to)?;
            if kernels.len() != offer.range.len() {
                return Err(crate::Error::Gpu(format!(
                    "a copy-writing remake made {} kernels in place of {}",
                    kernels.len(),
                    offer.range.len()
                )));
            }
            self.kernels_mut().splice(offer.range, kernels);
            return Ok(to);
        }
        let to = self.input_grad_like(like)?;
        let kernel = elementwise::cast(self.ctx(), from, &to)?;
        self.push(kernel);
        Ok(to)
    }
}
