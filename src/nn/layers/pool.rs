//! `nn.MaxPool2d` (no padding, floor mode), in its input's dtype. The forward records the
//! argmax of every window; the backward routes each gradient to it.
//!
//! A ReLU right before it whose kernel it can take ([`super::fusion`]) runs in its kernels
//! where the windows tile the input: the forward writes the ReLU's output and the pool's, the
//! backward the gradients of both inputs (the ReLU's, handed to its backward). ReLU commutes
//! with max, and with each element in one window no element is computed twice.

use std::sync::Arc;

use serde::Deserialize;

use super::fusion::Fusable;
use super::{Backward, BackwardPlan, ForwardPlan, Layer, LayerConfig, Resolved, chw, positive};
use crate::amp::policy::{CastRule, Op};
use crate::error::Result;
use crate::gpu::GpuBuffer;
use crate::ops::pool::{self, Pool2dParams};
use crate::ops::unary::RELU;
use crate::tensor::Tensor;

/// `{"maxpool2d": {"kernel": K, "stride": K}}` (stride defaults to the kernel, as in PyTorch).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaxPool2dConfig {
    pub kernel: usize,
    pub stride: Option<usize>,
}

impl LayerConfig for MaxPool2dConfig {
    fn kind(&self) -> &'static str {
        "maxpool2d"
    }

    fn resolve(&self, input: &[usize]) -> std::result::Result<Resolved, String> {
        let kernel = self.kernel;
        let stride = self.stride.unwrap_or(kernel);
        positive(kernel, "`kernel`")?;
        positive(stride, "`stride`")?;
        let (c, h, w) = chw("maxpool2d", input)?;
        if kernel > h || kernel > w {
            return Err(format!(
                "kernel {kernel}×{kernel} is larger than the input {h}×{w}"
            ));
        }
        let layer = MaxPool2d { kernel, stride };
        let output = vec![c, layer.out(h), layer.out(w)];
        Ok(Resolved::new(layer, output))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaxPool2d {
    pub kernel: usize,
    pub stride: usize,
}

impl MaxPool2d {
    /// Output size of one spatial dimension of size `d`.
    fn out(&self, d: usize) -> usize {
        (d - self.kernel) / self.stride + 1
    }

    fn params(&self) -> Pool2dParams {
        Pool2dParams {
            kernel: self.kernel,
            stride: self.stride,
        }
    }
}

impl Layer for MaxPool2d {
    fn kind(&self) -> &'static str {
        "maxpool2d"
    }

    fn repr(&self) -> String {
        format!(
            "MaxPool2d(kernel_size={}, stride={}, padding=0, dilation=1, ceil_mode=False)",
            self.kernel, self.stride
        )
    }

    fn op(&self) -> Op {
        Op::new("MaxPool2d", CastRule::Input)
    }

    /// `y = max over each window`, remembering where the max was.
    fn forward(&self, f: &mut ForwardPlan<'_>, x: Tensor) -> Result<(Tensor, Box<dyn Backward>)> {
        let s = x.shape();
        let y = f.activation(&[s[1], self.out(s[2]), self.out(s[3])]);
        let indices = pool::indices_buffer(f.ctx(), y.numel());
        let p = self.params();
        // A ReLU in the storage of x and y, over windows that tile x.
        let fits = |what: &Fusable| {
            matches!(what, Fusable::Unary { op, x: pre, .. }
                if std::ptr::eq(*op, &RELU)
                    && pre.storage() == x.storage()
                    && y.storage() == x.storage())
        };
        let taken = if pool::tiles(s[2], s[3], p) {
            f.take_fusable(&x, fits)
        } else {
            None
        };
        let relu = match taken {
            Some(Fusable::Unary { x: pre, .. }) => {
                f.push(pool::maxpool2d_relu_forward(
                    f.ctx(),
                    &pre,
                    &x,
                    &y,
                    &indices,
                    p,
                )?);
                Some(FusedRelu { pre })
            }
            _ => {
                f.push(pool::maxpool2d_forward(f.ctx(), &x, &y, &indices, p)?);
                None
            }
        };
        let backward = MaxPool2dBackward {
            x,
            indices,
            p,
            relu,
        };
        Ok((y, Box::new(backward)))
    }
}

/// The ReLU whose forward the pool ran: its input.
struct FusedRelu {
    pre: Tensor,
}

struct MaxPool2dBackward {
    x: Tensor,
    indices: Arc<GpuBuffer>,
    p: Pool2dParams,
    relu: Option<FusedRelu>,
}

impl Backward for MaxPool2dBackward {
    /// `dx[argmax] = dy`, zero elsewhere.
    fn backward(&self, b: &mut BackwardPlan<'_>, dy: Tensor) -> Result<Option<Tensor>> {
        if !b.wants_input_grad() {
            return Ok(None);
        }
        let dx = b.input_grad(&self.x)?;
        // dx is still made: the pool's input-gradient probe reads it.
        if let Some(relu) = self.relu.as_ref().filter(|_| dy.storage() == dx.storage()) {
            let dpre = b.input_grad(&relu.pre)?;
            b.push(pool::maxpool2d_relu_backward(
                b.ctx(),
                &dy,
                &self.indices,
                &relu.pre,
                &dx,
                &dpre,
                self.p,
            )?);
            // Handed on to the ReLU's backward, which runs next on these tensors.
            b.give_input_grad(&RELU, &relu.pre, &dx, dpre);
            return Ok(Some(dx));
        }
        b.push(pool::maxpool2d_backward(
            b.ctx(),
            &dy,
            &self.indices,
            &dx,
            self.p,
        )?);
        Ok(Some(dx))
    }
}
