//! A model planned on the GPU for one batch size and precision policy: every activation,
//! gradient and kernel made once (llm.c style). Two loops ([`super::layers::plan`]): the forward runs
//! the layers in order, inserting the casts the policy asks for; the backward replays what
//! the forward recorded, in reverse. Each layer's own planning is in its file under
//! [`super::layers`].

use std::sync::Arc;

use super::inference::{ForBackward, ForwardNetwork};
use super::layers::plan::Mode;
use super::layers::{BackwardPlan, PrecisionWalk};
use super::loss::{LossIo, LossKind};
use super::model::ModelSpec;
use super::params::ParamStore;
use super::probes::{ProbeTensor, Probes};
use super::transient::{Activations, SharingPlan};
use crate::amp::policy::{Policy, PrecisionRow};
use crate::error::Result;
use crate::gpu::{GpuBuffer, GpuContext, Kernel};
use crate::tensor::{DType, Tensor};

/// The planned network for one batch size.
pub struct Network {
    pub batch: usize,
    /// Batch inputs `[batch, ...sample_shape]`, in the dtype the first layer computes in
    /// (converted on the host as they are written), written before each step.
    pub input: Tensor,
    /// Class labels (u32 per sample) for cross-entropy.
    pub labels: Arc<GpuBuffer>,
    /// Regression targets, f32 `[batch, k]`, for MSE.
    pub targets: Option<Tensor>,
    /// Network output (logits or predictions) in the dtype the last layer computed in.
    pub output: Tensor,
    /// Mean loss of the last forward, f32 `[1]`.
    pub loss: Tensor,
    /// Correct predictions (u32), accumulated by [`Network::eval_kernels`].
    pub correct: Arc<GpuBuffer>,
    pub loss_kind: LossKind,
    /// The forward pass ([`ForwardNetwork`]); the dropout layers read its state.
    forward: ForwardNetwork,
    train_loss: Vec<Kernel>,
    eval_loss: Vec<Kernel>,
    count_correct: Option<Kernel>,
    backward: Vec<Kernel>,
    /// Where each layer's output and gradients are complete ([`super::probes`]).
    probes: Probes,
}

/// What a network is built from: the model, its parameters, the precision policy, the loss
/// with its target width, and the factor its gradient is seeded with besides the scale
/// (1 / accumulation steps, and ranks).
#[derive(Clone, Copy)]
pub struct NetworkInputs<'a> {
    pub spec: &'a ModelSpec,
    pub store: &'a ParamStore,
    pub policy: &'a Policy,
    pub loss: LossKind,
    /// Cross-entropy's label smoothing (PyTorch's `label_smoothing`; 0: none).
    pub label_smoothing: f32,
    pub target_dim: usize,
    pub grad_multiplier: f32,
}

impl Network {
    /// Plan forward, loss and backward of `inputs` for `batch` samples. `seed` is the
    /// GradScaler's state buffer (word 0 = scale): the loss gradient is seeded with it, times
    /// `grad_multiplier`.
    pub fn build(
        ctx: &GpuContext,
        inputs: &NetworkInputs<'_>,
        batch: usize,
        seed: &Arc<GpuBuffer>,
    ) -> Result<Self> {
        Self::plan(ctx, inputs, (batch, Mode::Train), seed)
    }

    /// An evaluation plan of `inputs` for `batch` samples ([`Mode::Eval`]: forward only, no
    /// dropout, buffers as committed; its activations share a few buffers, as none is kept
    /// for a backward): what validation, prediction and sampling run
    /// ([`Network::eval_kernels`]). It has no backward.
    pub fn build_eval(
        ctx: &GpuContext,
        inputs: &NetworkInputs<'_>,
        batch: usize,
        seed: &Arc<GpuBuffer>,
    ) -> Result<Self> {
        Self::plan(ctx, inputs, (batch, Mode::Eval), seed)
    }

