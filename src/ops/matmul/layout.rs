//! Where a batch of matrices lives in a tensor ([`MatrixLayout`]), and the checks of a layout
//! against its tensor.

use crate::error::{Error, Result};
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
pub(super) fn check_layout(
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
pub(super) fn outputs_disjoint(
    l: &MatrixLayout,
    (rows, cols): (usize, usize),
    batch: [usize; 2],
) -> bool {
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

/// Whether an aligned variant may read this operand as 16-byte vectors of `per_vector`
/// elements: every row start (offset, ld, batch strides) is a multiple of a vector, and the
/// tensor's binding starts and ends on 16 bytes.
pub(super) fn vector_ready(t: &Tensor, l: &MatrixLayout, per_vector: usize) -> bool {
    let m = |v: usize| v.is_multiple_of(per_vector);
    m(l.offset)
        && m(l.ld)
        && l.batch_stride.into_iter().all(m)
        && t.byte_offset().is_multiple_of(16)
        && t.binding_size().is_multiple_of(16)
}
