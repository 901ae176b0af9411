//! Flat buffers bound in pieces. A model's flat f32 parameter, gradient and moment buffers
//! (`nn::params`, `optim`) may pass the adapter's `max_storage_buffer_binding_size`
//! (SmolLM2-135M: 538 MB each; WebGPU's default limit, which lavapipe keeps, is 128 MiB), so
//! every kernel over a whole flat buffer (unscale, clipping's norm, the optimizer step, the
//! weight cast, rounding) is made once per piece: consecutive element ranges, each bound
//! alone. A model whose buffers fit has one piece, and its kernels are what they were.

use std::ops::Range;

use super::GpuContext;

/// Pieces start at multiples of this many elements: the elements one workgroup of the
/// unscale, clipping and optimizer kernels covers (256 threads × 4), so a piece's workgroups
/// see the same elements, and clipping's partial sums the same values, as one dispatch over
/// the whole buffer does (same bits). It also keeps each piece's byte offset aligned for
/// every storage (2048 bytes at 2 bytes a value; WebGPU's offset alignment is at most 256).
pub const PIECE_ALIGN: usize = 1024;

/// The pieces of `n` elements of 4 bytes each under `limit` bytes per binding: as few as
/// fit, every one full but the last.
pub fn pieces_under(limit: u64, n: usize) -> Vec<Range<usize>> {
    let per_piece = (limit as usize / 4 / PIECE_ALIGN).max(1) * PIECE_ALIGN;
    (0..n.div_ceil(per_piece).max(1))
        .map(|i| i * per_piece..((i + 1) * per_piece).min(n))
        .collect()
}

impl GpuContext {
    /// The element ranges a flat f32 buffer of `n` elements is bound in: each within this
    /// adapter's `max_storage_buffer_binding_size` (one range when the whole buffer is).
    pub fn flat_pieces(&self, n: usize) -> Vec<Range<usize>> {
        pieces_under(self.caps.max_storage_buffer_binding_size, n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_cover_the_range_in_aligned_full_pieces() {
        assert_eq!(pieces_under(128 << 20, 1000), vec![0..1000]);
        assert_eq!(pieces_under(128 << 20, 0), vec![0..0]);
        // SmolLM2-135M's flat buffer (padding included) under 128 MiB: 33,554,432 a piece.
        let n = 134_515_008 + 5_000;
        let p = pieces_under(128 << 20, n);
        assert_eq!(p.len(), 5);
        assert_eq!(p[1], 33_554_432..67_108_864);
        assert_eq!(p[4].end, n);
        // A limit that is not a multiple of the alignment rounds the piece down.
        let p = pieces_under(4 * PIECE_ALIGN as u64 * 3 + 100, 10_000);
        assert_eq!(p, vec![0..3072, 3072..6144, 6144..9216, 9216..10_000]);
        for w in p.windows(2) {
            assert_eq!(w[0].end, w[1].start);
            assert_eq!(w[1].start % PIECE_ALIGN, 0);
        }
    }
}
