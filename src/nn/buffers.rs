//! The buffers a network plans once and shares: activation gradients (an arena that
//! generalises the ping-pong of a chain of layers) and labelled scratch space.

use std::sync::Arc;

use crate::error::Result;
use crate::gpu::{GpuBuffer, GpuContext};
use crate::tensor::{Storage, Tensor};

/// Activation gradients live only from the backward kernel that writes one to the kernel
/// that reads it, so a few equal buffers, each as large as the largest gradient, serve a
/// whole backward pass: a layer's input gradient takes a free buffer, and its output
/// gradient's buffer is released once the layer is planned. A chain of layers thus
/// ping-pongs between two buffers.
pub(super) struct GradientArena {
    bytes: u64,
    /// Each buffer and whether a live gradient holds it.
    buffers: Vec<(Arc<GpuBuffer>, bool)>,
}

impl GradientArena {
    /// Buffers of `bytes` each (made when first needed).
    pub(super) fn new(bytes: u64) -> Self {
        Self {
            bytes,
            buffers: Vec::new(),
        }
    }

    /// A gradient shaped like `like` in a free buffer.
    pub(super) fn take(&mut self, ctx: &GpuContext, like: &Tensor) -> Result<Tensor> {
        let index = match self.buffers.iter().position(|(_, used)| !used) {
            Some(i) => i,
            None => {
                self.buffers
                    .push((ctx.alloc_storage("activation grads", self.bytes), false));
                self.buffers.len() - 1
            }
        };
        self.buffers[index].1 = true;
        Tensor::view(
            ctx,
            self.buffers[index].0.clone(),
            0,
            like.shape(),
            like.storage(),
        )
    }

    /// Free the buffer `grad` lives in (a no-op for tensors not from the arena).
    pub(super) fn release(&mut self, grad: &Tensor) {
        if let Some(slot) = self
            .buffers
            .iter_mut()
            .find(|(b, _)| Arc::ptr_eq(b, grad.buffer()))
        {
            slot.1 = false;
        }
    }
}

/// Buffers shared by label: see [`ForwardPlan::scratch`]. A request larger than the buffer
/// so far replaces it (earlier views keep the old one alive: correct, just not shared).
#[derive(Default)]
pub(super) struct Scratch {
    buffers: Vec<(&'static str, Arc<GpuBuffer>)>,
}

impl Scratch {
    pub(super) fn tensor(
        &mut self,
        ctx: &GpuContext,
        label: &'static str,
        shape: &[usize],
        storage: Storage,
    ) -> Result<Tensor> {
        let n: usize = shape.iter().product();
        let bytes = storage.bytes_for(n).next_multiple_of(4);
        let index = match self.buffers.iter().position(|(l, _)| *l == label) {
            Some(i) if self.buffers[i].1.size() >= bytes => i,
            found => {
                let buffer = ctx.alloc_storage(label, bytes);
                match found {
                    Some(i) => self.buffers[i].1 = buffer,
                    None => self.buffers.push((label, buffer)),
                }
                found.unwrap_or(self.buffers.len() - 1)
            }
        };
        Tensor::view(ctx, self.buffers[index].1.clone(), 0, shape, storage)
    }
}
