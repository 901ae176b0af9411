//! The AMP doctor's counters (`shaders/numerics.wgsl`): one reduction pass over a few
//! tensors (up to [`MAX_SEGMENTS`], in up to [`MAX_BUFFERS`] buffers), each in the storage
//! it is kept in (f32, native or packed f16, bf16), adding into its own record of a small
//! counts buffer: elements, inf/NaN, values at or beyond the low dtype's
//! overflow threshold before rounding, non-zero values that round to zero or a subnormal
//! in it, exact zeros, the largest and smallest binade, and (when asked: the app) a binade
//! histogram.
//!
//! Values are classified from their bits, so the GPU and [`count_cpu`] agree exactly;
//! only integer atomics add up, so the counts are the same bits run to run.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::gpu::{Arg, GpuBuffer, GpuContext, Kernel, KernelDesc};
use crate::shader::{ShaderDecl, f32_only};
use crate::tensor::{DType, Storage, Tensor};

pub static SHADER: ShaderDecl = ShaderDecl {
    name: "numerics",
    source: include_str!("../../shaders/numerics.wgsl"),
    structs: &[Params::WGSL, Segment::WGSL],
    consts: &[],
    variants: f32_only,
};

/// u32 words of one record (the shader's `RECORD`).
pub const RECORD_WORDS: usize = HEADER + BINS + 2;
const HEADER: usize = 8;
/// Binades the histogram holds, from [`LOWEST_BINADE`] (the shader's `BINS`, `LO`).
pub const BINS: usize = 72;
pub const LOWEST_BINADE: i32 = -48;
const BIAS: i32 = 256;
/// Threads per workgroup.
const WG: usize = 256;
/// Tensors one pass counts at most (the shader's `MAX_SEGMENTS`).
pub const MAX_SEGMENTS: usize = 64;
/// Buffers they may lie in: each binds twice (words and quads), beside the counts, within
/// the 8 storage bindings WebGPU guarantees a stage.
pub const MAX_BUFFERS: usize = 3;

/// The grid of one tensor's part of a pass over `len` values (grid-stride loop): at least
/// `per_thread` values a thread, so that a small tensor takes a few workgroups, not many
/// nearly idle ones (each zeroes, sums, merges and syncs its own counts), and at most
/// `max_groups` workgroups, but never so few that a thread would take 2^16 quads (eight
/// 16-bit values each: the shader's 16-bit lanes would wrap). A CPU adapter runs a
/// workgroup's threads one after another on a core, where a workgroup's fixed work costs
/// more than the values it counts: it takes 512 values a thread (BENCHMARKS.md, the AMP
/// doctor's cost, fourth measurement), not more, so that a tensor of a few hundred
/// thousand values still has a workgroup for each core. A GPU's stay as they were: (8, 64),
/// unmeasured (no GPU lent since).
fn groups(len: usize, cpu_adapter: bool) -> u32 {
    let (per_thread, max_groups) = if cpu_adapter { (512, 16) } else { (8, 64) };
    let lanes_floor = len.div_ceil(8).div_ceil(WG << 15);
    len.div_ceil(WG * per_thread)
        .clamp(1, max_groups)
        .max(lanes_floor) as u32
}

crate::wgsl_struct! {
    struct Params {
        /// |x| bits at or above which the low dtype rounds to inf
        overflow_bits: u32,
        /// non-zero |x| bits below which the low dtype rounds to a subnormal or zero
        underflow_bits: u32,
        /// 1: also the binade histogram (one atomic per value); 0: its words stay zero
        histogram: u32,
        /// segments counted (the first this many of the `segments` array)
        segments: u32,
    }
}

