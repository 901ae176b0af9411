//! Where attention's q, k and v sit: the one description the fused kernels
//! (`ops::flash_attention`) and the manual path (`ops::attention::manual_*`) read.
//!
//! Each of q, k and v is a tensor and, in it, where its heads sit: element (sample b,
//! position i, head h, channel d) at `offset + (b·T + i)·row + h·hs + d` ([`HeadRows`]).
//! That covers nanoGPT's packed `c_attn` output (one tensor `[B, T, 3C]`, bound three times
//! at offsets 0, C, 2C), Hugging Face's separate `q_proj` / `k_proj` / `v_proj` outputs, and
//! grouped-query attention: `kv_heads` key/value heads, each shared by `heads / kv_heads`
//! query heads (query head h reads key/value head `h / (heads / kv_heads)`, `repeat_kv`'s
//! mapping) with no repeated copy of k and v. The gradients dq, dk and dv sit where q, k and
//! v do, in tensors of their own.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// Where the heads of one of q, k, v sit in its tensor: element (sample b, position i, head
/// h, channel d) at `offset + (b·T + i)·row + h·hs + d`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeadRows {
    pub offset: usize,
    /// Elements from one position to the next.
    pub row: usize,
}

/// The heads of one attention and where q, k and v sit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QkvLayout {
    /// Query heads nh.
    pub heads: usize,
    /// Key/value heads: nh for multi-head attention, fewer (dividing nh) for grouped-query
    /// attention, 1 for multi-query attention.
    pub kv_heads: usize,
    pub head_size: usize,
    pub q: HeadRows,
    pub k: HeadRows,
    pub v: HeadRows,
}

impl QkvLayout {
    /// One tensor `[B, T, (nh + 2·nkv)·hs]` holding q, k and v side by side in each row:
    /// nanoGPT's `c_attn` output where `kv_heads = heads` (`[B, T, 3C]`).
    pub fn packed(heads: usize, kv_heads: usize, head_size: usize) -> Self {
        let (q, kv) = (heads * head_size, kv_heads * head_size);
        let row = q + 2 * kv;
        QkvLayout {
            heads,
            kv_heads,
            head_size,
            q: HeadRows { offset: 0, row },
            k: HeadRows { offset: q, row },
            v: HeadRows {
                offset: q + kv,
                row,
            },
        }
    }

    /// Three tensors: q `[B, T, nh·hs]`, k and v `[B, T, nkv·hs]` (Hugging Face's `q_proj`,
    /// `k_proj` and `v_proj` outputs).
    pub fn separate(heads: usize, kv_heads: usize, head_size: usize) -> Self {
        let rows = |n: usize| HeadRows {
            offset: 0,
            row: n * head_size,
        };
        QkvLayout {
            heads,
            kv_heads,
            head_size,
            q: rows(heads),
            k: rows(kv_heads),
            v: rows(kv_heads),
        }
    }

    /// Query heads per key/value head.
    pub fn group(&self) -> usize {
        self.heads / self.kv_heads.max(1)
    }

    /// C: the width of the output y `[B, T, nh·hs]`.
    pub fn width(&self) -> usize {
        self.heads * self.head_size
    }

    /// Positive sizes, kv_heads dividing heads, and rows that hold their heads.
    pub(crate) fn check(&self, op: &'static str) -> Result<()> {
        let (nh, nkv, hs) = (self.heads, self.kv_heads, self.head_size);
        if nh == 0 || nkv == 0 || hs == 0 || !nh.is_multiple_of(nkv) {
            return Err(Error::shape(
                op,
                format!(
                    "heads {nh}, key/value heads {nkv}, head size {hs}: all positive, the \
                     key/value heads dividing the heads"
                ),
            ));
        }
        for (name, rows, n) in self.parts() {
            if rows.row < n * hs {
                return Err(Error::shape(
                    op,
                    format!(
                        "{name}'s rows of {} elements cannot hold its {n} heads of {hs}",
                        rows.row
                    ),
                ));
            }
        }
        Ok(())
    }

    /// (name, rows, heads) of q, k and v.
    fn parts(&self) -> [(&'static str, HeadRows, usize); 3] {
        [
            ("q", self.q, self.heads),
            ("k", self.k, self.kv_heads),
            ("v", self.v, self.kv_heads),
        ]
    }
}

/// q, k and v of one attention (or their gradients dq, dk, dv, which sit where q, k and v
/// do): three tensors, or one bound three times, and where their heads sit.
#[derive(Clone, Copy, Debug)]
pub struct Qkv<'t> {
    pub q: &'t Tensor,
    pub k: &'t Tensor,
    pub v: &'t Tensor,
    pub layout: QkvLayout,
}

