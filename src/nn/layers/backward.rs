//! The backward as a layer sees it: [`BackwardPlan`], which replays what the forward recorded
//! in reverse ([`super::tape`] has the replay, [`super::plan`] the forward).

use std::cell::OnceCell;
use std::sync::Arc;

use super::fusion::{CopyOffer, HandedOn, same_view};
use crate::error::Result;
use crate::gpu::{GpuBuffer, GpuContext, Kernel};
use crate::nn::arena::{GradientArena, Scratch};
use crate::nn::params::ParamStore;
use crate::nn::probes::{ProbeLog, ProbePoint, ProbeTensor};
use crate::ops::dropout::DropoutState;
use crate::ops::elementwise;
use crate::tensor::{DType, Storage, Tensor};

/// `parent.name`, or `name` at the top (an empty name adds nothing: a residual).
pub(in crate::nn) fn join(parent: &str, name: &str) -> String {
    match (parent.is_empty(), name.is_empty()) {
        (_, true) => parent.to_string(),
        (true, false) => name.to_string(),
        (false, false) => format!("{parent}.{name}"),
    }
}

/// The shape and storage of a tensor, without its buffer: what a backward keeps of an input
/// whose values it does not need (so the buffer can be shared once the forward is done with
/// it, [`super::transient`]).
#[derive(Clone, Debug)]
pub struct Like {
    pub shape: Vec<usize>,
    pub storage: Storage,
}

impl Like {
    pub fn of(t: &Tensor) -> Like {
        Like {
            shape: t.shape().to_vec(),
            storage: t.storage(),
        }
    }

    pub fn dtype(&self) -> DType {
        self.storage.dtype()
    }
}

/// The backward pass being planned.
pub struct BackwardPlan<'a> {
    ctx: &'a GpuContext,
    store: &'a ParamStore,
    dropout: OnceCell<Arc<DropoutState>>,
    kernels: Vec<Kernel>,
    grads: GradientArena,
    scratch: Scratch,
    /// The op being planned: its layer's full name, whether its input needs a gradient, and
    /// whether its output's gradient may be written once read ([`Self::dy_writable`]).
    pub(super) path: String,
    pub(super) wants_input_grad: bool,
    pub(super) dy_writable: bool,
    /// Each layer's input and weight gradients, where they are complete.
    probes: ProbeLog,
    /// The gradient the op being planned may add its input gradient onto: what its input has
    /// from other readers so far (a fork, [`super::tape`]: [`Self::take_accumulation`]), and
    /// the buffer of the one taken.
    pub(super) offered: Option<Tensor>,
    pub(super) taken: Option<Arc<GpuBuffer>>,
    /// A kernel that can also write a low-dtype copy of its output ([`super::fusion`]).
    copy_offer: Option<CopyOffer<'a>>,
    /// An activation's input gradient made ahead of its backward ([`super::recompute`]).
    pub(super) handed_on: Option<HandedOn>,
}

impl<'a> BackwardPlan<'a> {
    pub(in crate::nn) fn new(
        ctx: &'a GpuContext,
        store: &'a ParamStore,
        dropout: Option<Arc<DropoutState>>,
        free: Vec<Arc<GpuBuffer>>,
        scratch: Scratch,
    ) -> Self {
        Self {
            ctx,
            store,
            dropout: dropout.map(OnceCell::from).unwrap_or_default(),
            kernels: Vec::new(),
            grads: GradientArena::new(free),
            scratch,
            path: String::new(),
            wants_input_grad: false,
            dy_writable: true,
            probes: ProbeLog::default(),
            offered: None,
            taken: None,
            copy_offer: None,
            handed_on: None,
        }
    }

    /// The gradient offered to the op being planned, when it has the shape and storage of
    /// its input `x` and is f32 (one rounding, as an accumulate), its input gradient is
    /// wanted, and it is not `dy` itself. Taking it is the op's promise to add onto it and
    /// return it as its input gradient.
    pub fn take_accumulation(&mut self, x: &Tensor, dy: &Tensor) -> Option<Tensor> {
        let fits = |t: &Tensor| {
            self.wants_input_grad
                && t.shape() == x.shape()
                && t.storage() == x.storage()
                && t.storage() == Storage::F32
                && !same_buffer(t, dy)
        };
        let target = self.offered.take().filter(fits)?;
        self.taken = Some(target.buffer().clone());
        Some(target)
    }

    /// The kernels, and the probe points noted: each layer's input and weight gradients
    /// ([`crate::nn::probes`]).
    pub(in crate::nn) fn into_kernels(mut self) -> (Vec<Kernel>, Vec<ProbePoint>) {
        (self.kernels, self.probes.take())
    }

    /// Note `values` as layer `layer`'s `tensor`, complete after the kernels so far.
    pub(in crate::nn) fn probe(&mut self, layer: usize, tensor: ProbeTensor, values: &Tensor) {
        let after = self.kernels.len();
        self.probes
            .note(self.ctx.is_dry(), (layer, tensor), after, values);
    }