crate::wgsl_struct! {
    /// One tensor a pass counts.
    struct Segment {
        /// first element (in elements of the storage: words for f32, halves otherwise)
        start: u32,
        /// elements counted
        len: u32,
        /// 0: f32 words; 16-bit halves (native and packed f16 alike): 1 f16 counted against
        /// f16's range, 2 bf16, 3 f16 counted against another range (widened to f32)
        kind: u32,
        /// which record of the counts buffer it adds into
        record: u32,
        /// its workgroups: `groups` from `first_group`
        first_group: u32,
        groups: u32,
        /// which of the pass's buffers holds it (0..MAX_BUFFERS)
        buffer: u32,
        _pad0: u32,
    }
}

/// Where a low dtype's range ends, as f32 magnitude bits: values at or above `overflow`
/// round to inf in it (round to nearest even), non-zero values below `underflow` round to a
/// subnormal or zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LowRange {
    pub overflow: u32,
    pub underflow: u32,
}

impl LowRange {
    /// The range values are counted against when they are to live in `low`. An f32 run is
    /// counted against f16's: what autocast to f16 would meet.
    pub fn of(low: DType) -> Self {
        match low {
            // 65520 rounds to inf; just below 2^-14 - 2^-25 rounds to f16's largest
            // subnormal, at it to 2^-14 (ties to even).
            DType::BF16 => Self {
                overflow: 0x7f7f_8000,
                underflow: 0x007f_8000,
            },
            _ => Self {
                overflow: 0x477f_f000,
                underflow: 0x387f_e000,
            },
        }
    }
}

/// What one record counted (a few passes may add into one: a layer's weight and bias).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct TensorCounts {
    /// Elements counted.
    pub elements: u64,
    /// inf or NaN.
    pub non_finite: u64,
    pub nan: u64,
    /// At or beyond the low dtype's overflow threshold before rounding (inf included).
    pub overflow: u64,
    /// Non-zero, but rounding to zero or a subnormal in the low dtype.
    pub underflow: u64,
    pub zero: u64,
    /// floor(log2|x|) of the largest and smallest finite non-zero value.
    pub max_binade: Option<i32>,
    pub min_binade: Option<i32>,
    /// Bin k: |x| in [2^(LOWEST_BINADE + k), 2^(LOWEST_BINADE + k + 1)); then the values
    /// below and at or above the bins (all zero when the pass made no histogram).
    #[serde(skip)]
    pub binades: Vec<u64>,
}

impl TensorCounts {
    /// Decode one record's words.
    pub fn from_words(w: &[u32]) -> Result<Self> {
        if w.len() < RECORD_WORDS {
            return Err(Error::InvalidArgument(format!(
                "numerics record of {} words, expected {RECORD_WORDS}",
                w.len()
            )));
        }
        let wide = |i: usize| w[i] as u64;
        Ok(Self {
            elements: wide(0),
            non_finite: wide(1),
            nan: wide(2),
            overflow: wide(3),
            underflow: wide(4),
            zero: wide(5),
            max_binade: (w[6] != 0).then(|| w[6] as i32 - BIAS),
            min_binade: (w[7] != 0).then(|| BIAS - w[7] as i32),
            binades: w[HEADER..RECORD_WORDS].iter().map(|&c| c as u64).collect(),
        })
    }

    /// Whether anything was counted into this record.
    pub fn counted(&self) -> bool {
        self.elements > 0
    }

    /// Finite non-zero values.
    pub fn nonzero_finite(&self) -> u64 {
        self.elements - self.zero - self.non_finite
    }

    /// Overflowed (or will, when rounded to the low dtype), or inf/NaN already.
    pub fn overflowed(&self) -> bool {
        self.non_finite > 0 || self.overflow > 0
    }

    /// The share of the counted elements at or beyond the overflow threshold, or inf/NaN.
    pub fn overflow_fraction(&self) -> f64 {
        let bad = self.overflow.max(self.non_finite);
        bad as f64 / self.elements.max(1) as f64
    }

    /// The share of the non-zero values that round to a subnormal or zero.
    pub fn underflow_fraction(&self) -> f64 {
        let nonzero = self.elements - self.zero;
        self.underflow as f64 / nonzero.max(1) as f64
    }

