//! Histogram of log2|g| over a range of a flat f32 buffer (`shaders/histogram.wgsl`):
//! the "why loss scaling matters" picture of a layer's gradients, unscaled and as scaled by
//! the GradScaler's current scale, computed on the GPU in one dispatch.
//!
//! Bins are whole binades read from the f32 bit pattern, so the GPU and
//! [`log2_histogram_cpu`] agree exactly. The scaled histogram multiplies in f32 on the GPU
//! (`g * scale`, correctly rounded); f32 subnormal inputs may flush to zero there.

use std::sync::Arc;

use super::scaler_state::SCALER_STATE;
use crate::error::{Error, Result};
use crate::gpu::{Arg, GpuBuffer, GpuContext, Kernel, KernelDesc};
use crate::shader::{ShaderDecl, f32_only};

pub static SHADER: ShaderDecl = ShaderDecl {
    name: "histogram",
    source: include_str!("../../shaders/histogram.wgsl"),
    structs: &[Params::WGSL],
    consts: &[SCALER_STATE],
    variants: f32_only,
};

/// Most binades one histogram can count (the shader's workgroup array size).
pub const MAX_BINS: usize = 128;
/// Threads per workgroup, and the most workgroups one dispatch launches (grid-stride loop).
const WG: usize = 256;
const MAX_GROUPS: usize = 64;

/// Which binades to count: bin `k` holds |x| in `[2^(lo+k), 2^(lo+k+1))`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HistogramRange {
    pub lo: i32,
    pub bins: usize,
}

impl Default for HistogramRange {
    /// 2^-48 .. 2^24: gradients of small models down past f16's flush-to-zero (2^-24),
    /// scaled gradients up past its overflow (65504 < 2^16).
    fn default() -> Self {
        Self { lo: -48, bins: 72 }
    }
}

impl HistogramRange {
    /// u32 words of the counts buffer: two histograms of `bins + 4` slots.
    pub fn words(&self) -> usize {
        2 * (self.bins + 4)
    }

    pub fn bytes(&self) -> u64 {
        4 * self.words() as u64
    }

    /// Bins past the range go to `below` / `above`; the range itself must be sane.
    fn validate(&self) -> Result<()> {
        if self.bins == 0 || self.bins > MAX_BINS {
            return Err(Error::InvalidArgument(format!(
                "histogram needs 1 to {MAX_BINS} bins, got {}",
                self.bins
            )));
        }
        Ok(())
    }
}

/// One histogram of log2|x|.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Log2Histogram {
    /// Binade of `bins[0]`.
    pub lo: i32,
    pub bins: Vec<u32>,
    /// Nonzero values below `2^lo`.
    pub below: u32,
    /// Values at or above `2^(lo + bins.len())`.
    pub above: u32,
    pub zero: u32,
    pub non_finite: u32,
}

impl Log2Histogram {
    /// Values counted, every slot included.
    pub fn total(&self) -> u64 {
        self.bins.iter().map(|&c| c as u64).sum::<u64>()
            + [self.below, self.above, self.zero, self.non_finite]
                .iter()
                .map(|&c| c as u64)
                .sum::<u64>()
    }

    /// Finite nonzero values with |x| < 2^e (bins entirely below binade `e`, plus `below`).
    pub fn count_below_binade(&self, e: i32) -> u64 {
        let mut n = self.below as u64;
        for (k, &c) in self.bins.iter().enumerate() {
            if self.lo + (k as i32) < e {
                n += c as u64;
            }
        }
        n
    }

    /// Finite values with |x| >= 2^e (bins from binade `e` on, plus `above`).
    pub fn count_from_binade(&self, e: i32) -> u64 {
        let mut n = self.above as u64;
        for (k, &c) in self.bins.iter().enumerate() {
            if self.lo + (k as i32) >= e {
                n += c as u64;
            }
        }
        n
    }
}

/// The unscaled and the scaled histogram of one dispatch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GradHistograms {
    pub unscaled: Log2Histogram,
    pub scaled: Log2Histogram,
}

