//! A model planned on the GPU for one batch size and precision policy: every activation,
//! gradient and kernel made once (llm.c style), forward and backward side by side.
//!
//! The forward walk records one [`Node`] per op (casts inserted by the policy included);
//! the backward is then planned by walking the nodes in reverse.

use std::sync::Arc;

use super::params::ParamStore;
use super::spec::{LayerSpec, ModelSpec};
use crate::amp::policy::{OpKind, Policy, PrecisionRow};
use crate::error::{Error, Result};
use crate::gpu::{GpuBuffer, GpuContext, Kernel};
use crate::ops::conv::{self, Conv2dParams};
use crate::ops::matmul::{MatmulOpts, matmul};
use crate::ops::pool::{self, Pool2dParams};
use crate::ops::{elementwise, loss, reduce};
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

    pub fn op(self) -> OpKind {
        match self {
            Self::CrossEntropy => OpKind::CrossEntropyLoss,
            Self::Mse => OpKind::MseLoss,
        }
    }
}

/// One planned op of the forward pass, with what its backward needs.
enum Node {
    Cast {
        x: Tensor,
    },
    Linear {
        x: Tensor,
        w: Tensor,
        name: String,
        bias: bool,
    },
    Conv2d {
        x: Tensor,
        w: Tensor,
        p: Conv2dParams,
        name: String,
        bias: bool,
    },
    Relu {
        x: Tensor,
    },
    Gelu {
        x: Tensor,
    },
    MaxPool2d {
        x: Tensor,
        indices: Arc<GpuBuffer>,
        p: Pool2dParams,
    },
    Flatten {
        x: Tensor,
    },
}

impl Node {
    fn input(&self) -> &Tensor {
        match self {
            Node::Cast { x, .. }
            | Node::Linear { x, .. }
            | Node::Conv2d { x, .. }
            | Node::Relu { x }
            | Node::Gelu { x }
            | Node::MaxPool2d { x, .. }
            | Node::Flatten { x } => x,
        }
    }
}

/// The planned network for one batch size.
pub struct Network {
    pub batch: usize,
    /// Batch inputs, f32 `[batch, ...sample_shape]`: written before each step.
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
    forward: Vec<Kernel>,
    train_loss: Vec<Kernel>,
    eval_loss: Vec<Kernel>,
    count_correct: Option<Kernel>,
    backward: Vec<Kernel>,
}