    /// Add `other`'s counts (the same tensor over more values).
    pub fn merge(&mut self, other: &TensorCounts) {
        self.elements += other.elements;
        self.non_finite += other.non_finite;
        self.nan += other.nan;
        self.overflow += other.overflow;
        self.underflow += other.underflow;
        self.zero += other.zero;
        self.max_binade = self.max_binade.max(other.max_binade);
        self.min_binade = match (self.min_binade, other.min_binade) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if self.binades.len() < other.binades.len() {
            self.binades.resize(other.binades.len(), 0);
        }
        for (a, b) in self.binades.iter_mut().zip(&other.binades) {
            *a += b;
        }
    }
}

/// floor(log2|x|) of a finite non-zero magnitude's bits.
fn binade_of(u: u32) -> i32 {
    let field = u >> 23;
    if field == 0 {
        (31 - u.leading_zeros() as i32) - 149
    } else {
        field as i32 - 127
    }
}

/// The CPU reference of one pass: `values` (exactly as stored, widened to f32) counted
/// against the range of `low`.
pub fn count_cpu(values: &[f32], low: DType) -> TensorCounts {
    let range = LowRange::of(low);
    let mut c = TensorCounts {
        binades: vec![0; BINS + 2],
        ..Default::default()
    };
    for &x in values {
        c.elements += 1;
        let u = x.to_bits() & 0x7fff_ffff;
        if u == 0 {
            c.zero += 1;
            continue;
        }
        if u >= range.overflow && u <= 0x7f80_0000 {
            c.overflow += 1;
        }
        if u >= 0x7f80_0000 {
            c.non_finite += 1;
            c.nan += (u > 0x7f80_0000) as u64;
            continue;
        }
        c.underflow += (u < range.underflow) as u64;
        let e = binade_of(u);
        c.max_binade = c.max_binade.max(Some(e));
        c.min_binade = Some(c.min_binade.map_or(e, |m| m.min(e)));
        let k = e - LOWEST_BINADE;
        let slot = if k < 0 {
            BINS
        } else if k as usize >= BINS {
            BINS + 1
        } else {
            k as usize
        };
        c.binades[slot] += 1;
    }
    c
}

/// Plan one counting pass over `values` into record `record` of `counts` (u32 words,
/// [`RECORD_WORDS`] per record, zeroed by the caller before the passes of a step), against
/// the range of `low`; the binade histogram too when `histogram` (else its words stay zero).
pub fn count(
    ctx: &GpuContext,
    values: &Tensor,
    counts: &Arc<GpuBuffer>,
    record: usize,
    what: (DType, bool),
) -> Result<Kernel> {
    count_all(ctx, &[(values, record)], counts, what)
}