impl<'t> Qkv<'t> {
    /// One packed tensor (see [`QkvLayout::packed`]).
    pub fn packed(qkv: &'t Tensor, heads: usize, kv_heads: usize, head_size: usize) -> Self {
        Qkv {
            q: qkv,
            k: qkv,
            v: qkv,
            layout: QkvLayout::packed(heads, kv_heads, head_size),
        }
    }

    /// Three tensors (see [`QkvLayout::separate`]).
    pub fn separate(
        (q, k, v): (&'t Tensor, &'t Tensor, &'t Tensor),
        heads: usize,
        kv_heads: usize,
        head_size: usize,
    ) -> Self {
        Qkv {
            q,
            k,
            v,
            layout: QkvLayout::separate(heads, kv_heads, head_size),
        }
    }

    /// Other tensors at the same places (the gradients of these).
    pub fn like(&self, (q, k, v): (&'t Tensor, &'t Tensor, &'t Tensor)) -> Qkv<'t> {
        Qkv {
            q,
            k,
            v,
            layout: self.layout,
        }
    }

    /// The three tensors, named.
    pub(crate) fn tensors(&self) -> [(&'static str, &'t Tensor); 3] {
        [("q", self.q), ("k", self.k), ("v", self.v)]
    }

    /// Whether k and v are one tensor (the same range of one buffer): a kernel writing both
    /// must then write them through one binding, as WebGPU forbids two writable bindings of
    /// overlapping ranges.
    pub(crate) fn shared_kv(&self) -> bool {
        Arc::ptr_eq(self.k.buffer(), self.v.buffer())
            && self.k.byte_offset() == self.v.byte_offset()
            && self.k.binding_size() == self.v.binding_size()
    }

    /// The layout's checks, and every head of `batch` sequences of `t` positions inside its
    /// tensor; `names` says what the three tensors are called in errors (q, k, v or dq, dk,
    /// dv).
    pub(crate) fn check(
        &self,
        op: &'static str,
        names: [&str; 3],
        batch: usize,
        t: usize,
    ) -> Result<()> {
        self.layout.check(op)?;
        let hs = self.layout.head_size;
        let rows = batch * t;
        for ((_, tensor), ((_, at, heads), name)) in self
            .tensors()
            .into_iter()
            .zip(self.layout.parts().into_iter().zip(names))
        {
            // One past the last element: (rows − 1)·row + offset + heads·hs.
            let end = rows
                .checked_sub(1)
                .and_then(|r| r.checked_mul(at.row))
                .and_then(|n| n.checked_add(at.offset + heads * hs))
                .unwrap_or(0);
            if rows > 0 && tensor.numel() < end {
                return Err(Error::shape(
                    op,
                    format!(
                        "{name} {:?} must hold {end} elements ({batch} × {t} positions of \
                         {heads} heads of {hs}, rows {} apart from element {})",
                        tensor.shape(),
                        at.row,
                        at.offset
                    ),
                ));
            }
            if u32::try_from(end).is_err() {
                return Err(Error::shape(op, format!("{name} exceeds 2^32 elements")));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_and_separate_layouts_place_every_head() {
        // SmolLM2-135M's attention: 9 query heads, 3 key/value heads of 64.
        let p = QkvLayout::packed(9, 3, 64);
        assert_eq!(
            p.q,
            HeadRows {
                offset: 0,
                row: 960
            }
        );
        assert_eq!(
            p.k,
            HeadRows {
                offset: 576,
                row: 960
            }
        );
        assert_eq!(
            p.v,
            HeadRows {
                offset: 768,
                row: 960
            }
        );
        assert_eq!((p.group(), p.width()), (3, 576));
        let s = QkvLayout::separate(9, 3, 64);
        assert_eq!(
            s.q,
            HeadRows {
                offset: 0,
                row: 576
            }
        );
        assert_eq!(
            s.k,
            HeadRows {
                offset: 0,
                row: 192
            }
        );
        // nanoGPT's [B, T, 3C].
        let gpt = QkvLayout::packed(4, 4, 16);
        assert_eq!((gpt.k.offset, gpt.v.offset, gpt.q.row), (64, 128, 192));
        assert!(p.check("t").is_ok() && s.check("t").is_ok());
    }

    #[test]
    fn bad_head_counts_and_short_rows_are_errors() {
        let e = QkvLayout::packed(9, 2, 64).check("t").unwrap_err();
        assert!(e.to_string().contains("dividing the heads"), "{e}");
        let mut short = QkvLayout::separate(4, 2, 8);
        short.k.row = 15;
        let e = short.check("t").unwrap_err();
        assert!(e.to_string().contains("k's rows of 15"), "{e}");
    }
}