impl Network {
    /// Plan forward, loss and backward for `batch` samples. `seed` is the GradScaler's state
    /// buffer (word 0 = scale): the loss gradient is seeded with it, times `grad_multiplier`
    /// (1/accumulation steps).
    #[allow(clippy::too_many_arguments)]
    pub fn build(
        ctx: &GpuContext,
        spec: &ModelSpec,
        store: &ParamStore,
        policy: &Policy,
        batch: usize,
        loss_kind: LossKind,
        target_dim: usize,
        seed: &Arc<GpuBuffer>,
        grad_multiplier: f32,
    ) -> Result<Self> {
        if batch == 0 {
            return Err(Error::InvalidArgument(
                "batch size must be at least 1".into(),
            ));
        }
        let with_batch = |shape: &[usize]| -> Vec<usize> {
            let mut s = vec![batch];
            s.extend_from_slice(shape);
            s
        };
        let input = Tensor::zeros(ctx, &with_batch(&spec.input_shape), DType::F32);
        let mut forward = Vec::new();
        let mut nodes: Vec<Node> = Vec::new();
        let mut x = input.clone();
        for (index, layer) in spec.layers.iter().enumerate() {
            let kind = op_kind(&layer.spec);
            let compute = policy.compute_dtype(index, kind, x.dtype());
            if compute != x.dtype() {
                let y = Tensor::zeros(ctx, x.shape(), compute);
                forward.push(elementwise::cast(ctx, &x, &y)?);
                nodes.push(Node::Cast { x });
                x = y;
            }
            let out_shape = with_batch(&layer.output_shape);
            let param = |suffix: &str| format!("{}.{suffix}", layer.name);
            x = match &layer.spec {
                LayerSpec::Linear { bias, .. } => {
                    let w = store.compute_view(ctx, &param("weight"), compute)?;
                    let b = if *bias {
                        Some(store.compute_view(ctx, &param("bias"), compute)?)
                    } else {
                        None
                    };
                    let y = Tensor::zeros(ctx, &out_shape, compute);
                    forward.push(matmul(
                        ctx,
                        &x,
                        &w,
                        &y,
                        MatmulOpts {
                            trans_b: true,
                            bias: b.as_ref(),
                            ..Default::default()
                        },
                    )?);
                    nodes.push(Node::Linear {
                        x,
                        w,
                        name: layer.name.clone(),
                        bias: *bias,
                    });
                    y
                }
                LayerSpec::Conv2d {
                    stride,
                    padding,
                    bias,
                    ..
                } => {
                    let p = Conv2dParams {
                        stride: *stride,
                        padding: *padding,
                    };
                    let w = store.compute_view(ctx, &param("weight"), compute)?;
                    let b = if *bias {
                        Some(store.compute_view(ctx, &param("bias"), compute)?)
                    } else {
                        None
                    };
                    let y = Tensor::zeros(ctx, &out_shape, compute);
                    forward.push(conv::conv2d_forward(ctx, &x, &w, b.as_ref(), &y, p)?);
                    nodes.push(Node::Conv2d {
                        x,
                        w,
                        p,
                        name: layer.name.clone(),
                        bias: *bias,
                    });
                    y
                }
                LayerSpec::Relu => {
                    let y = Tensor::zeros(ctx, &out_shape, compute);
                    forward.push(elementwise::relu_forward(ctx, &x, &y)?);
                    nodes.push(Node::Relu { x });
                    y
                }
                LayerSpec::Gelu => {
                    let y = Tensor::zeros(ctx, &out_shape, compute);
                    forward.push(elementwise::gelu_forward(ctx, &x, &y)?);
                    nodes.push(Node::Gelu { x });
                    y
                }
                LayerSpec::MaxPool2d { kernel, stride } => {
                    let p = Pool2dParams {
                        kernel: *kernel,
                        stride: *stride,
                    };
                    let y = Tensor::zeros(ctx, &out_shape, compute);
                    let indices = pool::indices_buffer(ctx, y.numel());
                    forward.push(pool::maxpool2d_forward(ctx, &x, &y, &indices, p)?);
                    nodes.push(Node::MaxPool2d { x, indices, p });
                    y
                }
                LayerSpec::Flatten => {
                    let y = x.reshape(&out_shape)?;
                    nodes.push(Node::Flatten { x });
                    y
                }
            };
        }
        let output = x;

        // Loss: computed in f32 from the output's storage; the fused kernel also writes the
        // seeded gradient of the output in the output's dtype.
        let loss_t = Tensor::zeros(ctx, &[1], DType::F32);
        let labels = ctx.alloc_storage("labels", 4 * batch as u64);
        let (backward, grad_out) = plan_backward(ctx, store, &nodes, &output)?;
        let correct = ctx.alloc_storage("correct", 4);
        let (targets, train_loss, eval_loss, count_correct) = match loss_kind {
            LossKind::CrossEntropy => (
                None,
                loss::cross_entropy(
                    ctx,
                    &output,
                    &labels,
                    &loss_t,
                    Some((&grad_out, seed, grad_multiplier)),
                )?,
                loss::cross_entropy(ctx, &output, &labels, &loss_t, None)?,
                Some(loss::count_correct(ctx, &output, &labels, &correct)?),
            ),
            LossKind::Mse => {
                if output.numel() != batch * target_dim {
                    return Err(Error::shape(
                        "mse",
                        format!(
                            "model output {:?} does not match targets of {target_dim} per sample",
                            output.shape()
                        ),
                    ));
                }
                let t = Tensor::zeros(ctx, output.shape(), DType::F32);
                let train = loss::mse(
                    ctx,
                    &output,
                    &t,
                    &loss_t,
                    Some((&grad_out, seed, grad_multiplier)),
                )?;
                let eval = loss::mse(ctx, &output, &t, &loss_t, None)?;
                (Some(t), train, eval, None)
            }
        };

        Ok(Self {
            batch,
            input,
            labels,
            targets,
            output,
            loss: loss_t,
            correct,
            loss_kind,
            forward,
            train_loss,
            eval_loss,
            count_correct,
            backward,
        })
    }

