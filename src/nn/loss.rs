//! The training losses: which one a model trains with, and its kernels. Losses are on
//! autocast's fp32 list: they read the model's output in whatever storage it has and reduce
//! in f32; the training variant also writes the output's gradient, seeded with the
//! GradScaler's scale.

use std::sync::Arc;

use crate::amp::policy::{CastRule, Op};
use crate::data::Labels;
use crate::error::{Error, Result};
use crate::gpu::{GpuBuffer, GpuContext, Kernel};
use crate::ops::loss;
use crate::tensor::{DType, Tensor};

/// Which loss the model trains with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LossKind {
    CrossEntropy,
    Mse,
}

impl LossKind {
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "cross-entropy" | "ce" => Ok(Self::CrossEntropy),
            "mse" => Ok(Self::Mse),
            other => Err(Error::InvalidArgument(format!(
                "unknown loss `{other}` (expected mse or cross-entropy)"
            ))),
        }
    }

    /// The loss PyTorch users reach for with these labels: cross-entropy for class labels,
    /// MSE for float targets.
    pub fn default_for(labels: &Labels) -> Self {
        if labels.is_classification() {
            Self::CrossEntropy
        } else {
            Self::Mse
        }
    }

    /// The loss as the precision policy sees it (autocast's fp32 list).
    pub fn op(self) -> Op {
        match self {
            Self::CrossEntropy => Op::new("CrossEntropyLoss", CastRule::F32),
            Self::Mse => Op::new("MseLoss", CastRule::F32),
        }
    }
}

/// The planned loss of one network.
pub(super) struct LossPlan {
    /// Regression targets, f32 like the output (MSE only).
    pub targets: Option<Tensor>,
    /// Loss and seeded output gradient (training).
    pub train: Vec<Kernel>,
    /// Loss only (validation).
    pub eval: Vec<Kernel>,
    /// Correct predictions (cross-entropy only).
    pub count_correct: Option<Kernel>,
}

/// What the loss reads and writes.
pub(super) struct LossIo<'a> {
    pub output: &'a Tensor,
    pub labels: &'a Arc<GpuBuffer>,
    pub loss: &'a Tensor,
    pub correct: &'a Arc<GpuBuffer>,
    /// The gradient of the output, the GradScaler's state (word 0: the scale that seeds the
    /// gradient) and the extra factor (1 / micro-batches).
    pub grad: (&'a Tensor, &'a Arc<GpuBuffer>, f32),
    /// Target values per sample (MSE).
    pub target_dim: usize,
    /// Cross-entropy's label smoothing (0: none; MSE takes none).
    pub label_smoothing: f32,
}

impl LossKind {
    pub(super) fn plan(self, ctx: &GpuContext, io: LossIo<'_>) -> Result<LossPlan> {
        let (grad, seed, multiplier) = io.grad;
        match self {
            LossKind::CrossEntropy => {
                // Rows of logits: [B, classes], or every token of [B, T, classes].
                let classes = *io.output.shape().last().unwrap_or(&1);
                let rows = [io.output.numel() / classes.max(1), classes];
                let (logits, grad) = (io.output.reshape(&rows)?, grad.reshape(&rows)?);
                let smoothing = io.label_smoothing;
                Ok(LossPlan {
                    targets: None,
                    train: loss::cross_entropy_smoothed(
                        ctx,
                        &logits,
                        io.labels,
                        io.loss,
                        Some((&grad, seed, multiplier)),
                        smoothing,
                    )?,
                    eval: loss::cross_entropy_smoothed(
                        ctx, &logits, io.labels, io.loss, None, smoothing,
                    )?,
                    count_correct: Some(loss::count_correct(ctx, &logits, io.labels, io.correct)?),
                })
            }
            LossKind::Mse => {
                if io.label_smoothing != 0.0 {
                    return Err(Error::InvalidArgument(
                        "label smoothing applies to cross-entropy, not mse".into(),
                    ));
                }
                let batch = io.output.shape()[0];
                if io.output.numel() != batch * io.target_dim {
                    return Err(Error::shape(
                        "mse",
                        format!(
                            "model output {:?} does not match targets of {} per sample",
                            io.output.shape(),
                            io.target_dim
                        ),
                    ));
                }
                let targets = Tensor::zeros(ctx, io.output.shape(), DType::F32);
                let train = loss::mse(
                    ctx,
                    io.output,
                    &targets,
                    io.loss,
                    Some((grad, seed, multiplier)),
                )?;
                let eval = loss::mse(ctx, io.output, &targets, io.loss, None)?;
                Ok(LossPlan {
                    targets: Some(targets),
                    train,
                    eval,
                    count_correct: None,
                })
            }
        }
    }
}
