//! The two loops, as a layer sees them: [`ForwardPlan`] runs layers in order (inserting the
//! casts the precision policy asks for) and records each one's backward on a [`Tape`];
//! [`BackwardPlan`] replays a tape in reverse. The network runs its layers through them, and
//! so does a layer made of layers (a transformer block runs its sub-layers the same way).
//!
//! Everything here happens once, when a network is planned for a batch size; a training step
//! only replays the kernels.

use std::cell::{OnceCell, RefCell};
use std::sync::Arc;

use super::attention_kernel::AttentionKernel;
use super::named::NamedLayer;
use super::recipes::Recomputable;
use super::{Backward, Layer};
use crate::amp::policy::Policy;
use crate::error::Result;
use crate::gpu::{GpuBuffer, GpuContext, Kernel};
use crate::nn::buffers::{GradientArena, Scratch};
use crate::nn::params::ParamStore;
use crate::nn::probes::{ProbeLog, ProbePoint, ProbeTensor, own_parameters};
use crate::nn::transient::Activations;
use crate::ops::dropout::{DropoutKey, DropoutState};
use crate::ops::elementwise;
use crate::tensor::{DType, Storage, Tensor};

/// What the forward recorded for one op (a layer, or a cast autocast inserted).
struct Recorded {
    /// The full name of the layer, the prefix of its parameters' gradients.
    path: String,
    /// Whether any op recorded before this one (in the whole network) has parameters: only
    /// then does this op's input need a gradient (the data needs none).
    wants_input_grad: bool,
    backward: Box<dyn Backward>,
    /// A layer's precision-map row and its own parameters' full names (none for a cast):
    /// where the AMP doctor looks at its gradients ([`crate::nn::probes`]).
    layer: Option<(usize, Vec<String>)>,
}

/// The recorded backward of a run of layers, replayed by [`BackwardPlan::run_tape`].
#[derive(Default)]
pub struct Tape {
    ops: Vec<Recorded>,
}

/// The forward pass being planned.
pub struct ForwardPlan<'a> {
    ctx: &'a GpuContext,
    store: &'a ParamStore,
    policy: &'a Policy,
    /// Made when the first dropout layer asks for it.
    dropout: OnceCell<Arc<DropoutState>>,
    batch: usize,
    /// How attention layers run (the model's choice).
    attention: AttentionKernel,
    /// Where activations go (shared buffers for transient ones: [`super::transient`]).
    activations: RefCell<Activations>,
    /// Activations a backward may make again instead of keeping ([`super::recompute`]).
    recompute: RefCell<Recomputable>,
    kernels: Vec<Kernel>,
    /// The layer being planned: its full name and compute dtype.
    path: String,
    dtype: DType,
    /// Layers planned so far (the policy's per-layer index), and the current layer's index.
    layer_count: usize,
    index: usize,
    seen_params: bool,
    scratch: Scratch,
    /// Each layer's output, where it is complete.
    probes: ProbeLog,
}

/// `parent.name`, or `name` at the top (an empty name adds nothing: a residual).
pub(in crate::nn) fn join(parent: &str, name: &str) -> String {
    match (parent.is_empty(), name.is_empty()) {
        (_, true) => parent.to_string(),
        (true, false) => name.to_string(),
        (false, false) => format!("{parent}.{name}"),
    }
}

impl<'a> ForwardPlan<'a> {
    pub(in crate::nn) fn new(
        ctx: &'a GpuContext,
        store: &'a ParamStore,
        policy: &'a Policy,
        batch: usize,
        attention: AttentionKernel,
    ) -> Self {
        Self {
            ctx,
            store,
            policy,
            dropout: OnceCell::new(),
            batch,
            attention,
            activations: RefCell::new(Activations::Own),
            recompute: RefCell::default(),
            kernels: Vec::new(),
            path: String::new(),
            dtype: DType::F32,
            layer_count: 0,
            index: 0,
            seen_params: false,
            scratch: Scratch::default(),
            probes: ProbeLog::default(),
        }
    }

    /// The probe points noted so far: each layer's output ([`crate::nn::probes`]); and the
    /// layers planned (the loss's row in the precision map comes after them).
    pub(in crate::nn) fn take_probes(&mut self) -> (Vec<ProbePoint>, usize) {
        (self.probes.take(), self.layer_count)
    }

    /// Where the activations asked for from now on go.
    pub(in crate::nn) fn set_activations(&mut self, activations: Activations) {
        self.activations = RefCell::new(activations);
    }

    /// What [`Self::set_activations`] set, as the forward left it.
    pub(in crate::nn) fn take_activations(&mut self) -> Activations {
        self.activations.replace(Activations::Own)
    }

