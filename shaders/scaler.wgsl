// GradScaler kernels (PyTorch's torch.amp.GradScaler on the GPU): begin_step, unscale (with
// the inf/NaN check) and update. Nothing here is read back by the CPU inside a step.

#consts scaler_state // the state buffer's word offsets: src/ops/scaler_state.rs

const WG: u32 = 256u;
// Elements each thread handles (strided by WG so a workgroup's loads stay contiguous).
const EPT: u32 = 4u;

#struct Sizes // src/amp/scaler.rs

@group(0) @binding(0) var<storage, read_write> state: array<atomic<u32>, STATE_WORDS>;
@group(0) @binding(1) var<storage, read_write> grads: array<f32>;
@group(0) @binding(2) var<uniform> sizes: Sizes;

// Start of an effective batch: no inf seen yet.
@compute @workgroup_size(1)
fn begin_step() {
    atomicStore(&state[FOUND_INF], 0u);
}

var<workgroup> wg_found: atomic<u32>;

// grads *= inv_scale and found_inf |= any non-finite gradient, in one pass
// (PyTorch's _amp_foreach_non_finite_check_and_unscale_). Every gradient is multiplied, also
// when an inf is found, as PyTorch does; the optimizer then skips the step.
// The product is checked too (PyTorch checks only the scaled value): once the scale has
// underflowed below 2^-128, 1/scale is inf and a finite gradient unscales to inf (or 0 to
// NaN), so a step the check passed would write non-finite weights. Here it is skipped: a step
// whose unscaled gradients hold a non-finite value never changes a weight, whatever the scale.
@compute @workgroup_size(WG)
fn unscale(#workgroup_builtins) {
    let inv_scale = bitcast<f32>(atomicLoad(&state[INV_SCALE]));
    let base = workgroup_index(wid, nwg) * WG * EPT + lid;
    var found = false;
    for (var k = 0u; k < EPT; k++) {
        let i = base + k * WG;
        if (i < sizes.n) {
            let g = grads[i];
            // PyTorch leaves values alone when inv_scale is exactly 1.
            if (inv_scale != 1.0) {
                let unscaled = g * inv_scale;
                grads[i] = unscaled;
                found = found || is_nonfinite(unscaled);
            }
            found = found || is_nonfinite(g);
        }
    }
    // One global atomic per workgroup at most, however many values overflowed.
    if (found) {
        atomicOr(&wg_found, 1u);
    }
    workgroupBarrier();
    if (lid == 0u && atomicLoad(&wg_found) != 0u) {
        atomicOr(&state[FOUND_INF], 1u);
    }
}

// The f32 bits of sign · q · 2^(x - 23), q the rounded significand: 24 bits for a normal
// result (rounding up to 2^24 carries into the exponent; past 2^127 it is inf), for a
// subnormal one units of 2^-149 (rounding up to 2^23 gives the smallest normal).
fn pack_f32(sign: u32, x_in: i32, q_in: u32, subnormal: bool) -> u32 {
    if (subnormal) {
        return sign | q_in;
    }
    var q = q_in;
    var x = x_in;
    if (q == 0x1000000u) {
        q = 0x800000u;
        x = x + 1;
    }
    if (x > 127) {
        return sign | 0x7f800000u;
    }
    return sign | (u32(x + 127) << 23u) | (q & 0x7fffffu);
}

