//! Strided batched matmul (attention): its checks and the launch.

use super::launch::{Operand, launch};
use super::layout::{MatrixLayout, check_layout, outputs_disjoint};
use super::{MatmulKernel, MatmulOpts};
use crate::dtype::Storage;
use crate::error::{Error, Result};
use crate::gpu::{GpuContext, Kernel};
use crate::tensor::Tensor;

/// `c[z] (+)= op(a[z]) · op(b[z])` for every z = (z0, z1) of `batch`, accumulated in f32:
/// op(a[z]) is [M, K] (`a` stores [K, M] with `trans_a`), op(b[z]) is [K, N] (`b` stores
/// [N, K] with `trans_b`), c[z] is [M, N]. `opts.accumulate` adds to c; `opts.bias` is not
/// supported here. Every storage combination of [`matmul`] works. When c's offset, ld and
/// batch strides are all even, each thread writes its column pairs as whole words (one
/// store2); otherwise (e.g. S of an odd T) every element is stored on its own, atomically on
/// packed 16-bit storages, which is race-free but slower, as for a plain matmul of odd N.
/// Layouts are checked against the tensors' element counts before anything is dispatched,
/// and the output matrices must not overlap (that would race).
///
/// Attention (nanoGPT's CausalSelfAttention) with qkv [B, T, 3C], nh heads of hs = C / nh,
/// batch [B, nh]: q of head h is `MatrixLayout { offset: h * hs, ld: 3 * C, batch_stride:
/// [T * 3 * C, hs] }`, k the same at offset C + h * hs, v at 2C + h * hs; S [B, nh, T, T]
/// is `MatrixLayout::stacked(T, T, [B, nh])`; y [B, T, C] is `{ offset: 0, ld: C,
/// batch_stride: [T * C, hs] }`. Then S = q·kᵀ is `(q, k, S)` with `trans_b`.
#[allow(clippy::too_many_arguments)]
pub fn batched_matmul(
    ctx: &GpuContext,
    a: &Tensor,
    a_layout: MatrixLayout,
    b: &Tensor,
    b_layout: MatrixLayout,
    c: &Tensor,
    c_layout: MatrixLayout,
    m: usize,
    n: usize,
    k: usize,
    batch: [usize; 2],
    opts: MatmulOpts,
) -> Result<Kernel> {
    batched_matmul_with(
        ctx,
        (a, a_layout),
        (b, b_layout),
        (c, c_layout),
        (m, n, k),
        batch,
        opts,
        MatmulKernel::Auto,
    )
}

/// [`batched_matmul`] with a chosen kernel body (tests run both on any adapter).
#[allow(clippy::too_many_arguments)]
pub fn batched_matmul_with(
    ctx: &GpuContext,
    (a, a_layout): (&Tensor, MatrixLayout),
    (b, b_layout): (&Tensor, MatrixLayout),
    (c, c_layout): (&Tensor, MatrixLayout),
    (m, n, k): (usize, usize, usize),
    batch: [usize; 2],
    opts: MatmulOpts,
    kernel: MatmulKernel,
) -> Result<Kernel> {
    let err = |msg: String| Err(Error::shape("batched_matmul", msg));
    if opts.bias.is_some() {
        return err("bias is not supported by batched_matmul (add it separately)".into());
    }
    let a_dims = if opts.trans_a { (k, m) } else { (m, k) };
    let b_dims = if opts.trans_b { (n, k) } else { (k, n) };
    check_layout("a", a, &a_layout, a_dims, batch)?;
    check_layout("b", b, &b_layout, b_dims, batch)?;
    check_layout("c", c, &c_layout, (m, n), batch)?;
    if !outputs_disjoint(&c_layout, (m, n), batch) {
        return err(format!(
            "c: layout {c_layout:?} makes the [{m}, {n}] output matrices of batch {batch:?} overlap \
             (their writes would race)"
        ));
    }
    let storages = [a.storage(), b.storage(), c.storage()];
    if storages.contains(&Storage::F16) && storages.contains(&Storage::F16Packed) {
        return err(format!(
            "mixes native and packed f16 storages ({storages:?}); one context uses one"
        ));
    }
    let fits = |v: usize| v <= u32::MAX as usize;
    if ![m, n, k, batch[0], batch[1], batch[0] * batch[1]]
        .into_iter()
        .all(fits)
    {
        return err(format!(
            "sizes m {m}, n {n}, k {k}, batch {batch:?} must fit in 32 bits"
        ));
    }
    super::check_table(ctx, kernel, a.storage(), b.storage())?;
    // Strides of a batch dimension of extent 1 are never used (and are passed as 0); with a
    // zero-sized operand nothing is indexed. Otherwise the bounds check above keeps every
    // offset, stride and ld below the tensor's element count, which fits u32.
    launch(
        ctx,
        Operand {
            tensor: a,
            layout: clamp_unused(a_layout, a_dims, batch),
        },
        Operand {
            tensor: b,
            layout: clamp_unused(b_layout, b_dims, batch),
        },
        Operand {
            tensor: c,
            layout: clamp_unused(c_layout, (m, n), batch),
        },
        (m as u32, n as u32, k as u32),
        [batch[0] as u32, batch[1] as u32],
        &opts,
        kernel,
    )
}

/// The layout with the fields the shader never uses for these sizes zeroed, so every field
/// passed fits u32 (unused fields may hold anything the caller liked).
fn clamp_unused(l: MatrixLayout, (rows, cols): (usize, usize), batch: [usize; 2]) -> MatrixLayout {
    if rows == 0 || cols == 0 || batch.contains(&0) {
        return MatrixLayout {
            offset: 0,
            ld: 0,
            batch_stride: [0, 0],
        };
    }
    MatrixLayout {
        offset: l.offset,
        ld: if rows > 1 { l.ld } else { 0 },
        batch_stride: [
            if batch[0] > 1 { l.batch_stride[0] } else { 0 },
            if batch[1] > 1 { l.batch_stride[1] } else { 0 },
        ],
    }
}