    /// The kernels, the scratch buffers for the backward to share, and the dropout state
    /// when a layer asked for it.
    pub(in crate::nn) fn finish(self) -> (Vec<Kernel>, Scratch, Option<Arc<DropoutState>>) {
        (self.kernels, self.scratch, self.dropout.into_inner())
    }

    /// Plan `layers` in order on `x`: for each, the cast the policy asks for, then its
    /// forward. Returns the output and the tape the backward replays.
    pub fn run_layers(&mut self, layers: &[NamedLayer], x: Tensor) -> Result<(Tensor, Tape)> {
        let mut tape = Tape::default();
        let mut x = x;
        for l in layers {
            x = self.run_layer(&l.name, &*l.layer, x, &mut tape)?;
        }
        Ok((x, tape))
    }

    /// Plan one layer named `name` (relative to the layer being planned) on `x`.
    pub fn run_layer(
        &mut self,
        name: &str,
        layer: &dyn Layer,
        x: Tensor,
        tape: &mut Tape,
    ) -> Result<Tensor> {
        let parent = (std::mem::take(&mut self.path), self.dtype, self.index);
        self.path = join(&parent.0, name);
        self.index = self.layer_count;
        self.layer_count += 1;
        self.dtype = self.policy.compute_dtype(self.index, layer.op(), x.dtype());
        let mut x = x;
        // Casts convert activations; ids (an embedding's tokens) go in as they are.
        if self.dtype != x.dtype() && x.dtype().is_float() {
            let wants = self.seen_params;
            let (y, backward) = cast_forward(self, x, self.dtype)?;
            self.record(tape, wants, backward, None);
            x = y;
        }
        // Whether this layer's input needs a gradient is decided by what came before it,
        // not by its own sub-layers (planned, and recorded, during its forward).
        let wants = self.seen_params;
        let has_params = !layer.parameters().is_empty() || !layer.tied_parameters().is_empty();
        let (y, backward) = layer.forward(self, x)?;
        let params = own_parameters(layer, &self.path);
        self.record(tape, wants, backward, Some((self.index, params)));
        let at = (self.index, ProbeTensor::Output);
        self.probes
            .note(self.ctx.is_dry(), at, self.kernels.len(), &y);
        self.seen_params |= has_params;
        (self.path, self.dtype, self.index) = parent;
        Ok(y)
    }

    fn record(
        &mut self,
        tape: &mut Tape,
        wants: bool,
        b: Box<dyn Backward>,
        layer: Option<(usize, Vec<String>)>,
    ) {
        tape.ops.push(Recorded {
            path: self.path.clone(),
            wants_input_grad: wants,
            backward: b,
            layer,
        });
    }

