//! A model planned for the forward pass only (inference: text generation), for one batch
//! size: the same forward loop as [`super::Network`] (casts where the policy asks for them,
//! every layer's forward kernels), without a loss, a backward or gradient buffers.

use std::sync::Arc;

use super::model::ModelSpec;
use super::params::ParamStore;
use super::plan::ForwardPlan;
use crate::amp::policy::Policy;
use crate::error::{Error, Result};
use crate::gpu::{GpuContext, Kernel};
use crate::ops::dropout::DropoutState;
use crate::tensor::Tensor;

/// The planned forward pass of a model for `batch` samples.
pub struct ForwardNetwork {
    pub batch: usize,
    /// Inputs `[batch, ...sample_shape]` in the model's input dtype (u32 token ids for a GPT).
    pub input: Tensor,
    /// The output in the dtype the last layer computed in (a GPT's `[batch, T, vocab]` logits).
    pub output: Tensor,
    kernels: Vec<Kernel>,
    dropout: Option<Arc<DropoutState>>,
}

impl ForwardNetwork {
    /// Plan the forward pass of `spec` over the parameters in `store` under `policy`. Dropout
    /// layers start out off (evaluation); [`ForwardNetwork::set_dropout`] turns them on.
    pub fn build(
        ctx: &GpuContext,
        spec: &ModelSpec,
        store: &ParamStore,
        policy: &Policy,
        batch: usize,
    ) -> Result<Self> {
        if batch == 0 {
            return Err(Error::InvalidArgument(
                "batch size must be at least 1".into(),
            ));
        }
        let mut f = ForwardPlan::new(ctx, store, policy, batch);
        let input = Tensor::zeros(ctx, &f.batched(&spec.input_shape), spec.input_dtype());
        let (output, _tape) = f.run_layers(&spec.layers, input.clone())?;
        let (kernels, _scratch, dropout) = f.finish();
        let net = Self {
            batch,
            input,
            output,
            kernels,
            dropout,
        };
        net.set_dropout(ctx, 0, 0, false);
        Ok(net)
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