    pub fn ctx(&self) -> &'a GpuContext {
        self.ctx
    }

    /// Whether the current layer must return its input's gradient.
    pub fn wants_input_grad(&self) -> bool {
        self.wants_input_grad
    }

    /// Whether the current layer's backward may write into its `dy` once its kernels have
    /// read it: no other gradient still to be read lives in that buffer. A composition's
    /// replay uses it to sum a skip path in place ([`super::tape`]).
    pub fn dy_writable(&self) -> bool {
        self.dy_writable
    }

    /// A gradient shaped (and stored) like `x`, in a buffer of the gradient arena. Every
    /// backward kernel overwrites the whole of it.
    pub fn input_grad(&mut self, x: &Tensor) -> Result<Tensor> {
        self.input_grad_like(&Like::of(x))
    }

    /// [`Self::input_grad`] for a tensor the backward does not keep, only its shape.
    pub fn input_grad_like(&mut self, x: &Like) -> Result<Tensor> {
        self.grads.take(self.ctx, &x.shape, x.storage, &[])
    }

    /// Push `kernels`, which write `output`; `with_copy(low)` makes them again (as many, in
    /// the same roles), writing `output` converted to `low`'s storage into `low` as well.
    /// The offer lapses with the next push ([`super::fusion`]).
    pub fn push_offering_copy(
        &mut self,
        kernels: Vec<Kernel>,
        output: &Tensor,
        with_copy: impl FnOnce(&Tensor) -> Result<Vec<Kernel>> + 'a,
    ) {
        let start = self.kernels.len();
        for k in kernels {
            self.push(k);
        }
        self.copy_offer = Some(CopyOffer {
            range: start..self.kernels.len(),
            output: output.clone(),
            with_copy: Box::new(with_copy),
        });
    }

    /// `from` converted to the storage of `like`, in a new gradient: written by the
    /// offering kernels when `from` is their output (in a buffer none of them binds), else
    /// by a cast kernel.
    pub fn cast_grad(&mut self, from: &Tensor, like: &Like) -> Result<Tensor> {
        if let Some(offer) = self.copy_offer.take()
            && offer.range.end == self.kernels.len()
            && same_view(&offer.output, from)
        {
            let bound: Vec<_> = self.kernels[offer.range.clone()]
                .iter()
                .flat_map(|k| k.buffers().iter().cloned())
                .collect();
            let to = self
                .grads
                .take(self.ctx, &like.shape, like.storage, &bound)?;
            let kernels = (offer.with_copy)(&to)?;
            if kernels.len() != offer.range.len() {
                return Err(crate::Error::Gpu(format!(
                    "a copy-writing remake made {} kernels in place of {}",
                    kernels.len(),
                    offer.range.len()
                )));
            }
            self.kernels.splice(offer.range, kernels);
            return Ok(to);
        }
        let to = self.input_grad_like(like)?;
        let kernel = elementwise::cast(self.ctx, from, &to)?;
        self.push(kernel);
        Ok(to)
    }

    /// Give back a gradient from [`Self::input_grad`] that is no longer needed.
    pub fn release(&mut self, grad: &Tensor) {
        self.grads.release(grad);
    }

    /// The f32 gradient of the current layer's parameter `name`, a view into the flat
    /// gradient buffer (kernels accumulate into it; the step clears it first).
    pub fn param_grad(&self, name: &str) -> Result<Tensor> {
        self.param_grad_at(&join(&self.path, name))
    }

    /// Whether the current layer's parameter `name` trains. A frozen one
    /// ([`crate::nn::frozen`]) sits past the trainable prefix, where nothing reads a
    /// gradient: a layer may leave out the kernel that would compute it.
    pub fn trains(&self, name: &str) -> bool {
        self.trains_at(&join(&self.path, name))
    }

    /// [`Self::trains`] of the parameter with full name `name` (a tied weight).
    pub fn trains_at(&self, name: &str) -> bool {
        let layout = &self.store.layout;
        layout.get(name).is_none_or(|e| layout.trains(e))
    }

    /// The f32 gradient of the parameter with full name `name` (a tied weight).
    pub fn param_grad_at(&self, name: &str) -> Result<Tensor> {
        self.store.grad_view(self.ctx, name)
    }

    /// See [`ForwardPlan::dropout_state`] (the same state).
    pub fn dropout_state(&self) -> Arc<DropoutState> {
        self.dropout
            .get_or_init(|| Arc::new(DropoutState::new(self.ctx)))
            .clone()
    }

    /// Like [`ForwardPlan::scratch`], shaped and stored like `like`.
    pub fn scratch(&mut self, label: &'static str, like: &Tensor) -> Result<Tensor> {
        self.scratch
            .tensor(self.ctx, label, like.shape(), like.storage())
    }

    /// How many kernels are planned so far.
    pub(super) fn kernel_count(&self) -> usize {
        self.kernels.len()
    }

    /// Append a kernel to the backward pass.
    pub fn push(&mut self, kernel: Kernel) {
        self.copy_offer = None;
        self.kernels.push(kernel);
    }
}

/// Whether two tensors view the same buffer.
pub(crate) fn same_buffer(a: &Tensor, b: &Tensor) -> bool {
    Arc::ptr_eq(a.buffer(), b.buffer())
}