// 1/s rounded to nearest even, with integers only: bit-identical to PyTorch's
// `scale.double().reciprocal().float()` for every f32 (no double rounding case exists; checked
// exhaustively on the host), and independent of the GPU's division accuracy (WGSL allows
// 2.5 ulp) and of subnormal flushing. 0 -> inf, inf -> 0, NaN stays NaN.
// Takes and returns f32 bits (no float value is formed, so nothing can be flushed).
fn exact_reciprocal_bits(bits: u32) -> u32 {
    let sign = bits & 0x80000000u;
    let e = (bits >> 23u) & 0xffu;
    var m = bits & 0x7fffffu;
    if (e == 0xffu) {
        if (m != 0u) { return bits; }
        return sign;
    }
    if (e == 0u && m == 0u) {
        return sign | 0x7f800000u;
    }
    // |s| = (m / 2^23) * 2^ex with m in [2^23, 2^24).
    var ex: i32;
    if (e == 0u) {
        let shift = countLeadingZeros(m) - 8u;
        m = m << shift;
        ex = -126 - i32(shift);
    } else {
        m = m | 0x800000u;
        ex = i32(e) - 127;
    }
    // 1/|s| = (num / m) * 2^x with num / m in [1, 2).
    var num = 0x1000000u;
    var x = -ex - 1;
    if (m == 0x800000u) {
        num = 0x800000u;
        x = -ex;
    }
    // Quotient bits to keep: 24 for a normal result, fewer for a subnormal one.
    var keep = 24u;
    if (x < -126) {
        keep = u32(150 + x);
    }
    // Long division: keep + 1 bits (the last one is the rounding bit), remainder = sticky.
    var q = 0u;
    var r = num;
    for (var k = 0u; k <= keep; k++) {
        q = q << 1u;
        if (r >= m) {
            r = r - m;
            q = q | 1u;
        }
        r = r << 1u;
    }
    let round_bit = q & 1u;
    q = q >> 1u;
    if (round_bit == 1u && (r != 0u || (q & 1u) == 1u)) {
        q = q + 1u;
    }
    return pack_f32(sign, x, q, keep < 24u);
}

// `scale × factor` as PyTorch's `_amp_update_scale_` computes it: the f32 scale times the f64
// factor in f64, rounded to f32 (to nearest even, inf past f32's range, subnormals kept).
// Without float arithmetic: the exact product of the two significands (at most 77 bits) in
// 16-bit limbs, rounded to a double's 53 bits and then to f32's 24, as the f64 multiply and
// the cast do. inf and NaN scales stay as they are.
fn scale_times_f64(bits: u32, factor_lo: u32, factor_hi: u32) -> u32 {
    let sign = (bits ^ factor_hi) & 0x80000000u;
    let e = (bits >> 23u) & 0xffu;
    if (e == 0xffu) {
        return bits;
    }
    // scale = ms * 2^(es - 23), factor = mf * 2^(ef - 52) (subnormals without the implicit bit).
    var ms = bits & 0x7fffffu;
    var es = -126;
    if (e != 0u) {
        ms = ms | 0x800000u;
        es = i32(e) - 127;
    }
    let fe = (factor_hi >> 20u) & 0x7ffu;
    var mf_hi = factor_hi & 0xfffffu;
    var ef = -1022;
    if (fe != 0u) {
        mf_hi = mf_hi | 0x100000u;
        ef = i32(fe) - 1023;
    }
    var s = array<u32, 2>(ms & 0xffffu, ms >> 16u);
    var f = array<u32, 4>(factor_lo & 0xffffu, factor_lo >> 16u, mf_hi & 0xffffu, mf_hi >> 16u);
    var p = array<u32, 6>(0u, 0u, 0u, 0u, 0u, 0u);
    for (var i = 0u; i < 2u; i++) {
        for (var j = 0u; j < 4u; j++) {
            let t = s[i] * f[j];
            p[i + j] += t & 0xffffu;
            p[i + j + 1u] += t >> 16u;
        }
    }
    for (var k = 0u; k < 5u; k++) {
        p[k + 1u] += p[k] >> 16u;
        p[k] = p[k] & 0xffffu;
    }
    var len = 0;
    for (var b = 95; b >= 0; b--) {
        if (((p[u32(b) / 16u] >> (u32(b) % 16u)) & 1u) != 0u) {
            len = b + 1;
            break;
        }
    }
    if (len == 0) {
        return sign;
    }
    // PyTorch's product is a double: round it to 53 bits first (to nearest even), then to f32.
    // (Rounding the exact product once differs where the double lands on an f32 tie.)
    let d1 = len - 53;
    if (d1 > 0) {
        var guard1 = 0u;
        var sticky1 = 0u;
        for (var b = 0; b < d1; b++) {
            let bit = (p[u32(b) / 16u] >> (u32(b) % 16u)) & 1u;
            if (b == d1 - 1) {
                guard1 = bit;
            } else {
                sticky1 = sticky1 | bit;
            }
            p[u32(b) / 16u] = p[u32(b) / 16u] & ~(1u << (u32(b) % 16u));
        }
        let lsb = (p[u32(d1) / 16u] >> (u32(d1) % 16u)) & 1u;
        if (guard1 == 1u && (sticky1 != 0u || lsb == 1u)) {
            p[u32(d1) / 16u] += 1u << (u32(d1) % 16u);
            for (var k = 0u; k < 5u; k++) {
                p[k + 1u] += p[k] >> 16u;
                p[k] = p[k] & 0xffffu;
            }
            if (((p[u32(len) / 16u] >> (u32(len) % 16u)) & 1u) != 0u) {
                len = len + 1;
            }
        }
    }
    // The product's leading bit is 2^x; keep 24 bits (fewer for a subnormal result).
    var x = len - 1 + es - 23 + ef - 52;
    var keep = 24;
    if (x < -126) {
        keep = x + 150;
    }
    if (keep < 0) {
        return sign;
    }
    let d = len - keep;
    var q = 0u;
    var guard = 0u;
    var sticky = 0u;
    for (var b = len - 1; b >= 0; b--) {
        let bit = (p[u32(b) / 16u] >> (u32(b) % 16u)) & 1u;
        if (b >= d) {
            q = (q << 1u) | bit;
        } else if (b == d - 1) {
            guard = bit;
        } else {
            sticky = sticky | bit;
        }
    }
    if (guard == 1u && (sticky != 0u || (q & 1u) == 1u)) {
        q = q + 1u;
    }
    return pack_f32(sign, x, q, keep < 24);
}