    /// Forward, seeded loss gradient and backward of one (micro-)batch, in order.
    pub fn train_kernels(&self) -> impl Iterator<Item = &Kernel> {
        self.forward
            .iter()
            .chain(&self.train_loss)
            .chain(&self.backward)
    }

    /// Forward and loss only, plus the correct-prediction count (validation).
    pub fn eval_kernels(&self) -> impl Iterator<Item = &Kernel> {
        self.forward
            .iter()
            .chain(&self.eval_loss)
            .chain(self.count_correct.iter())
    }

    /// Forward only.
    pub fn forward_kernels(&self) -> impl Iterator<Item = &Kernel> {
        self.forward.iter()
    }
}

/// The precision map of a model trained with `loss` under `policy`: each layer's op, compute
/// dtype, output dtype and the casts autocast inserts, then the loss.
pub fn precision_map(spec: &ModelSpec, policy: &Policy, loss: LossKind) -> Vec<PrecisionRow> {
    let mut ops: Vec<(String, OpKind, bool)> = spec
        .layers
        .iter()
        .map(|l| {
            let has_params = matches!(l.spec, LayerSpec::Linear { .. } | LayerSpec::Conv2d { .. });
            (l.name.clone(), op_kind(&l.spec), has_params)
        })
        .collect();
    ops.push(("loss".into(), loss.op(), false));
    policy.precision_map(&ops)
}

fn op_kind(spec: &LayerSpec) -> OpKind {
    match spec {
        LayerSpec::Linear { .. } => OpKind::Linear,
        LayerSpec::Conv2d { .. } => OpKind::Conv2d,
        LayerSpec::Relu => OpKind::Relu,
        LayerSpec::Gelu => OpKind::Gelu,
        LayerSpec::MaxPool2d { .. } => OpKind::MaxPool2d,
        LayerSpec::Flatten => OpKind::Flatten,
    }
}

/// Activation gradients live only from the backward kernel that writes them to the one
/// that reads them, so two buffers serve a whole backward pass: the gradient of the loss
/// seeds buffer 0, each layer reads its output's gradient from one buffer and writes its
/// input's gradient into the other (every backward kernel overwrites its whole output).
struct GradientPingPong {
    buffers: [Arc<GpuBuffer>; 2],
}

impl GradientPingPong {
    /// Two buffers as large as the largest gradient the backward pass of `nodes` computes
    /// (the loss gradient included: `output` is the model's output).
    fn plan(ctx: &GpuContext, nodes: &[Node], needs_grad: &[bool], output: &Tensor) -> Self {
        let bytes_of = |t: &Tensor| t.storage().bytes_for(t.numel()).next_multiple_of(4);
        let largest = nodes
            .iter()
            .zip(needs_grad)
            .filter(|&(_, &needed)| needed)
            .map(|(n, _)| bytes_of(n.input()))
            .fold(bytes_of(output), u64::max);
        Self {
            buffers: [0, 1].map(|_| ctx.alloc_storage("activation grads", largest)),
        }
    }

    /// A gradient shaped like `like`, in buffer `which`.
    fn grad(&self, ctx: &GpuContext, which: usize, like: &Tensor) -> Result<Tensor> {
        Tensor::view(
            ctx,
            self.buffers[which].clone(),
            0,
            like.shape(),
            like.storage(),
        )
    }
}

