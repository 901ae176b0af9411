//! BatchNorm (`shaders/batchnorm.wgsl`): `torch.nn.BatchNorm1d` / `BatchNorm2d` over the
//! channels of `x [N, C, ...]` (the statistics of channel c over its N·S values, S the product
//! of the trailing dims: 1 for `[N, C]`, L for `[N, C, L]`, H·W for `[N, C, H, W]`), forward
//! and backward side by side.
//!
//! Numerics follow PyTorch: training normalises with the batch's biased variance and updates
//! the running variance with the unbiased one (`M2 / (M − 1)`); `momentum` (default 0.1) or,
//! with PyTorch's `momentum=None`, the cumulative factor `1 / num_batches_tracked`;
//! `invstd = 1 / sqrt(var + eps)`; `y = (x − mean) · invstd · weight + bias`. Eval normalises
//! with the running statistics. Statistics, affine parameters and their gradients are f32;
//! `x`, `y`, `dy` and `dx` may have any storage (under autocast: f16 or bf16 in and out, as
//! cuDNN runs it), the weight and bias theirs or f32.
//!
//! Deterministic, no float atomics: a channel's values are cut into fixed chunks ([`chunking`],
//! a function of the shape only), each reduced by one workgroup in a fixed tree order, then
//! combined in chunk order by one thread per channel; the backward's sums likewise.
//!
//! Running statistics are [`RunningStats`], PyTorch's three buffers one after the other:
//! `[running_mean C | running_var C | num_batches_tracked]` (int64). In a model they are
//! buffers of its buffer store (`nn::buffers`, one mechanism for every layer's buffers): a
//! training forward updates the *working* copy, as PyTorch's forward does, and the step's
//! commit of every buffer (`ops::buffers::commit`, after the GradScaler's unscale) keeps it
//! or, on a step the GradScaler skips, rolls it back, so a skipped step leaves the running
//! statistics as they were, gradient accumulation's micro-batches included
//! (`ops::buffers::OnSkippedStep::UpdateAnyway` keeps every update instead, as PyTorch does:
//! pytorch#88474). The eval forward and checkpoints read the committed copy.
//!
//! Kernels: training forward 3 (chunk partials, per-channel statistics and running update,
//! normalisation), eval forward 1, backward 3 (chunk partials, per-channel sums into the
//! parameter gradients, input gradient).

mod normalise;
mod running;
mod settings;
mod shader;

use std::sync::Arc;

use super::{check_f32, round_code};
use crate::error::{Error, Result};
use crate::gpu::{Arg, GpuBuffer, GpuContext, Kernel, grid_1d};
use crate::tensor::{DType, Tensor};
use shader::{Params, SMALL_WG, WG};

pub use normalise::Normalise;
pub use running::{RunningStats, RunningValues};
pub use settings::{Affine, BatchNorm};
pub use shader::{Activation, SHADER, chunking};

/// The shape a BatchNorm sees: `(N, C, S)`.
fn dims(op: &'static str, x: &Tensor) -> Result<(usize, usize, usize)> {
    let &[n, c, ref rest @ ..] = x.shape() else {
        return Err(Error::shape(
            op,
            format!("x must be [N, C, ...], not {:?}", x.shape()),
        ));
    };
    let s: usize = rest.iter().product();
    if c == 0 {
        return Err(Error::shape(op, "x has no channels (C = 0)"));
    }
    if u32::try_from(x.numel()).is_err() {
        return Err(Error::shape(
            op,
            format!("{:?} is over 2^32 values", x.shape()),
        ));
    }
    Ok((n, c, s))
}

impl BatchNorm {
    fn check(&self, op: &'static str) -> Result<()> {
        if !(self.eps > 0.0 && self.eps.is_finite()) {
            return Err(Error::InvalidArgument(format!(
                "{op}: eps must be finite and > 0, not {}",
                self.eps
            )));
        }
        if let Some(m) = self.momentum
            && !(0.0..=1.0).contains(&m)
        {
            return Err(Error::InvalidArgument(format!(
                "{op}: momentum must be in [0, 1] (or None for a cumulative average), not {m}"
            )));
        }
        Ok(())
    }

