//! The forward's normalisation kernel as a value: what it reads and writes, so that a ReLU or
//! GELU layer right after the BatchNorm can make it again with itself fused
//! (`nn::layers::fusion`): the one kernel then writes the BatchNorm's output, as before, and
//! the activation's output beside it, with the bits of the two kernels it replaces.

use super::running::RunningStats;
use super::settings::{Affine, BatchNorm};
use super::shader::{Activation, Params, WG};
use crate::error::{Error, Result};
use crate::gpu::{Arg, GpuContext, Kernel, grid_1d};
use crate::tensor::Tensor;

/// `y = (x − mean) · invstd · weight + bias` on the batch's statistics (`saved`) or the
/// running ones (`running`).
#[derive(Clone, Debug)]
pub struct Normalise {
    pub(super) bn: BatchNorm,
    pub(super) params: Params,
    pub(super) x: Tensor,
    pub(super) y: Tensor,
    pub(super) weight: Option<Tensor>,
    pub(super) bias: Option<Tensor>,
    pub(super) saved: Option<Tensor>,
    pub(super) running: Option<RunningStats>,
}

impl Normalise {
    pub(super) fn new(
        bn: &BatchNorm,
        params: &Params,
        (x, y): (&Tensor, &Tensor),
        affine: Affine<'_>,
        (saved, running): (Option<&Tensor>, Option<&RunningStats>),
    ) -> Self {
        Normalise {
            bn: *bn,
            params: *params,
            x: x.clone(),
            y: y.clone(),
            weight: affine.weight.cloned(),
            bias: affine.bias.cloned(),
            saved: saved.cloned(),
            running: running.cloned(),
        }
    }

    /// The BatchNorm's output (what the kernel writes).
    pub fn output(&self) -> &Tensor {
        &self.y
    }

    /// The kernel, with the BatchNorm's own activation (none in a model's layer).
    pub fn kernel(&self, ctx: &GpuContext) -> Result<Kernel> {
        self.make(ctx, self.bn, "batchnorm_apply", (None, &self.y))
    }

    /// The kernel with `activation` after it: the BatchNorm's output as [`Self::kernel`]
    /// writes it, and `activation` of it into `out` (in the output's storage and shape).
    pub fn fused(&self, ctx: &GpuContext, activation: Activation, out: &Tensor) -> Result<Kernel> {
        const OP: &str = "batchnorm_apply_act";
        if activation == Activation::None || self.bn.activation != Activation::None {
            return Err(Error::InvalidArgument(format!(
                "{OP}: one activation after a BatchNorm without its own (asked {activation:?} \
                 after {:?})",
                self.bn.activation
            )));
        }
        if out.shape() != self.y.shape() || out.storage() != self.y.storage() {
            return Err(Error::shape(
                OP,
                format!(
                    "the activation's output {:?} {} differs from the BatchNorm's {:?} {}",
                    out.shape(),
                    out.storage().name(),
                    self.y.shape(),
                    self.y.storage().name()
                ),
            ));
        }
        let bn = BatchNorm {
            activation,
            ..self.bn
        };
        self.make(ctx, bn, OP, (Some(&self.y), out))
    }

    fn make(
        &self,
        ctx: &GpuContext,
        bn: BatchNorm,
        entry: &'static str,
        (pre, y): (Option<&Tensor>, &Tensor),
    ) -> Result<Kernel> {
        // The shader reads the statistics from one of these; a small buffer fills the other.
        let unused = ctx.alloc_storage("unused statistics", 16);
        let affine = Affine {
            weight: self.weight.as_ref(),
            bias: self.bias.as_ref(),
        };
        let placeholder = affine.placeholder(ctx);
        let (weight, bias) = affine.args(&placeholder);
        let mut args = vec![
            ("params", Arg::Uniform(bytemuck::bytes_of(&self.params))),
            ("x", self.x.arg()),
            ("weight", weight),
            ("bias", bias),
            (
                "stats",
                self.saved
                    .as_ref()
                    .map_or(Arg::Buffer(&unused), Tensor::arg),
            ),
            (
                "running",
                Arg::Buffer(self.running.as_ref().map_or(&unused, |r| r.buffer())),
            ),
        ];
        args.push(("y", y.arg()));
        if let Some(pre) = pre {
            args.push(("pre", pre.arg()));
        }
        ctx.kernel(
            &bn.desc(entry),
            &args,
            grid_1d(self.x.numel().div_ceil(2), WG),
        )
    }
}
