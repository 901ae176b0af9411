//! `nn.AvgPool2d(kernel, stride=kernel)` (no padding, floor mode) and
//! `nn.AdaptiveAvgPool2d(output)` (PyTorch's bins; `output=1` is a ResNet's global average
//! pool), in their input's dtype (on no autocast list): `ops::avgpool`'s kernels, forward
//! and backward side by side.

use serde::Deserialize;

use super::{Backward, BackwardPlan, ForwardPlan, Layer, LayerConfig, Resolved, chw};
use crate::amp::policy::{CastRule, Op};
use crate::error::Result;
use crate::ops::avgpool::{self, AvgPool};
use crate::tensor::Tensor;

/// `{"avgpool2d": {"kernel": K, "stride": K}}` (stride defaults to the kernel, as in PyTorch).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AvgPool2dConfig {
    pub kernel: usize,
    pub stride: Option<usize>,
}

/// `{"adaptive_avgpool2d": {"output": 1}}` (a square output; `output` defaults to 1).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdaptiveAvgPool2dConfig {
    #[serde(default = "one")]
    pub output: usize,
}

fn one() -> usize {
    1
}

fn resolve(kind: &str, pool: AvgPool, input: &[usize]) -> std::result::Result<Resolved, String> {
    let (c, h, w) = chw(kind, input)?;
    // The op's own check of the sizes, as a description error.
    let (ho, wo) = pool.output_hw(h, w).map_err(|e| e.to_string())?;
    Ok(Resolved::new(AvgPool2d { pool }, vec![c, ho, wo]))
}

impl LayerConfig for AvgPool2dConfig {
    fn kind(&self) -> &'static str {
        "avgpool2d"
    }

    fn resolve(&self, input: &[usize]) -> std::result::Result<Resolved, String> {
        let pool = AvgPool::Window {
            kernel: self.kernel,
            stride: self.stride.unwrap_or(self.kernel),
        };
        resolve("avgpool2d", pool, input)
    }
}

impl LayerConfig for AdaptiveAvgPool2dConfig {
    fn kind(&self) -> &'static str {
        "adaptive_avgpool2d"
    }

    fn resolve(&self, input: &[usize]) -> std::result::Result<Resolved, String> {
        let pool = AvgPool::Adaptive {
            height: self.output,
            width: self.output,
        };
        resolve("adaptive_avgpool2d", pool, input)
    }
}

/// Either average pool, resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AvgPool2d {
    pub pool: AvgPool,
}

impl Layer for AvgPool2d {
    fn kind(&self) -> &'static str {
        match self.pool {
            AvgPool::Window { .. } => "avgpool2d",
            AvgPool::Adaptive { .. } => "adaptive_avgpool2d",
        }
    }

    fn repr(&self) -> String {
        match self.pool {
            AvgPool::Window { kernel, stride } => {
                format!("AvgPool2d(kernel_size={kernel}, stride={stride}, padding=0)")
            }
            AvgPool::Adaptive { height, width } if height == width => {
                format!("AdaptiveAvgPool2d(output_size={height})")
            }
            AvgPool::Adaptive { height, width } => {
                format!("AdaptiveAvgPool2d(output_size=({height}, {width}))")
            }
        }
    }

    fn op(&self) -> Op {
        match self.pool {
            AvgPool::Window { .. } => Op::new("AvgPool2d", CastRule::Input),
            AvgPool::Adaptive { .. } => Op::new("AdaptiveAvgPool2d", CastRule::Input),
        }
    }

    fn forward(&self, f: &mut ForwardPlan<'_>, x: Tensor) -> Result<(Tensor, Box<dyn Backward>)> {
        let &[_, c, h, w] = x.shape() else {
            unreachable!("resolved for [C, H, W] inputs")
        };
        let (ho, wo) = self.pool.output_hw(h, w)?;
        let y = f.activation(&[c, ho, wo]);
        f.push(avgpool::forward(f.ctx(), &x, &y, self.pool)?);
        let like = super::Like::of(&x);
        let backward = AvgPoolBackward {
            pool: self.pool,
            like,
        };
        Ok((y, Box::new(backward)))
    }
}

/// The backward needs only the input's shape: every window's gradient is `dy / |window|`.
struct AvgPoolBackward {
    pool: AvgPool,
    like: super::Like,
}

impl Backward for AvgPoolBackward {
    fn backward(&self, b: &mut BackwardPlan<'_>, dy: Tensor) -> Result<Option<Tensor>> {
        if !b.wants_input_grad() {
            return Ok(None);
        }
        let dx = b.input_grad_like(&self.like)?;
        b.push(avgpool::backward(b.ctx(), &dy, &dx, self.pool)?);
        Ok(Some(dx))
    }
}