    /// The uniform block for x's shape, checking the tensors against it.
    fn params(
        &self,
        op: &'static str,
        x: &Tensor,
        y: &Tensor,
        affine: Affine<'_>,
    ) -> Result<Params> {
        self.check(op)?;
        let (n, c, s) = dims(op, x)?;
        if y.shape() != x.shape() {
            return Err(Error::shape(
                op,
                format!("{:?} differs from x {:?}", y.shape(), x.shape()),
            ));
        }
        for (what, t) in [("weight", affine.weight), ("bias", affine.bias)] {
            if let Some(t) = t
                && t.numel() != c
            {
                return Err(Error::shape(
                    op,
                    format!(
                        "{what} {:?} must hold {c} values (one per channel)",
                        t.shape()
                    ),
                ));
            }
        }
        if let (Some(w), Some(b)) = (affine.weight, affine.bias)
            && w.storage() != b.storage()
        {
            return Err(Error::shape(
                op,
                format!(
                    "weight ({}) and bias ({}) must share a storage",
                    w.storage().name(),
                    b.storage().name()
                ),
            ));
        }
        let (chunk_len, chunks) = chunking(n * s);
        Ok(Params {
            channels: c as u32,
            inner: s as u32,
            batch: n as u32,
            chunk_len: chunk_len as u32,
            chunks: chunks as u32,
            n: x.numel() as u32,
            eps: self.eps,
            momentum: self.momentum.unwrap_or(0.0),
            cumulative: self.momentum.is_none() as u32,
            has_weight: affine.weight.is_some() as u32,
            has_bias: affine.bias.is_some() as u32,
            act_round: round_code(Some(y.dtype())),
            ..Default::default()
        })
    }

    /// Training forward with batch statistics: `y = act((x − mean) · invstd · weight + bias)`,
    /// writing `saved` (f32 `[2C]`: the batch's mean, then invstd; what the backward reads).
    /// With `running` (a model's working copy, which the step commits), the running statistics
    /// take this batch and `num_batches_tracked` counts it, as PyTorch's forward does with
    /// `track_running_stats=True`. With `track_running_stats=False` there are no running
    /// statistics and PyTorch normalises with the batch's in eval too: this with `None`.
    /// Three kernels.
    pub fn train_forward(
        &self,
        ctx: &GpuContext,
        (x, y): (&Tensor, &Tensor),
        affine: Affine<'_>,
        saved: &Tensor,
        running: Option<&RunningStats>,
    ) -> Result<Vec<Kernel>> {
        let (mut kernels, apply) = self.train_statistics(ctx, (x, y), affine, saved, running)?;
        kernels.push(apply.kernel(ctx)?);
        Ok(kernels)
    }

    /// [`Self::train_forward`]'s first two kernels (the statistics), and its normalisation
    /// as a value a layer may make fused with an activation after it.
    pub fn train_statistics(
        &self,
        ctx: &GpuContext,
        (x, y): (&Tensor, &Tensor),
        affine: Affine<'_>,
        saved: &Tensor,
        running: Option<&RunningStats>,
    ) -> Result<(Vec<Kernel>, Normalise)> {
        const OP: &str = "batchnorm_train_forward";
        let mut params = self.params(OP, x, y, affine)?;
        let c = params.channels as usize;
        check_saved(OP, saved, c)?;
        if params.batch * params.inner < 2 {
            // PyTorch: "Expected more than 1 value per channel when training" (whenever batch
            // statistics are used, with running statistics or without).
            return Err(Error::shape(
                OP,
                format!(
                    "{:?} has one value per channel: batch statistics need two or more",
                    x.shape()
                ),
            ));
        }
        if let Some(r) = running {
            check_running(OP, r, c)?;
            params.update_running = 1;
            params.running_offset = r.offset() as u32;
        }
        let uniform = bytemuck::bytes_of(&params);
        let (partials, groups) = partials_for(ctx, &params, "batchnorm statistics partials");
        let first = ctx.kernel(
            &self.desc("batchnorm_stats_partial"),
            &[
                ("params", Arg::Uniform(uniform)),
                ("x", x.arg()),
                ("partials", Arg::Buffer(&partials)),
            ],
            grid_1d(groups * WG as usize, WG),
        )?;
        let unused;
        let pending = match running {
            Some(r) => r.buffer(),
            None => {
                unused = ctx.alloc_storage("no running statistics", 16);
                &unused
            }
        };
        let stats = ctx.kernel(
            &self.desc("batchnorm_stats_final"),
            &[
                ("params", Arg::Uniform(uniform)),
                ("partials", Arg::Buffer(&partials)),
                ("stats_out", saved.arg()),
                ("pending", Arg::Buffer(pending)),
            ],
            [1, 1, 1],
        )?;
        let apply = Normalise::new(self, &params, (x, y), affine, (Some(saved), None));
        Ok((vec![first, stats], apply))
    }

    /// Eval forward on the running statistics (`committed`): `y = act((x − running_mean) /
    /// sqrt(running_var + eps) · weight + bias)`. One kernel.
    pub fn eval_forward(
        &self,
        ctx: &GpuContext,
        (x, y): (&Tensor, &Tensor),
        affine: Affine<'_>,
        running: &RunningStats,
    ) -> Result<Kernel> {
        self.eval_normalise((x, y), affine, running)?.kernel(ctx)
    }

    /// [`Self::eval_forward`]'s kernel as a value a layer may make fused with an activation.
    pub fn eval_normalise(
        &self,
        (x, y): (&Tensor, &Tensor),
        affine: Affine<'_>,
        running: &RunningStats,
    ) -> Result<Normalise> {
        const OP: &str = "batchnorm_eval_forward";
        let mut params = self.params(OP, x, y, affine)?;
        check_running(OP, running, params.channels as usize)?;
        params.from_running = 1;
        params.running_offset = running.offset() as u32;
        Ok(Normalise::new(
            self,
            &params,
            (x, y),
            affine,
            (None, Some(running)),
        ))
    }

