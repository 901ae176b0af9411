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

// The f32 bits of element i: a word, a half of one (f16: widened exactly), or a bf16 half.
fn element_bits(i: u32) -> u32 {
    if (params.kind == 0u) {
        return words[params.start + i];
    }
    let e = params.start + i;
    let half = (words[e >> 1u] >> ((e & 1u) * 16u)) & 0xffffu;
    if (params.kind == 2u) {
        return half << 16u;
    }
    let sign = (half & 0x8000u) << 16u;
    let exp = (half >> 10u) & 0x1fu;
    let man = half & 0x3ffu;
    if (exp == 31u) {
        return sign | 0x7f800000u | (man << 13u);
    }
    if (exp == 0u) {
        if (man == 0u) {
            return sign;
        }
        // Subnormal: man * 2^-24 = 2^p * (1 + f), p the top set bit of man.
        let p = 31u - countLeadingZeros(man);
        return sign | ((p + 103u) << 23u) | ((man << (23u - p)) & 0x7fffffu);
    }
    return sign | ((exp + 112u) << 23u) | (man << 13u);
}

// floor(log2 |x|) of a finite non-zero magnitude's bits (f32 subnormals from the leading
// zeros, as in histogram.wgsl).
fn binade(u: u32) -> i32 {
    let field = u >> 23u;
    if (field == 0u) {
        return i32(31u - countLeadingZeros(u)) - 149;
    }
    return i32(field) - 127;
}

@compute @workgroup_size(WG)
fn count_numerics(#workgroup_builtins) {
    for (var i = lid; i < RECORD; i += WG) {
        atomicStore(&local[i], 0u);
    }
    workgroupBarrier();
    var non_finite = 0u;
    var nan = 0u;
    var overflow = 0u;
    var underflow = 0u;
    var zero = 0u;
    var max_e = 0u;
    var min_e = 0u;
    let stride = nwg.x * WG;
    var n = 0u;
    for (var i = wid.x * WG + lid; i < params.len; i += stride) {
        n += 1u;
        let u = element_bits(i) & 0x7fffffffu;
        if (u == 0u) {
            zero += 1u;
            continue;
        }
        if (u >= params.overflow_bits && u <= 0x7f800000u) {
            overflow += 1u;
        }
        if (u >= 0x7f800000u) {
            non_finite += 1u;
            if (u > 0x7f800000u) {
                nan += 1u;
            }
            continue;
        }
        if (u < params.underflow_bits) {
            underflow += 1u;
        }
        let e = binade(u);
        max_e = max(max_e, u32(e + BIAS));
        min_e = max(min_e, u32(BIAS - e));
        if (params.histogram == 0u) {
            continue;
        }
        let k = e - LO;
        var slot = HEADER + BINS; // below 2^LO
        if (k >= i32(BINS)) {
            slot = HEADER + BINS + 1u;
        } else if (k >= 0) {
            slot = HEADER + u32(k);
        }
        atomicAdd(&local[slot], 1u);
    }
    atomicAdd(&local[0], n);
    atomicAdd(&local[1], non_finite);
    atomicAdd(&local[2], nan);
    atomicAdd(&local[3], overflow);
    atomicAdd(&local[4], underflow);
    atomicAdd(&local[5], zero);
    atomicMax(&local[6], max_e);
    atomicMax(&local[7], min_e);
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