// PyTorch's _amp_update_scale_, one thread: backoff on inf, else count a clean step and grow
// at growth_interval, but never to inf. The factors are doubles as in PyTorch, and the
// products are computed with integers (`scale_times_f64`), so the scale is PyTorch's for any
// factor, also on a GPU that flushes subnormal floats.
@compute @workgroup_size(1)
fn update() {
    update_scale();
}

// update, then the next step's begin: a trainer's step records this once it has copied
// found_inf out (src/train/step.rs), so the next step's unscale starts from 0 with no
// begin_step dispatch of its own.
@compute @workgroup_size(1)
fn update_then_begin() {
    update_scale();
    atomicStore(&state[FOUND_INF], 0u);
}

fn update_scale() {
    var scale_bits = atomicLoad(&state[SCALE]);
    var tracker = bitcast<i32>(atomicLoad(&state[GROWTH_TRACKER]));
    let growth_interval = bitcast<i32>(atomicLoad(&state[GROWTH_INTERVAL]));
    if (atomicLoad(&state[FOUND_INF]) != 0u) {
        let lo = atomicLoad(&state[BACKOFF_FACTOR]);
        let hi = atomicLoad(&state[BACKOFF_FACTOR + 1u]);
        scale_bits = scale_times_f64(scale_bits, lo, hi);
        tracker = 0;
    } else {
        let successful = tracker + 1;
        if (successful == growth_interval) {
            let lo = atomicLoad(&state[GROWTH_FACTOR]);
            let hi = atomicLoad(&state[GROWTH_FACTOR + 1u]);
            let grown = scale_times_f64(scale_bits, lo, hi);
            if ((grown & 0x7f800000u) != 0x7f800000u) {
                scale_bits = grown;
            }
            tracker = 0;
        } else {
            tracker = successful;
        }
    }
    atomicStore(&state[SCALE], scale_bits);
    atomicStore(&state[GROWTH_TRACKER], bitcast<u32>(tracker));
    atomicStore(&state[INV_SCALE], exact_reciprocal_bits(scale_bits));
}
