//! The two loops, as a layer sees them: [`ForwardPlan`] runs layers (inserting the casts the
//! precision policy asks for) and joins, and records each one's backward on a [`super::tape::Tape`];
//! [`BackwardPlan`] replays a tape in reverse ([`super::tape`]). The network runs its layers
//! through them, and so does a composition (a residual, a transformer block: [`super::graph`]).
//!
//! Everything here happens once, when a network is planned for a batch size; a training step
//! only replays the kernels. This file is what a layer plans with; `walk.rs` is the loop that
//! calls layers (which name this plan, so the plan names no layer).

mod walk;

use std::cell::{OnceCell, RefCell};
use std::sync::Arc;

use super::attention_kernel::AttentionKernel;
use super::backward::join;
use super::fusion::{Fusable, Offer, same_view};
use super::recipes::Recomputable;
use crate::amp::policy::Policy;
use crate::error::Result;
use crate::gpu::{GpuContext, Kernel};
use crate::nn::arena::Scratch;
use crate::nn::buffers::Copy;
use crate::nn::params::ParamStore;
use crate::nn::probes::{ProbeLog, ProbePoint};
use crate::nn::transient::Activations;
use crate::ops::dropout::{DropoutKey, DropoutState};
use crate::tensor::{DType, Tensor};

/// What a plan is made for, chosen when it is planned (PyTorch's `model.train()` /
/// `model.eval()`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Training: a backward follows, dropout drops, layers use and update batch statistics
    /// (in the buffers' working copy, committed by the step).
    #[default]
    Train,
    /// Evaluation (validation, sampling, inference): forward only, no dropout kernel at all,
    /// layers read their buffers' committed values and write none.
    Eval,
}

/// The forward pass being planned.
pub struct ForwardPlan<'a> {
    ctx: &'a GpuContext,
    store: &'a ParamStore,
    policy: &'a Policy,
    mode: Mode,
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
    /// Whether the current layer's input needs a gradient (a parameter went into it).
    input_requires_grad: bool,
    scratch: Scratch,
    /// Each layer's output, where it is complete.
    probes: ProbeLog,
    /// The dtype the next layer computes in, while a leaf layer is planned (see
    /// [`Self::consumer_dtype`]).
    consumer: Option<DType>,
    /// The last kernel, when the layer after it may absorb it ([`super::fusion`]).
    offer: Option<Offer>,
}

impl<'a> ForwardPlan<'a> {
    pub(in crate::nn) fn new(
        ctx: &'a GpuContext,
        store: &'a ParamStore,
        policy: &'a Policy,
        (batch, mode): (usize, Mode),
        attention: AttentionKernel,
    ) -> Self {
        Self {
            ctx,
            store,
            policy,
            mode,
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
            input_requires_grad: false,
            scratch: Scratch::default(),
            probes: ProbeLog::default(),
            consumer: None,
            offer: None,
        }
    }

    /// The dtype the layer after the current one computes in, when the current layer has no
    /// sub-layers and another follows it: a layer on autocast's fp32 list (LayerNorm) may
    /// write its output in that dtype, with the same rounding, instead of leaving it to a
    /// cast kernel the policy would insert (one dispatch fewer per such pair).
    pub fn consumer_dtype(&self) -> Option<DType> {
        self.consumer
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

    /// The dtype the layer `ahead` rows after the next one to plan would compute in, for an
    /// op `op` reading an f32 input.
    pub(super) fn compute_dtype_at(&self, ahead: usize, op: crate::amp::policy::Op) -> DType {
        self.policy
            .compute_dtype(self.layer_count + ahead, op, DType::F32)
    }

    /// Whether the current layer's input needs a gradient: a composition's own inputs do
    /// when its input does.
    pub(super) fn input_requires_grad(&self) -> bool {
        self.input_requires_grad
    }

    pub fn ctx(&self) -> &'a GpuContext {
        self.ctx
    }

    pub(super) fn recomputable_mut(&self) -> std::cell::RefMut<'_, Recomputable> {
        self.recompute.borrow_mut()
    }

    /// What this plan is for: training or evaluation.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The current layer's buffer `name` (`running_mean`, `num_batches_tracked`): in
    /// training its working copy, which the layer's kernels may update (the step commits
    /// it, or rolls it back when it skips); in evaluation the committed values, read only.
    /// f32 buffers are f32 `[shape]`, int64 ones u32 `[2 · numel]` (low word first). A view
    /// binds at the binding alignment: a layer's first buffer always can, the ones after it
    /// only where they happen to be aligned (else [`Self::buffer_location`]).
    pub fn buffer(&self, name: &str) -> Result<Tensor> {
        self.store
            .buffers
            .view(self.ctx, &join(&self.path, name), self.buffer_copy())
    }

    /// [`Self::buffer`]'s copy as raw words and the buffer's first word: for kernels that
    /// index the store themselves (a view's offset must sit at the binding alignment).
    pub fn buffer_location(&self, name: &str) -> Result<(Arc<crate::gpu::GpuBuffer>, usize)> {
        self.store
            .buffers
            .location(&join(&self.path, name), self.buffer_copy())
    }

    fn buffer_copy(&self) -> Copy {
        match self.mode {
            Mode::Train => Copy::Working,
            Mode::Eval => Copy::Committed,
        }
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

    /// The current layer's parameter `name` in f32 (the master weights) whatever the compute
    /// dtype: BatchNorm's affine parameters beside f16 activations, as cuDNN takes them.
    pub fn param_f32(&self, name: &str) -> Result<Tensor> {
        let full = join(&self.path, name);
        self.store.compute_view(self.ctx, &full, DType::F32)
    }

    /// The current layer's full name (`layer1.0.bn1`), for buffer labels.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The parameter with full name `name` (a tied weight) in the current compute dtype.
    pub fn param_at(&self, name: &str) -> Result<Tensor> {
        self.store.compute_view(self.ctx, name, self.dtype)
    }

    /// Append a kernel to the forward pass (a kernel offered for fusion before it stays).
    pub fn push(&mut self, kernel: Kernel) {
        self.offer = None;
        self.kernels.push(kernel);
    }

    /// Push `kernel`, which writes `output` as `what` says, offering it to the next layer
    /// ([`super::fusion`]).
    pub fn push_fusable(&mut self, kernel: Kernel, output: &Tensor, what: Fusable) {
        self.push(kernel);
        self.offer = Some(Offer {
            index: self.kernels.len() - 1,
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
        let last = self.kernels.len().checked_sub(1)?;
        if offer.index != last || !same_view(&offer.output, input) || !wanted(&offer.what) {
            return None;
        }
        self.kernels.pop();
        Some(offer.what)
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

// ---- the cast autocast inserts ------------------------------------------------------------
