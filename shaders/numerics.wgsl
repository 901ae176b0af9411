// The AMP doctor's counters: one pass over one tensor (a layer's output, input gradient or
// weight gradient) in the storage it is kept in, adding into one record of a small counts
// buffer. Values are read as raw words and classified from their bits alone, so f32, f16
// (native `array<f16>` and packed share one layout: two halves per word, the even element
// low) and bf16 are counted exactly, subnormals included, whatever the device does with
// subnormal arithmetic.
//
// A record (RECORD words, src/ops/numerics.rs decodes it):
//   0 elements   1 inf or NaN   2 NaN   3 at or beyond the low dtype's overflow threshold
//   (inf included, NaN not)   4 non-zero but rounding to zero or a subnormal in the low
//   dtype   5 exact zeros   6 largest binade + BIAS (0: none)   7 BIAS - smallest binade
//   (0: none)   8.. binade histogram (when `params.histogram` asks: the app draws it, the
//   command line does not, and it is the pass's one atomic per value): bin k holds |x| in
//   [2^(LO+k), 2^(LO+k+1)), then the values below 2^LO and those at or above 2^(LO+BINS).
// Only integer atomics: the counts are the same whatever order the threads run in.

#struct Params // src/ops/numerics.rs

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> words: array<u32>;
@group(0) @binding(2) var<storage, read_write> counts: array<atomic<u32>>;

const WG: u32 = 256u;
const HEADER: u32 = 8u;
const BINS: u32 = 72u;
const LO: i32 = -48;
const RECORD: u32 = 82u; // HEADER + BINS + 2
const BIAS: i32 = 256;

var<workgroup> local: array<atomic<u32>, RECORD>;

// What one thread has counted so far (the histogram goes straight to `local`).
struct Tally {
    n: u32,
    non_finite: u32,
    nan: u32,
    overflow: u32,
    underflow: u32,
    zero: u32,
    max_e: u32,
    min_e: u32,
}

// The f32 bits of an f16 half, widened exactly (subnormals normalised); branch-free, so
// neighbouring threads (one SIMD vector on a CPU adapter) never diverge.
fn half_bits(h: u32) -> u32 {
    let sign = (h & 0x8000u) << 16u;
    let exp = (h >> 10u) & 0x1fu;
    let man = h & 0x3ffu;
    let normal = ((exp + 112u) << 23u) | (man << 13u);
    let special = 0x7f800000u | (man << 13u);
    // Subnormal: man * 2^-24 = 2^p * (1 + f), p the top set bit of man.
    let p = 31u - countLeadingZeros(man | 1u);
    let sub = select(0u, ((p + 103u) << 23u) | ((man << (23u - p)) & 0x7fffffu), man != 0u);
    var b = select(normal, special, exp == 31u);
    b = select(b, sub, exp == 0u);
    return sign | b;
}

// Add a finite non-zero value of binade e to the histogram (when asked for).
fn histogram(e: i32) {
    let k = e - LO;
    var slot = HEADER + BINS; // below 2^LO
    if (k >= i32(BINS)) {
        slot = HEADER + BINS + 1u;
    } else if (k >= 0) {
        slot = HEADER + u32(k);
    }
    atomicAdd(&local[slot], 1u);
}

// Count one value, given as f32 bits; branch-free but for the histogram.
fn tally(t: ptr<function, Tally>, bits: u32) {
    let u = bits & 0x7fffffffu;
    let nonzero = u != 0u;
    let non_finite = u >= 0x7f800000u;
    let finite = nonzero && !non_finite;
    (*t).n += 1u;
    (*t).zero += select(0u, 1u, !nonzero);
    (*t).non_finite += select(0u, 1u, non_finite);
    (*t).nan += select(0u, 1u, u > 0x7f800000u);
    (*t).overflow += select(0u, 1u, u >= params.overflow_bits && u <= 0x7f800000u);
    (*t).underflow += select(0u, 1u, finite && u < params.underflow_bits);
    // floor(log2 |x|): from the exponent field, f32 subnormals from the leading zeros.
    let field = u >> 23u;
    let e = select(i32(field) - 127, i32(31u - countLeadingZeros(u | 1u)) - 149, field == 0u);
    (*t).max_e = select((*t).max_e, max((*t).max_e, u32(e + BIAS)), finite);
    (*t).min_e = select((*t).min_e, max((*t).min_e, u32(BIAS - e)), finite);
    if (params.histogram != 0u && finite) {
        histogram(e);
    }
}

