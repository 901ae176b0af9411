//! The buffers a network plans once and shares: activation gradients (an arena that
//! generalises the ping-pong of a chain of layers) and labelled scratch space.

use std::sync::Arc;

use crate::error::Result;
use crate::gpu::{GpuBuffer, GpuContext};
use crate::tensor::{Storage, Tensor};

/// Activation gradients live only from the backward kernel that writes one to the kernel
/// that reads it, so a few buffers serve a whole backward pass: a layer's input gradient
/// takes a free buffer that holds it, and its output gradient's buffer is released once the
/// layer is planned. A chain of layers thus ping-pongs between two buffers.
pub(super) struct GradientArena {
    /// Each buffer and whether a live gradient holds it.
    buffers: Vec<(Arc<GpuBuffer>, bool)>,
}

impl GradientArena {
    /// An arena that starts with `free`: buffers nothing uses during the backward (those
    /// of transient activations, dead once the forward is done: [`super::transient`]).
    pub(super) fn new(free: Vec<Arc<GpuBuffer>>) -> Self {
        Self {
            buffers: free.into_iter().map(|b| (b, false)).collect(),
        }
    }

    /// A gradient of `shape` in `storage` in a free buffer: the smallest free one that holds
    /// it and is none of `avoid`, else a new one of its size.
    pub(super) fn take(
        &mut self,
        ctx: &GpuContext,
        shape: &[usize],
        storage: Storage,
        avoid: &[Arc<GpuBuffer>],
    ) -> Result<Tensor> {
        let need = Tensor::buffer_bytes(shape, storage);
        let fits = self
            .buffers
            .iter()
            .enumerate()
            .filter(|(_, (b, used))| !used && b.size() >= need)
            .filter(|(_, (b, _))| !avoid.iter().any(|a| Arc::ptr_eq(a, b)))
            .min_by_key(|(_, (b, _))| b.size())
            .map(|(i, _)| i);
        let index = match fits {
            Some(i) => i,
            None => {
                self.buffers
                    .push((ctx.alloc_storage("activation grads", need), false));
                self.buffers.len() - 1
            }
        };
        self.buffers[index].1 = true;
        Tensor::view(ctx, self.buffers[index].0.clone(), 0, shape, storage)
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
