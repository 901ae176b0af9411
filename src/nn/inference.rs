//! A model planned for the forward pass only (inference: text generation), for one batch
//! size: the same forward loop as [`super::Network`] (casts where the policy asks for them,
//! every layer's forward kernels), without a loss, a backward or gradient buffers.

use std::sync::Arc;

use super::arena::Scratch;
use super::layers::ForwardPlan;
use super::layers::plan::Mode;
use super::layers::tape::Tape;
use super::model::ModelSpec;
use super::params::ParamStore;
use super::probes::ProbePoint;
use super::transient::{Activations, SharingPlan};
use crate::amp::policy::Policy;
use crate::error::{Error, Result};
use crate::gpu::{GpuBuffer, GpuContext, Kernel};
use crate::ops::dropout::DropoutState;
use crate::tensor::{DType, Tensor};

/// The planned forward pass of a model for `batch` samples.
pub struct ForwardNetwork {
    pub batch: usize,
    /// Inputs `[batch, ...sample_shape]`: u32 token ids (a GPT), or features in the dtype the
    /// first layer computes in ([`input_dtype`]).
    pub input: Tensor,
    /// The output in the dtype the last layer computed in (a GPT's `[batch, T, vocab]` logits).
    pub output: Tensor,
    kernels: Vec<Kernel>,
    pub(super) dropout: Option<Arc<DropoutState>>,
}

/// What planning the forward leaves for a backward ([`super::Network`]): the tape it replays,
/// the scratch buffers it may share, the buffers of its transient activations (dead once the
/// forward is done: the backward's gradients may use them), and after a recording forward
/// which activations may share buffers ([`super::transient`]).
pub(super) struct ForBackward {
    pub(super) tape: Tape,
    pub(super) scratch: Scratch,
    pub(super) free: Vec<Arc<GpuBuffer>>,
    pub(super) sharing: Option<SharingPlan>,
    /// Each layer's output where it is complete, and how many layers were planned.
    pub(super) probes: (Vec<ProbePoint>, usize),
}

impl ForwardNetwork {
    /// Plan the forward pass of `spec` over the parameters in `store` under `policy`, for
    /// evaluation ([`Mode::Eval`]: no dropout, buffers read as committed).
    pub fn build(
        ctx: &GpuContext,
        spec: &ModelSpec,
        store: &ParamStore,
        policy: &Policy,
        batch: usize,
    ) -> Result<Self> {
        let planned = (batch, Mode::Eval);
        let (net, _) = Self::plan(ctx, spec, store, policy, planned, Activations::Own)?;
        Ok(net)
    }

    /// The forward pass planned with its activations where `activations` says, and what a
    /// backward needs of it. Dropout layers read the state as it was made (evaluation)
    /// until written.
    pub(super) fn plan(
        ctx: &GpuContext,
        spec: &ModelSpec,
        store: &ParamStore,
        policy: &Policy,
        (batch, mode): (usize, Mode),
        activations: Activations,
    ) -> Result<(Self, ForBackward)> {
        if batch == 0 {
            return Err(Error::InvalidArgument(
                "batch size must be at least 1".into(),
            ));
        }
        let mut f = ForwardPlan::new(ctx, store, policy, (batch, mode), spec.attention);
        f.set_activations(activations);
        let input = Tensor::zeros_labelled(
            ctx,
            "input",
            &f.batched(&spec.input_shape),
            ctx.storage_for(input_dtype(spec, policy)),
        );
        let (output, mut tape) = f.run_layers(&spec.layers, input.clone())?;
        if mode == Mode::Eval {
            // No backward: what the tape holds is dead once the forward is done, so every
            // activation but the output shares buffers ([`super::transient`]).
            tape = Tape::empty(tape.input.clone());
        }
        let probes = f.take_probes();
        let activations = f.take_activations();
        let (kernels, scratch, dropout) = f.finish();
        // A recording forward measures, while the tape and the output still hold what the
        // backward and the loss need; a sharing one hands its shared buffers on.
        let (sharing, free) = match activations {
            recorded @ Activations::Record(_) => (recorded.measure(&kernels), Vec::new()),
            other => (None, other.into_shared_buffers()),
        };
        let net = Self {
            batch,
            input,
            output,
            kernels,
            dropout,
        };
        let rest = ForBackward {
            tape,
            scratch,
            free,
            sharing,
            probes,
        };
        Ok((net, rest))
    }

    /// What the dropout layers of the next submissions do (see
    /// [`super::Network::set_dropout`]); a queued write, nothing for a model without dropout.
    pub fn set_dropout(&self, ctx: &GpuContext, seed: u64, counter: u64, training: bool) {
        if let Some(d) = &self.dropout {
            d.write(ctx, seed, counter, training);
        }
    }

    /// The forward kernels, in order.
    pub fn kernels(&self) -> impl Iterator<Item = &Kernel> {
        self.kernels.iter()
    }
}

/// The dtype of a model's input buffer: token ids as they are; features in the dtype the
/// first layer computes in, so the forward casts nothing. The batch is converted on the host
/// as it is written (`Storage::encode`: round to nearest even, as the cast kernel rounds; the
/// same bits, `tests/elementwise.rs`).
fn input_dtype(spec: &ModelSpec, policy: &Policy) -> DType {
    let given = spec.input_dtype();
    match spec.layers.first() {
        // The first layer's index is 0, as `ForwardPlan::run_layer` numbers it.
        Some(first) if given.is_float() => policy.compute_dtype(0, first.layer.op(), given),
        _ => given,
    }
}