/// Plan one counting pass over several tensors, each `(values, record)` adding into its own
/// record as [`count`] would: at most [`MAX_SEGMENTS`] of them, in at most [`MAX_BUFFERS`]
/// buffers ([`buffers_of`]).
pub fn count_all(
    ctx: &GpuContext,
    tensors: &[(&Tensor, usize)],
    counts: &Arc<GpuBuffer>,
    (low, histogram): (DType, bool),
) -> Result<Kernel> {
    let buffers = buffers_of(tensors.iter().map(|(v, _)| *v));
    if tensors.is_empty() || tensors.len() > MAX_SEGMENTS || buffers.len() > MAX_BUFFERS {
        return Err(Error::InvalidArgument(format!(
            "numerics: one pass counts 1 to {MAX_SEGMENTS} tensors in at most {MAX_BUFFERS} buffers, not {} in {}",
            tensors.len(),
            buffers.len()
        )));
    }
    let range = LowRange::of(low);
    let mut segments = [Segment::default(); MAX_SEGMENTS];
    let mut first_group = 0;
    for (segment, &(values, record)) in segments.iter_mut().zip(tensors) {
        let (kind, element_bytes) = match values.storage() {
            Storage::F32 => (0, 4),
            // f16 against f16's range is classified from its 16 bits; against another,
            // widened.
            Storage::F16 | Storage::F16Packed if low == DType::F16 => (1, 2),
            Storage::F16 | Storage::F16Packed => (3, 2),
            Storage::BF16 => (2, 2),
            Storage::U32 => {
                return Err(Error::InvalidArgument(
                    "numerics: integer tensors (token ids) hold no floating-point values".into(),
                ));
            }
        };
        if counts.size() < 4 * ((record + 1) * RECORD_WORDS) as u64 {
            return Err(Error::shape(
                "numerics",
                format!(
                    "record {record} is past the end of a {}-byte counts buffer",
                    counts.size()
                ),
            ));
        }
        let groups = groups(values.numel(), ctx.caps.cpu_adapter);
        let buffer = buffers.iter().position(|b| Arc::ptr_eq(b, values.buffer()));
        *segment = Segment {
            start: (values.byte_offset() / element_bytes) as u32,
            len: values.numel() as u32,
            kind,
            record: record as u32,
            first_group,
            groups,
            buffer: buffer.unwrap_or(0) as u32,
            ..Default::default()
        };
        first_group += groups;
    }
    let params = Params {
        overflow_bits: range.overflow,
        underflow_bits: range.underflow,
        histogram: histogram as u32,
        segments: tensors.len() as u32,
    };
    // `quads` reads a buffer 16 bytes at a time; one smaller than a quad (a lone scalar)
    // holds no whole quad, which the shader then never reads, and a placeholder stands in
    // for the binding's minimum size. Slots no tensor uses bind the first buffer again.
    let quads: Vec<Arc<GpuBuffer>> = buffers
        .iter()
        .map(|b| match b.size() >= 16 {
            true => b.clone(),
            false => ctx.alloc_storage("numerics: no quads", 16),
        })
        .collect();
    let slot = |i: usize| buffers.len().min(i + 1) - 1;
    let (w, q) = (
        [0, 1, 2].map(|i| &buffers[slot(i)]),
        [0, 1, 2].map(|i| &quads[slot(i)]),
    );
    ctx.kernel(
        &KernelDesc::new(&SHADER, "count_numerics"),
        &[
            ("params", Arg::Uniform(bytemuck::bytes_of(&params))),
            ("segments", Arg::Uniform(bytemuck::cast_slice(&segments))),
            ("counts", Arg::Buffer(counts)),
            ("words0", Arg::Buffer(w[0])),
            ("quads0", Arg::Buffer(q[0])),
            ("words1", Arg::Buffer(w[1])),
            ("quads1", Arg::Buffer(q[1])),
            ("words2", Arg::Buffer(w[2])),
            ("quads2", Arg::Buffer(q[2])),
        ],
        [first_group, 1, 1],
    )
}

/// The distinct buffers `tensors` lie in, in order of first use.
pub fn buffers_of<'a>(tensors: impl IntoIterator<Item = &'a Tensor>) -> Vec<Arc<GpuBuffer>> {
    let mut buffers: Vec<Arc<GpuBuffer>> = Vec::new();
    for t in tensors {
        if !buffers.iter().any(|b| Arc::ptr_eq(b, t.buffer())) {
            buffers.push(t.buffer().clone());
        }
    }
    buffers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grid_keeps_every_16_bit_lane_from_wrapping() {
        for cpu in [true, false] {
            assert_eq!(groups(1, cpu), 1);
            for len in [1usize << 20, 1 << 28, 1 << 31, u32::MAX as usize] {
                let threads = groups(len, cpu) as usize * WG;
                let quads_per_thread = len.div_ceil(8).div_ceil(threads);
                assert!(quads_per_thread <= 1 << 15, "{len} values, cpu {cpu}");
            }
        }
        // A CPU adapter's grid: fewer, fuller workgroups.
        assert_eq!(groups(1 << 20, true), 8);
        assert_eq!(groups(1 << 16, true), 1);
        assert_eq!(groups(1 << 16, false), 32);
    }
}