impl GradHistograms {
    /// Decode the counts buffer written by [`log2_histogram`].
    pub fn from_words(range: HistogramRange, words: &[u32]) -> Result<Self> {
        if words.len() < range.words() {
            return Err(Error::InvalidArgument(format!(
                "histogram counts: {} words, expected {}",
                words.len(),
                range.words()
            )));
        }
        let one = |h: usize| {
            let base = h * (range.bins + 4);
            let w = &words[base..base + range.bins + 4];
            Log2Histogram {
                lo: range.lo,
                bins: w[..range.bins].to_vec(),
                below: w[range.bins],
                above: w[range.bins + 1],
                zero: w[range.bins + 2],
                non_finite: w[range.bins + 3],
            }
        };
        Ok(Self {
            unscaled: one(0),
            scaled: one(1),
        })
    }
}

/// The binade of a finite nonzero f32 (`floor(log2|x|)`), from its bits.
pub fn binade(x: f32) -> Option<i32> {
    let bits = x.to_bits() & 0x7fff_ffff;
    if bits == 0 || bits >= 0x7f80_0000 {
        return None;
    }
    let field = bits >> 23;
    Some(if field == 0 {
        (31 - bits.leading_zeros() as i32) - 149
    } else {
        field as i32 - 127
    })
}

fn count_into(h: &mut Log2Histogram, x: f32) {
    let bits = x.to_bits() & 0x7fff_ffff;
    if bits == 0 {
        h.zero += 1;
        return;
    }
    let Some(e) = binade(x) else {
        h.non_finite += 1;
        return;
    };
    let k = e - h.lo;
    if k < 0 {
        h.below += 1;
    } else if k as usize >= h.bins.len() {
        h.above += 1;
    } else {
        h.bins[k as usize] += 1;
    }
}

/// CPU reference of the kernel: histograms of `values` and of `values * scale` (f32).
pub fn log2_histogram_cpu(values: &[f32], scale: f32, range: HistogramRange) -> GradHistograms {
    let empty = Log2Histogram {
        lo: range.lo,
        bins: vec![0; range.bins],
        ..Default::default()
    };
    let mut out = GradHistograms {
        unscaled: empty.clone(),
        scaled: empty,
    };
    for &g in values {
        count_into(&mut out.unscaled, g);
        count_into(&mut out.scaled, g * scale);
    }
    out
}

crate::wgsl_struct! {
    struct Params {
        /// first element of the range
        offset: u32,
        /// elements in the range
        len: u32,
        /// binade of bin 0
        lo: i32,
        /// binades counted (at most MAX_BINS)
        bins: u32,
    }
}

/// Plan the histogram of `values[offset .. offset + len]` (f32) into `counts`
/// (`range.bytes()` bytes, u32 words, zeroed by the caller before each dispatch; counts
/// add up). `scale_state` is a GradScaler state buffer: its word 0 scales the second
/// histogram.
pub fn log2_histogram(
    ctx: &GpuContext,
    values: &Arc<GpuBuffer>,
    offset: usize,
    len: usize,
    scale_state: &Arc<GpuBuffer>,
    counts: &Arc<GpuBuffer>,
    range: HistogramRange,
) -> Result<Kernel> {
    range.validate()?;
    if 4 * (offset + len) as u64 > values.size() {
        return Err(Error::shape(
            "log2_histogram",
            format!(
                "range {offset}..{} is past the end of a {}-byte buffer",
                offset + len,
                values.size()
            ),
        ));
    }
    if counts.size() < range.bytes() {
        return Err(Error::shape(
            "log2_histogram",
            format!(
                "counts buffer of {} bytes, need {}",
                counts.size(),
                range.bytes()
            ),
        ));
    }
    let params = Params {
        offset: offset as u32,
        len: len as u32,
        lo: range.lo,
        bins: range.bins as u32,
    };
    let groups = len.div_ceil(WG).clamp(1, MAX_GROUPS) as u32;
    ctx.kernel(
        &KernelDesc::new(&SHADER, "log2_histogram"),
        &[
            ("params", Arg::Uniform(bytemuck::bytes_of(&params))),
            ("values", Arg::Buffer(values)),
            ("scale_state", Arg::Buffer(scale_state)),
            ("counts", Arg::Buffer(counts)),
        ],
        [groups, 1, 1],
    )
}