// `tally` of an f16 value against f16's own range, from its 16 bits (what widening it and
// comparing with f16's thresholds gives: overflow is inf, underflow a subnormal).
fn tally_f16(t: ptr<function, Tally>, h: u32) {
    let exp = (h >> 10u) & 0x1fu;
    let man = h & 0x3ffu;
    let nonzero = (h & 0x7fffu) != 0u;
    let finite = nonzero && exp != 31u;
    (*t).n += 1u;
    (*t).zero += select(0u, 1u, !nonzero);
    (*t).non_finite += select(0u, 1u, exp == 31u);
    (*t).nan += select(0u, 1u, exp == 31u && man != 0u);
    (*t).overflow += select(0u, 1u, exp == 31u && man == 0u);
    (*t).underflow += select(0u, 1u, exp == 0u && man != 0u);
    let e = select(i32(exp) - 15, i32(31u - countLeadingZeros(man | 1u)) - 24, exp == 0u);
    (*t).max_e = select((*t).max_e, max((*t).max_e, u32(e + BIAS)), finite);
    (*t).min_e = select((*t).min_e, max((*t).min_e, u32(BIAS - e)), finite);
    if (params.histogram != 0u && finite) {
        histogram(e);
    }
}

// Count 16-bit element e of `word`: kind 1 f16 against f16's range, 2 bf16, 3 f16 against
// another range (widened).
fn tally_half(t: ptr<function, Tally>, word: u32, e: u32) {
    let h = (word >> ((e & 1u) * 16u)) & 0xffffu;
    if (params.kind == 1u) {
        tally_f16(t, h);
    } else if (params.kind == 2u) {
        tally(t, h << 16u);
    } else {
        tally(t, half_bits(h));
    }
}

@compute @workgroup_size(WG)
fn count_numerics(#workgroup_builtins) {
    for (var i = lid; i < RECORD; i += WG) {
        atomicStore(&local[i], 0u);
    }
    workgroupBarrier();
    var t = Tally(0u, 0u, 0u, 0u, 0u, 0u, 0u, 0u);
    let stride = nwg.x * WG;
    let first = params.start;
    let end = params.start + params.len;
    if (params.kind == 0u) {
        for (var i = wid.x * WG + lid; i < params.len; i += stride) {
            tally(&t, words[first + i]);
        }
    } else {
        // Two halves per word: a thread takes a word, and each of its halves in range.
        let first_word = first >> 1u;
        let word_count = ((end + 1u) >> 1u) - first_word;
        for (var i = wid.x * WG + lid; i < word_count; i += stride) {
            let w = first_word + i;
            let word = words[w];
            let e0 = 2u * w;
            if (e0 >= first) {
                tally_half(&t, word, e0);
            }
            if (e0 + 1u < end) {
                tally_half(&t, word, e0 + 1u);
            }
        }
    }
    atomicAdd(&local[0], t.n);
    atomicAdd(&local[1], t.non_finite);
    atomicAdd(&local[2], t.nan);
    atomicAdd(&local[3], t.overflow);
    atomicAdd(&local[4], t.underflow);
    atomicAdd(&local[5], t.zero);
    atomicMax(&local[6], t.max_e);
    atomicMax(&local[7], t.min_e);
    workgroupBarrier();
    let base = params.record * RECORD;
    for (var i = lid; i < RECORD; i += WG) {
        let c = atomicLoad(&local[i]);
        if (c != 0u) {
            if (i == 6u || i == 7u) {
                atomicMax(&counts[base + i], c);
            } else {
                atomicAdd(&counts[base + i], c);
            }
        }
    }
}
