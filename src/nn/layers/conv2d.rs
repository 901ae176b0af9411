//! `nn.Conv2d` with square kernels and zero padding: weight `[out, in, k, k]`, on autocast's
//! low-precision list. Forward, input gradient and weight gradient are the implicit GEMMs of
//! `ops::conv`.

use serde::Deserialize;

use super::{
    Backward, BackwardPlan, ForwardPlan, Layer, LayerConfig, ParamDef, Resolved, chw,
    default_weight_and_bias, positive,
};
use crate::amp::policy::{CastRule, Op};
use crate::error::Result;
use crate::ops::conv::{self, Conv2dParams};
use crate::ops::{Accumulate, reduce};
use crate::tensor::Tensor;

/// `{"conv2d": {"out": C, "kernel": K, "stride": 1, "padding": 0, "bias": true}}`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Conv2dConfig {
    pub out: usize,
    pub kernel: usize,
    #[serde(default = "one")]
    pub stride: usize,
    #[serde(default)]
    pub padding: usize,
    #[serde(default = "yes")]
    pub bias: bool,
}

fn one() -> usize {
    1
}

fn yes() -> bool {
    true
}

impl LayerConfig for Conv2dConfig {
    fn kind(&self) -> &'static str {
        "conv2d"
    }

    fn resolve(&self, input: &[usize]) -> std::result::Result<Resolved, String> {
        let Conv2dConfig {
            out,
            kernel,
            stride,
            padding,
            bias,
        } = *self;
        positive(out, "`out`")?;
        positive(kernel, "`kernel`")?;
        positive(stride, "`stride`")?;
        let (c, h, w) = chw("conv2d", input)?;
        let padded = |d: usize| {
            padding
                .checked_mul(2)
                .and_then(|p| p.checked_add(d))
                .ok_or_else(|| format!("padding {padding} is too large"))
        };
        let (ph, pw) = (padded(h)?, padded(w)?);
        if kernel > ph || kernel > pw {
            return Err(format!(
                "kernel {kernel}×{kernel} is larger than the padded input {ph}×{pw} (input {h}×{w}, padding {padding})"
            ));
        }
        let layer = Conv2d {
            in_channels: c,
            out_channels: out,
            kernel,
            stride,
            padding,
            bias,
        };
        let output = layer.output_shape(h, w);
        Ok(Resolved::new(layer, output))
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conv2d {
    pub in_channels: usize,
    pub out_channels: usize,
    pub kernel: usize,
    pub stride: usize,
    pub padding: usize,
    pub bias: bool,
}

impl Conv2d {
    /// `[out, Ho, Wo]` for an `h`×`w` input (PyTorch's formula, dilation 1).
    fn output_shape(&self, h: usize, w: usize) -> Vec<usize> {
        let out = |d: usize| (d + 2 * self.padding - self.kernel) / self.stride + 1;
        vec![self.out_channels, out(h), out(w)]
    }

    fn params(&self) -> Conv2dParams {
        Conv2dParams {
            stride: self.stride,
            padding: self.padding,
        }
    }
}

impl Layer for Conv2d {
    fn kind(&self) -> &'static str {
        "conv2d"
    }

    fn repr(&self) -> String {
        let Conv2d {
            in_channels,
            out_channels,
            kernel,
            stride,
            padding,
            bias,
        } = *self;
        let mut s = format!(
            "Conv2d({in_channels}, {out_channels}, kernel_size=({kernel}, {kernel}), stride=({stride}, {stride})"
        );
        if padding != 0 {
            s.push_str(&format!(", padding=({padding}, {padding})"));
        }
        if !bias {
            s.push_str(", bias=False");
        }
        s.push(')');
        s
    }

    fn op(&self) -> Op {
        Op::new("Conv2d", CastRule::LowPrecision)
    }

    fn parameters(&self) -> Vec<ParamDef> {
        let k = self.kernel;
        default_weight_and_bias(
            vec![self.out_channels, self.in_channels, k, k],
            self.in_channels * k * k,
            self.bias,
        )
    }

    /// `y = conv(x, W) (+ b)`.
    fn forward(&self, f: &mut ForwardPlan<'_>, x: Tensor) -> Result<(Tensor, Box<dyn Backward>)> {
        let w = f.param("weight")?;
        let b = self.bias.then(|| f.param("bias")).transpose()?;
        let y = f.activation(&self.output_shape(x.shape()[2], x.shape()[3]));
        let p = self.params();
        f.push(conv::conv2d_forward(f.ctx(), &x, &w, b.as_ref(), &y, p)?);
        let backward = Conv2dBackward {
            x,
            w,
            p,
            bias: self.bias,
        };
        Ok((y, Box::new(backward)))
    }
}

/// What the gradient of a Conv2d needs: its input and weight (in the compute dtype).
struct Conv2dBackward {
    x: Tensor,
    w: Tensor,
    p: Conv2dParams,
    bias: bool,
}

impl Backward for Conv2dBackward {
    /// `dW += x ⋆ dy`, `db += Σ dy`, `dx = dy ⋆ Wᵀ` (transposed convolution).
    fn backward(&self, b: &mut BackwardPlan<'_>, dy: Tensor) -> Result<Option<Tensor>> {
        let ctx = b.ctx();
        // Computed in the forward's dtype and rounded to it (PyTorch's f16 weight gradient
        // under autocast), then added to the f32 gradient. None for a frozen weight
        // (airbench's whitening conv): nothing would read it.
        let round_to = Some(self.w.dtype());
        if b.trains("weight") {
            let dw = b.param_grad("weight")?;
            let weight_grad = conv::conv2d_backward_weight(
                ctx,
                &self.x,
                &dy,
                &dw,
                self.p,
                Accumulate::Add,
                round_to,
            )?;
            for k in weight_grad {
                b.push(k);
            }
        }
        if self.bias && b.trains("bias") {
            let db = b.param_grad("bias")?;
            b.push(reduce::bias_grad(ctx, &dy, &db, Accumulate::Add, round_to)?);
        }
        if !b.wants_input_grad() {
            return Ok(None);
        }
        let dx = b.input_grad(&self.x)?;
        b.push(conv::conv2d_backward_input(ctx, &dy, &self.w, &dx, self.p)?);
        Ok(Some(dx))
    }
}