    fn plan(
        ctx: &GpuContext,
        inputs: &NetworkInputs<'_>,
        (batch, mode): (usize, Mode),
        seed: &Arc<GpuBuffer>,
    ) -> Result<Self> {
        let NetworkInputs {
            spec,
            store,
            policy,
            loss: loss_kind,
            label_smoothing,
            target_dim,
            grad_multiplier,
        } = *inputs;
        // Which activations no backward keeps, and when each is used: a measuring forward on
        // a dry twin (nothing allocated). Those share buffers in the plan that counts.
        let recording = Activations::Record(Vec::new());
        let planned = (batch, mode);
        let (_, measured) =
            ForwardNetwork::plan(&ctx.dry_twin(), spec, store, policy, planned, recording)?;
        let activations = measured
            .sharing
            .map_or(Activations::Own, SharingPlan::into_activations);
        // Forward: each layer in order, cast first when the policy says so.
        let (forward, rest) = ForwardNetwork::plan(ctx, spec, store, policy, planned, activations)?;
        let ForBackward {
            tape,
            scratch,
            free,
            probes: (forward_probes, layers),
            ..
        } = rest;
        let output = forward.output.clone();

        // Loss: computed in f32 from the output's storage; the training kernel also writes
        // the seeded gradient of the output, where the backward starts.
        let loss = Tensor::zeros(ctx, &[1], DType::F32);
        // One label per loss row: per sample, or per token of a sequence output [B, T, V].
        let rows = match output.shape() {
            [_, _, .., classes] => output.numel() / (*classes).max(1),
            _ => batch,
        };
        let labels = ctx.alloc_storage("labels", 4 * rows as u64);

        // Backward: what the forward recorded, in reverse.
        let mut b = BackwardPlan::new(ctx, store, forward.dropout.clone(), free, scratch);
        let grad_output = b.input_grad(&output)?;
        // The loss's row follows the layers': its gradient starts the backward.
        b.probe(layers, ProbeTensor::InputGrad, &grad_output);
        if mode == Mode::Train {
            b.run_tape(&tape, grad_output.clone())?;
        }
        let (backward, backward_probes) = b.into_kernels();
        let correct = ctx.alloc_storage("correct", 4);
        let planned_loss = loss_kind.plan(
            ctx,
            LossIo {
                output: &output,
                labels: &labels,
                loss: &loss,
                correct: &correct,
                grad: (&grad_output, seed, grad_multiplier),
                target_dim,
                label_smoothing,
            },
        )?;

        Ok(Self {
            batch,
            input: forward.input.clone(),
            labels,
            targets: planned_loss.targets,
            output,
            loss,
            correct,
            loss_kind,
            forward,
            train_loss: planned_loss.train,
            eval_loss: planned_loss.eval,
            count_correct: planned_loss.count_correct,
            backward,
            probes: Probes {
                forward: forward_probes,
                backward: backward_probes,
            },
        })
    }

    /// Set what the next submission's dropout layers do: in training, drop with the masks of
    /// micro-batch `counter` of the stream `seed`; otherwise pass everything (evaluation).
    /// A queued write (no wait); nothing for a model without dropout.
    pub fn set_dropout(&self, ctx: &GpuContext, seed: u64, counter: u64, training: bool) {
        self.forward.set_dropout(ctx, seed, counter, training);
    }

    /// Forward, seeded loss gradient and backward of one (micro-)batch, in order.
    pub fn train_kernels(&self) -> impl Iterator<Item = &Kernel> {
        self.forward
            .kernels()
            .chain(&self.train_loss)
            .chain(&self.backward)
    }

    /// Forward and loss only, plus the correct-prediction count (validation).
    pub fn eval_kernels(&self) -> impl Iterator<Item = &Kernel> {
        self.forward
            .kernels()
            .chain(&self.eval_loss)
            .chain(self.count_correct.iter())
    }

    /// The evaluation loss and correct-prediction count only (after a forward).
    pub fn loss_and_count_kernels(&self) -> impl Iterator<Item = &Kernel> {
        self.eval_loss.iter().chain(self.count_correct.iter())
    }

    /// Forward only.
    pub fn forward_kernels(&self) -> impl Iterator<Item = &Kernel> {
        self.forward.kernels()
    }

    /// The training loss and its scale-seeded gradient (between forward and backward).
    pub fn loss_kernels(&self) -> impl Iterator<Item = &Kernel> {
        self.train_loss.iter()
    }

    /// Backward only (what [`Network::train_kernels`] runs after the loss).
    pub fn backward_kernels(&self) -> impl Iterator<Item = &Kernel> {
        self.backward.iter()
    }

    /// Where each layer's output (in [`Network::forward_kernels`]) and input and weight
    /// gradients (in [`Network::backward_kernels`]) are complete, for the AMP doctor.
    pub fn probes(&self) -> &Probes {
        &self.probes
    }
}

/// The precision map of a model trained with `loss` under `policy`: each layer's op, compute
/// dtype, output dtype and the casts autocast inserts (in the order the forward plans them,
/// the layers of a layer made of layers after it), then the loss.
pub fn precision_map(spec: &ModelSpec, policy: &Policy, loss: LossKind) -> Vec<PrecisionRow> {
    let mut walk = PrecisionWalk::new(policy);
    let out = walk.run_layers(&spec.layers, spec.input_dtype());
    walk.run_op("loss", loss.op(), out);
    walk.finish()
}