/// Walk the forward nodes in reverse. `dy` is the gradient of the current node's output;
/// the input gradient is only computed when something upstream needs it (not for the data).
/// Returns the backward kernels and the loss gradient they start from (the loss kernel
/// writes it).
fn plan_backward(
    ctx: &GpuContext,
    store: &ParamStore,
    nodes: &[Node],
    output: &Tensor,
) -> Result<(Vec<Kernel>, Tensor)> {
    // needs_grad[i]: node i's input depends on parameters (so its gradient is needed).
    let mut needs_grad = Vec::with_capacity(nodes.len());
    let mut seen_param = false;
    for n in nodes {
        needs_grad.push(seen_param);
        seen_param |= matches!(n, Node::Linear { .. } | Node::Conv2d { .. });
    }
    let grads = GradientPingPong::plan(ctx, nodes, &needs_grad, output);
    let grad_output = grads.grad(ctx, 0, output)?;
    let mut kernels = Vec::new();
    let mut dy = grad_output.clone();
    // The buffer `dy` is in; `dx` goes into the other one.
    let mut dy_buffer = 0;
    for (i, node) in nodes.iter().enumerate().rev() {
        let want_dx = needs_grad[i];
        let x = node.input();
        let dx = if want_dx && !matches!(node, Node::Flatten { .. }) {
            Some(grads.grad(ctx, 1 - dy_buffer, x)?)
        } else {
            None
        };
        match node {
            Node::Cast { .. } => {
                if let Some(dx) = &dx {
                    kernels.push(elementwise::cast(ctx, &dy, dx)?);
                }
            }
            Node::Linear {
                x, w, name, bias, ..
            } => {
                let dw = store.grad_view(ctx, &format!("{name}.weight"))?;
                kernels.push(matmul(
                    ctx,
                    &dy,
                    x,
                    &dw,
                    MatmulOpts {
                        trans_a: true,
                        accumulate: true,
                        ..Default::default()
                    },
                )?);
                if *bias {
                    let db = store.grad_view(ctx, &format!("{name}.bias"))?;
                    kernels.push(reduce::bias_grad(ctx, &dy, &db, true)?);
                }
                if let Some(dx) = &dx {
                    kernels.push(matmul(ctx, &dy, w, dx, MatmulOpts::default())?);
                }
            }
            Node::Conv2d {
                x,
                w,
                p,
                name,
                bias,
                ..
            } => {
                let dw = store.grad_view(ctx, &format!("{name}.weight"))?;
                kernels.push(conv::conv2d_backward_weight(ctx, x, &dy, &dw, *p, true)?);
                if *bias {
                    let db = store.grad_view(ctx, &format!("{name}.bias"))?;
                    kernels.push(reduce::bias_grad(ctx, &dy, &db, true)?);
                }
                if let Some(dx) = &dx {
                    kernels.push(conv::conv2d_backward_input(ctx, &dy, w, dx, *p)?);
                }
            }
            Node::Relu { x } => {
                if let Some(dx) = &dx {
                    kernels.push(elementwise::relu_backward(ctx, x, &dy, dx)?);
                }
            }
            Node::Gelu { x } => {
                if let Some(dx) = &dx {
                    kernels.push(elementwise::gelu_backward(ctx, x, &dy, dx)?);
                }
            }
            Node::MaxPool2d { indices, p, .. } => {
                if let Some(dx) = &dx {
                    kernels.push(pool::maxpool2d_backward(ctx, &dy, indices, dx, *p)?);
                }
            }
            Node::Flatten { x } => {
                if want_dx {
                    dy = dy.reshape(x.shape())?;
                }
                continue;
            }
        }
        match dx {
            Some(dx) => {
                dy = dx;
                dy_buffer = 1 - dy_buffer;
            }
            None => break,
        }
    }
    Ok((kernels, grad_output))
}
