//! What a layer's forward and backward planning can ask for: the device, the batch, its
//! compute dtype, activations, parameter and gradient views, and a place to put kernels.
//!
//! [`crate::nn::network`] owns both plans and walks the layers through them: forward in
//! order, backward in reverse. Everything here happens once, when a network is planned for a
//! batch size; a training step only replays the kernels.

use std::sync::Arc;

use super::params::ParamStore;
use crate::error::Result;
use crate::gpu::{GpuBuffer, GpuContext, Kernel};
use crate::tensor::{DType, Tensor};

/// The forward pass being planned, positioned at one layer.
pub struct ForwardPlan<'a> {
    ctx: &'a GpuContext,
    store: &'a ParamStore,
    batch: usize,
    kernels: Vec<Kernel>,
    /// The current layer's name (its parameters' prefix) and compute dtype.
    layer: String,
    dtype: DType,
}

impl<'a> ForwardPlan<'a> {
    pub(super) fn new(ctx: &'a GpuContext, store: &'a ParamStore, batch: usize) -> Self {
        Self {
            ctx,
            store,
            batch,
            kernels: Vec::new(),
            layer: String::new(),
            dtype: DType::F32,
        }
    }

    /// Position the plan at layer `name`, computing in `dtype`.
    pub(super) fn enter(&mut self, name: &str, dtype: DType) {
        self.layer.clear();
        self.layer.push_str(name);
        self.dtype = dtype;
    }

    pub(super) fn into_kernels(self) -> Vec<Kernel> {
        self.kernels
    }

    pub fn ctx(&self) -> &'a GpuContext {
        self.ctx
    }

    /// The dtype the current layer computes in (its input already has it).
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// `[batch, ...per_sample]`.
    pub fn batched(&self, per_sample: &[usize]) -> Vec<usize> {
        let mut shape = Vec::with_capacity(per_sample.len() + 1);
        shape.push(self.batch);
        shape.extend_from_slice(per_sample);
        shape
    }

    /// A new activation `[batch, ...per_sample]` in the current compute dtype.
    pub fn activation(&self, per_sample: &[usize]) -> Tensor {
        Tensor::zeros(self.ctx, &self.batched(per_sample), self.dtype)
    }

    /// The current layer's parameter `name` (`weight`, `bias`) in its compute dtype: the
    /// step's cast of the master weights, or the master weights themselves in f32.
    pub fn param(&self, name: &str) -> Result<Tensor> {
        self.store
            .compute_view(self.ctx, &format!("{}.{name}", self.layer), self.dtype)
    }

    /// Append a kernel to the forward pass.
    pub fn push(&mut self, kernel: Kernel) {
        self.kernels.push(kernel);
    }
}

/// The backward pass being planned, positioned at one layer.
pub struct BackwardPlan<'a> {
    ctx: &'a GpuContext,
    store: &'a ParamStore,
    kernels: Vec<Kernel>,
    grads: GradientArena,
    layer: String,
    wants_input_grad: bool,
}

impl<'a> BackwardPlan<'a> {
    pub(super) fn new(ctx: &'a GpuContext, store: &'a ParamStore, grads: GradientArena) -> Self {
        Self {
            ctx,
            store,
            kernels: Vec::new(),
            grads,
            layer: String::new(),
            wants_input_grad: false,
        }
    }

    /// Position the plan at layer `name`; `wants_input_grad` when something before it has
    /// parameters (the data itself needs no gradient).
    pub(super) fn enter(&mut self, name: &str, wants_input_grad: bool) {
        self.layer.clear();
        self.layer.push_str(name);
        self.wants_input_grad = wants_input_grad;
    }

    pub(super) fn grads(&mut self) -> &mut GradientArena {
        &mut self.grads
    }

    pub(super) fn into_kernels(self) -> Vec<Kernel> {
        self.kernels
    }

    pub fn ctx(&self) -> &'a GpuContext {
        self.ctx
    }

    /// Whether the current layer must return its input's gradient.
    pub fn wants_input_grad(&self) -> bool {
        self.wants_input_grad
    }

    /// A gradient shaped (and stored) like `x`, in a buffer of the gradient arena. Every
    /// backward kernel overwrites the whole of it.
    pub fn input_grad(&mut self, x: &Tensor) -> Result<Tensor> {
        self.grads.take(self.ctx, x)
    }

    /// The f32 gradient of the current layer's parameter `name`, a view into the flat
    /// gradient buffer (kernels accumulate into it; the step clears it first).
    pub fn param_grad(&self, name: &str) -> Result<Tensor> {
        self.store
            .grad_view(self.ctx, &format!("{}.{name}", self.layer))
    }

    /// Append a kernel to the backward pass.
    pub fn push(&mut self, kernel: Kernel) {
        self.kernels.push(kernel);
    }
}

/// Activation gradients live only from the backward kernel that writes one to the kernel
/// that reads it, so a few equal buffers, each as large as the largest gradient, serve a
/// whole backward pass: a layer's input gradient takes a free buffer and its output
/// gradient's buffer is released once the layer is planned. A chain of layers thus
/// ping-pongs between two buffers.
pub(super) struct GradientArena {
    bytes: u64,
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