    /// Backward of [`BatchNorm::train_forward`] (batch statistics): `dx` (overwritten) =
    /// `(g − mean(g) − x̂ · mean(g·x̂)) · invstd · weight`, `dweight += Σ g·x̂`, `dbias += Σ g`
    /// (f32 `[C]`, accumulated; `None` for a frozen or absent parameter), with `g` = `dy`, or
    /// the fused activation's input gradient (recomputed from x: nothing more is saved).
    /// Three kernels.
    pub fn backward(
        &self,
        ctx: &GpuContext,
        (x, dy, dx): (&Tensor, &Tensor, &Tensor),
        affine: Affine<'_>,
        saved: &Tensor,
        (dweight, dbias): (Option<&Tensor>, Option<&Tensor>),
    ) -> Result<Vec<Kernel>> {
        const OP: &str = "batchnorm_backward";
        let mut params = self.params(OP, x, dy, affine)?;
        let c = params.channels as usize;
        if dx.shape() != x.shape() {
            return Err(Error::shape(
                OP,
                format!("dx {:?} differs from x {:?}", dx.shape(), x.shape()),
            ));
        }
        check_saved(OP, saved, c)?;
        for (what, t) in [("dweight", dweight), ("dbias", dbias)] {
            if let Some(t) = t {
                check_f32(OP, what, t)?;
                if t.numel() != c {
                    return Err(Error::shape(OP, format!("{what} must hold {c} values")));
                }
            }
        }
        params.has_dweight = dweight.is_some() as u32;
        params.has_dbias = dbias.is_some() as u32;
        let uniform = bytemuck::bytes_of(&params);
        let placeholder = affine.placeholder(ctx);
        let (weight, bias) = affine.args(&placeholder);
        let (partials, groups) = partials_for(ctx, &params, "batchnorm gradient partials");
        let first = ctx.kernel(
            &self.desc("batchnorm_backward_partial"),
            &[
                ("params", Arg::Uniform(uniform)),
                ("x", x.arg()),
                ("dy", dy.arg()),
                ("weight", weight),
                ("bias", bias),
                ("stats", saved.arg()),
                ("partials", Arg::Buffer(&partials)),
            ],
            grid_1d(groups * WG as usize, WG),
        )?;
        // WebGPU refuses two writable bindings of one range: each absent gradient gets a
        // one-word buffer of its own.
        let (no_dw, no_db) = (
            Tensor::zeros(ctx, &[1], DType::F32),
            Tensor::zeros(ctx, &[1], DType::F32),
        );
        let coefs = ctx.alloc_storage("batchnorm gradient coefficients", 8 * c as u64);
        let sums = ctx.kernel(
            &self.desc("batchnorm_backward_final"),
            &[
                ("params", Arg::Uniform(uniform)),
                ("partials", Arg::Buffer(&partials)),
                ("dweight", dweight.unwrap_or(&no_dw).arg()),
                ("dbias", dbias.unwrap_or(&no_db).arg()),
                ("stats_out", Arg::Buffer(&coefs)),
            ],
            grid_1d(c, SMALL_WG),
        )?;
        let dx_kernel = ctx.kernel(
            &self.desc("batchnorm_backward_dx"),
            &[
                ("params", Arg::Uniform(uniform)),
                ("x", x.arg()),
                ("dy", dy.arg()),
                ("dx", dx.arg()),
                ("weight", affine.args(&placeholder).0),
                ("bias", affine.args(&placeholder).1),
                ("stats", saved.arg()),
                ("coefs", Arg::Buffer(&coefs)),
            ],
            grid_1d(x.numel().div_ceil(2), WG),
        )?;
        Ok(vec![first, sums, dx_kernel])
    }
}

fn check_saved(op: &'static str, saved: &Tensor, channels: usize) -> Result<()> {
    check_f32(op, "the saved statistics", saved)?;
    if saved.numel() != 2 * channels {
        return Err(Error::shape(
            op,
            format!(
                "the saved statistics {:?} must hold 2 × {channels} values (mean, invstd)",
                saved.shape()
            ),
        ));
    }
    Ok(())
}

fn check_running(op: &'static str, running: &RunningStats, channels: usize) -> Result<()> {
    if running.channels() != channels {
        return Err(Error::shape(
            op,
            format!(
                "running statistics of {} channels for x of {channels}",
                running.channels()
            ),
        ));
    }
    Ok(())
}

/// The first passes' scratch (a pair of f32 per channel and chunk) and their workgroups.
fn partials_for(ctx: &GpuContext, params: &Params, label: &str) -> (Arc<GpuBuffer>, usize) {
    let groups = (params.channels * params.chunks) as usize;
    (ctx.alloc_storage(label, 8 * groups as u64), groups)
}
