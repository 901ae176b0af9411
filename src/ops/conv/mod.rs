//! 2-D convolution (`shaders/conv.wgsl`): forward, backward-input and backward-weight, each
//! an implicit GEMM tiled in workgroup memory (see the shader's header for the mapping). The
//! forward and the input gradient are one pixel-row GEMM in the shader (`src` gathered into
//! `dst`), differing only in the gather and the weight layout.
//!
//! Layouts are PyTorch's: x `[N, C, H, W]`, weight `[O, C, kh, kw]`, bias `[O]`,
//! y `[N, O, Ho, Wo]`. Every tensor may have its own storage (f16 activations with f32 weight
//! gradients, ...); the kernels are specialised per storage and accumulate in f32. The kernel
//! size is a compile-time constant of the shader (one pipeline per kernel size).
//!
//! Native f16 inputs where tensor cores are used run the same GEMMs on cooperative matrices
//! (`coop`, `shaders/conv_coop.wgsl`), with the same epilogues and the same deterministic
//! split-K for the weight gradient.

mod coop;
mod gemm;
pub(crate) mod run;
mod shape;

use super::Accumulate;
use crate::dtype::{DType, Storage};
use crate::error::Result;
use crate::gpu::{GpuContext, Kernel};
use crate::ops::table_check::{self, TableUse};
use crate::tensor::Tensor;

pub use coop::COOP_SHADER;
pub use gemm::SHADER;
pub use shape::{Conv2dParams, conv2d_output_hw};

/// y[N,O,Ho,Wo] = conv(x[N,C,H,W], w[O,C,kh,kw]) (+ bias[O]); NCHW, PyTorch semantics
/// (cross-correlation, zero padding).
pub fn conv2d_forward(
    ctx: &GpuContext,
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    y: &Tensor,
    p: Conv2dParams,
) -> Result<Kernel> {
    check_table(ctx, &[x.storage(), w.storage()])?;
    run::forward(ctx, x, w, bias, y, p)
}

/// dx[N,C,H,W] = gradient of the convolution with respect to its input (overwrites dx).
pub fn conv2d_backward_input(
    ctx: &GpuContext,
    dy: &Tensor,
    w: &Tensor,
    dx: &Tensor,
    p: Conv2dParams,
) -> Result<Kernel> {
    check_table(ctx, &[dy.storage(), w.storage()])?;
    run::backward_input(ctx, dy, w, dx, p)
}

/// dw[O,C,kh,kw] = (or, with [`Accumulate::Add`], +=) gradient with respect to the weight,
/// rounded to `round_to` first when given (the dtype the forward ran in: PyTorch's f16
/// weight gradient, cast to f32). dw is usually f32 while x and dy are f16. One kernel, or two
/// when the reduction over the batch's pixels is split (split-K: partial sums in a scratch
/// buffer made here, then added in a fixed order).
pub fn conv2d_backward_weight(
    ctx: &GpuContext,
    x: &Tensor,
    dy: &Tensor,
    dw: &Tensor,
    p: Conv2dParams,
    accumulate: Accumulate,
    round_to: Option<DType>,
) -> Result<Vec<Kernel>> {
    check_table(ctx, &[x.storage(), dy.storage()])?;
    run::backward_weight(ctx, x, dy, dw, p, accumulate, round_to)
}

/// A convolution on tensor cores takes its tiles from the kernel table: a table loaded from a
/// file is run against the CPU reference first ([`crate::ops::table_check`], once).
fn check_table(ctx: &GpuContext, inputs: &[Storage]) -> Result<()> {
    match coop::config(ctx, inputs) {
        Some(_) => table_check::ensure_checked(ctx, &[TableUse::Coop]),
        None => Ok(()),
    }
}
