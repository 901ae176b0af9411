//! A BatchNorm's settings and affine parameters as its kernels see them: what the forward
//! and backward (`mod.rs`) and the normalisation kernel (`normalise.rs`) share.

use super::shader::{Activation, SHADER};
use crate::gpu::{Arg, GpuContext, KernelDesc};
use crate::tensor::{DType, Tensor};

/// A BatchNorm's settings as its kernels see them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BatchNorm {
    pub eps: f32,
    /// `None`: the cumulative average (PyTorch's `momentum=None`).
    pub momentum: Option<f32>,
    pub activation: Activation,
}

impl Default for BatchNorm {
    /// PyTorch's defaults: eps 1e-5, momentum 0.1, no activation.
    fn default() -> Self {
        BatchNorm {
            eps: 1e-5,
            momentum: Some(0.1),
            activation: Activation::None,
        }
    }
}

/// The affine parameters `[C]` (`affine=False`: both `None`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Affine<'t> {
    pub weight: Option<&'t Tensor>,
    pub bias: Option<&'t Tensor>,
}

impl Affine<'_> {
    /// What fills an absent parameter's binding (never read): one value in the other
    /// parameter's dtype, so the two share a storage as the variant grid has them.
    pub(super) fn placeholder(&self, ctx: &GpuContext) -> Tensor {
        let dtype = self.weight.or(self.bias).map_or(DType::F32, Tensor::dtype);
        Tensor::zeros(ctx, &[1], dtype)
    }

    pub(super) fn args<'a>(&'a self, placeholder: &'a Tensor) -> (Arg<'a>, Arg<'a>) {
        (
            self.weight.unwrap_or(placeholder).arg(),
            self.bias.unwrap_or(placeholder).arg(),
        )
    }
}

impl BatchNorm {
    pub(super) fn desc(&self, entry: &'static str) -> KernelDesc {
        let (name, value) = self.activation.constant();
        KernelDesc::new(&SHADER, entry).with_const(name, value)
    }
}
