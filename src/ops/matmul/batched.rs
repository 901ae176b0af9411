//! Strided batched matmul (attention): layouts, their checks, and the launch.

use super::launch::{Operand, launch};
use super::{MatmulKernel, MatmulOpts};
use crate::dtype::Storage;
use crate::error::{Error, Result};
use crate::gpu::{GpuContext, Kernel};
use crate::tensor::Tensor;

/// Where a batch of matrices lives in a tensor's buffer (in elements). Matrix z = (z0, z1)
/// of the batch starts at `offset + z0 * batch_stride[0] + z1 * batch_stride[1]`, and its
/// rows are `ld` elements apart. The tensor's own shape is ignored: only its element count
/// (for the bounds check) and storage matter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatrixLayout {
    pub offset: usize,
    /// Row stride of the stored matrix (for `trans_a` the stored matrix is [K, M]).
    pub ld: usize,
    pub batch_stride: [usize; 2],
}

impl MatrixLayout {
    /// One dense `rows x cols` matrix at offset 0, the same for every batch entry
    /// (batch strides 0: broadcast). Give strides with [`MatrixLayout::with_batch_stride`],
    /// or use [`MatrixLayout::stacked`] for a dense [b0, b1, rows, cols] tensor.
    pub fn contiguous(rows: usize, cols: usize) -> Self {
        let _ = rows;
        MatrixLayout {
            offset: 0,
            ld: cols,
            batch_stride: [0, 0],
        }
    }

    /// Dense matrices stacked as a [batch[0], batch[1], rows, cols] tensor.
    pub fn stacked(rows: usize, cols: usize, batch: [usize; 2]) -> Self {
        MatrixLayout {
            offset: 0,
            ld: cols,
            batch_stride: [batch[1] * rows * cols, rows * cols],
        }
    }

    pub fn with_offset(self, offset: usize) -> Self {
        MatrixLayout { offset, ..self }
    }

    pub fn with_batch_stride(self, batch_stride: [usize; 2]) -> Self {
        MatrixLayout {
            batch_stride,
            ..self
        }
    }
}

/// Check one operand's layout: the stored `rows x cols` matrices of every batch entry lie
/// inside the tensor, rows do not overlap, and every index fits the shader's u32 math.
fn check_layout(
    what: &str,
    t: &Tensor,
    l: &MatrixLayout,
    (rows, cols): (usize, usize),
    batch: [usize; 2],
) -> Result<()> {
    let err = |msg: String| Err(Error::shape("batched_matmul", format!("{what}: {msg}")));
    if t.numel() > u32::MAX as usize {
        return err(format!("{:?} has more than 2^32 elements", t.shape()));
    }
    if rows > 1 && l.ld < cols {
        return err(format!(
            "row stride ld = {} is less than the {cols} columns of its stored [{rows}, {cols}] matrix",
            l.ld
        ));
    }
    if rows == 0 || cols == 0 || batch.contains(&0) {
        return Ok(()); // nothing of it is read or written
    }
    // Largest element touched, in u128 so absurd strides cannot wrap.
    let last = l.offset as u128
        + (batch[0] as u128 - 1) * l.batch_stride[0] as u128
        + (batch[1] as u128 - 1) * l.batch_stride[1] as u128
        + (rows as u128 - 1) * l.ld as u128
        + cols as u128
        - 1;
    if last >= t.numel() as u128 {
        return err(format!(
            "layout {l:?} of {} [{rows}, {cols}] matrices (batch {batch:?}) reaches element {last}, \
             past the tensor's {} elements ({:?})",
            batch[0] * batch[1],
            t.numel(),
            t.shape()
        ));
    }
    Ok(())
}

/// True when no two elements of the batched output matrices share an address: with the
/// (stride, extent) pairs of columns, rows and both batch dimensions sorted by stride, each
/// stride must pass the span of everything below it (a mixed-radix layout). This accepts
/// the interleaved attention layouts (heads side by side in a row) and rejects any overlap.
fn outputs_disjoint(l: &MatrixLayout, (rows, cols): (usize, usize), batch: [usize; 2]) -> bool {
    if rows == 0 || cols == 0 || batch.contains(&0) {
        return true; // nothing is written
    }
    let mut dims: Vec<(usize, usize)> = [
        (1, cols),
        (l.ld, rows),
        (l.batch_stride[0], batch[0]),
        (l.batch_stride[1], batch[1]),
    ]
    .into_iter()
    .filter(|&(_, extent)| extent > 1)
    .collect();
    dims.sort();
    let mut span: u128 = 1; // elements covered by the dims so far (max offset + 1)
    for (stride, extent) in dims {
        if (stride as u128) < span {
            return false;
        }
        span += (extent as u128 - 1) * stride as u128;
    }
    true
}

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