    pub fn ctx(&self) -> &'a GpuContext {
        self.ctx
    }

    pub(super) fn recomputable_mut(&self) -> std::cell::RefMut<'_, Recomputable> {
        self.recompute.borrow_mut()
    }

    /// How attention layers run in this plan.
    pub fn attention(&self) -> AttentionKernel {
        self.attention
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
        self.activation_in(per_sample, self.dtype)
    }

    /// A new activation `[batch, ...per_sample]` in `dtype`.
    pub fn activation_in(&self, per_sample: &[usize], dtype: DType) -> Tensor {
        self.named_activation("", per_sample, dtype)
    }

    /// [`Self::activation_in`] with `what` it is named in its buffer's label, after the
    /// layer (`activation transformer.h.0.attn (probabilities)`).
    pub fn named_activation(&self, what: &str, per_sample: &[usize], dtype: DType) -> Tensor {
        let label = match what {
            "" => format!("activation {}", self.path),
            what => format!("activation {} ({what})", self.path),
        };
        let storage = self.ctx.storage_for(dtype);
        let t = self.activations.borrow_mut().take(
            self.ctx,
            &label,
            &self.batched(per_sample),
            storage,
        );
        // A shared buffer handed out again holds another tensor now: forget its recipe.
        self.recompute.borrow_mut().forget(&t);
        t
    }

    /// `[batch, ...per_sample]` in `dtype`, in a buffer shared by every caller that asks for
    /// `label`: for intermediates dead before the next such layer runs (one attention
    /// layer's scores), sized for the largest request.
    pub fn scratch(
        &mut self,
        label: &'static str,
        per_sample: &[usize],
        dtype: DType,
    ) -> Result<Tensor> {
        let shape = self.batched(per_sample);
        self.scratch
            .tensor(self.ctx, label, &shape, self.ctx.storage_for(dtype))
    }

    /// The current layer's parameter `name` (`weight`, `bias`) in its compute dtype: the
    /// step's cast of the master weights, or the master weights themselves in f32.
    pub fn param(&self, name: &str) -> Result<Tensor> {
        self.param_at(&join(&self.path, name))
    }

    /// The parameter with full name `name` (a tied weight) in the current compute dtype.
    pub fn param_at(&self, name: &str) -> Result<Tensor> {
        self.store.compute_view(self.ctx, name, self.dtype)
    }

    /// Append a kernel to the forward pass.
    pub fn push(&mut self, kernel: Kernel) {
        self.kernels.push(kernel);
    }

    /// The words every dropout kernel reads (seed, micro-batch counter, training flag),
    /// written before each submit ([`crate::nn::Network::set_dropout`]).
    pub fn dropout_state(&self) -> Arc<DropoutState> {
        self.dropout
            .get_or_init(|| Arc::new(DropoutState::new(self.ctx)))
            .clone()
    }

    /// The current layer's dropout key: its mask depends on (seed, counter, this layer's
    /// index, element), the same under every precision.
    pub fn dropout_key(&self, p: f32) -> DropoutKey {
        DropoutKey {
            p,
            layer: self.index as u32,
        }
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
    /// The op being planned: its layer's full name, and whether its input needs a gradient.
    path: String,
    wants_input_grad: bool,
    /// Each layer's input and weight gradients, where they are complete.
    probes: ProbeLog,
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
            probes: ProbeLog::default(),
        }
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

    /// Replay `tape` in reverse from `dy`, the gradient of its output. Returns the gradient
    /// of its input, or `None` when it needs none (the replay then stops at the first op,
    /// from the end, whose input needs no gradient). `dy` stays the caller's: only the
    /// gradients made here are released, once used.
    pub fn run_tape(&mut self, tape: &Tape, dy: Tensor) -> Result<Option<Tensor>> {
        let outer = (std::mem::take(&mut self.path), self.wants_input_grad);
        // The gradient of the current op's output, and whether it was made here.
        let mut grad = dy;
        let mut owned = false;
        let mut reached_input = true;
        for r in tape.ops.iter().rev() {
            self.path.clone_from(&r.path);
            self.wants_input_grad = r.wants_input_grad;
            let dx = r.backward.backward(self, grad.clone())?;
            if let Some((layer, params)) = &r.layer {
                for name in params {
                    let g = self.store.grad_view(self.ctx, name)?;
                    self.probe(*layer, ProbeTensor::WeightGrad, &g);
                }
                if let Some(dx) = &dx {
                    self.probe(*layer, ProbeTensor::InputGrad, dx);
                }
            }
            // A view of the same buffer (a reshape) carries the gradient on.
            let same = dx.as_ref().is_some_and(|d| same_buffer(d, &grad));
            if owned && !same {
                self.grads.release(&grad);
            }
            match dx {
                Some(dx) => {
                    owned |= !same;
                    grad = dx;
                }
                None => {
                    reached_input = false;
                    break;
                }
            }
        }
        (self.path, self.wants_input_grad) = outer;
        Ok(reached_input.then_some(grad))
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
        self.input_grad_like(&Like::of(x))
    }

    /// [`Self::input_grad`] for a tensor the backward does not keep, only its shape.
    pub fn input_grad_like(&mut self, x: &Like) -> Result<Tensor> {
        self.grads.take(self.ctx, &x.shape, x.storage)
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

    /// Append a kernel to the backward pass.
    pub fn push(&mut self, kernel: Kernel) {
        self.kernels.push(kernel);
    }
}

/// Whether two tensors view the same buffer.
pub(crate) fn same_buffer(a: &Tensor, b: &Tensor) -> bool {
    Arc::ptr_eq(a.buffer(), b.buffer())
}

// ---- the cast autocast inserts ------------------------------------------------------------
// In front of a layer whose compute dtype differs from its input's (`f32 → f16` before a
// Linear under amp-f16, `f16 → f32` before the loss): not a JSON layer, the plan inserts it
// from the policy. Its backward casts the gradient back.

/// `y = x` converted to `dtype` (round to nearest even, overflow to ±inf).
fn cast_forward(
    f: &mut ForwardPlan<'_>,
    x: Tensor,
    dtype: DType,
) -> Result<(Tensor, Box<dyn Backward>)> {
    let y = f.named_activation("cast", &x.shape()[1..], dtype);
    f.push(elementwise::cast(f.ctx(), &x, &y)?);
    Ok((y, Box::new(CastBackward { x: Like::of(&x) })))
}

/// Only the input's shape and storage: a cast's backward needs no values.
struct CastBackward {
    x: Like,
}

impl Backward for CastBackward {
    /// `dx = dy` converted back to the input's dtype.
    fn backward(&self, b: &mut BackwardPlan<'_>, dy: Tensor) -> Result<Option<Tensor>> {
        if !b.wants_input_grad() {
            return Ok(None);
        }
        let dx = b.input_grad_like(&self.x)?;
        b.push(elementwise::cast(b.ctx(), &dy, &dx)?);
        Ok(Some(dx))
    }
}
