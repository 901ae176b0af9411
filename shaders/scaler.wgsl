// GradScaler kernels (PyTorch's torch.amp.GradScaler on the GPU): begin_step, unscale (with
// the inf/NaN check) and update. Nothing here is read back by the CPU inside a step.

#include scaler_state

const WG: u32 = 256u;
// Elements each thread handles (strided by WG so a workgroup's loads stay contiguous).
const EPT: u32 = 4u;

struct Sizes {
    n: u32,          // gradient elements
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

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
@compute @workgroup_size(WG)
fn unscale(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let inv_scale = bitcast<f32>(atomicLoad(&state[INV_SCALE]));
    let base = workgroup_index(wid, nwg) * WG * EPT + lid;
    var found = false;
    for (var k = 0u; k < EPT; k++) {
        let i = base + k * WG;
        if (i < sizes.n) {
            let g = grads[i];
            found = found || is_nonfinite(g);
            // PyTorch leaves values alone when inv_scale is exactly 1.
            if (inv_scale != 1.0) {
                grads[i] = g * inv_scale;
            }
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
    if (keep < 24u) {
        // Subnormal: q counts units of 2^-149 (rounding up to 2^23 gives the smallest normal).
        return sign | q;
    }
    if (q == 0x1000000u) {
        q = 0x800000u;
        x = x + 1;
    }
    if (x > 127) {
        return sign | 0x7f800000u;
    }
    return sign | (u32(x + 127) << 23u) | (q & 0x7fffffu);
}

// PyTorch's _amp_update_scale_, one thread: backoff on inf, else count a clean step and grow
// at growth_interval, but never to inf. The scale factors are f32 here (PyTorch's are
// doubles; for f32 factors the f32 product is PyTorch's f64 product rounded to f32). The
// scale is carried as bits when unchanged, so a GPU that flushes subnormal floats cannot
// alter it without arithmetic.
@compute @workgroup_size(1)
fn update() {
    var scale_bits = atomicLoad(&state[SCALE]);
    var tracker = bitcast<i32>(atomicLoad(&state[GROWTH_TRACKER]));
    let growth_factor = bitcast<f32>(atomicLoad(&state[GROWTH_FACTOR]));
    let backoff_factor = bitcast<f32>(atomicLoad(&state[BACKOFF_FACTOR]));
    let growth_interval = bitcast<i32>(atomicLoad(&state[GROWTH_INTERVAL]));
    if (atomicLoad(&state[FOUND_INF]) != 0u) {
        scale_bits = bitcast<u32>(bitcast<f32>(scale_bits) * backoff_factor);
        tracker = 0;
    } else {
        let successful = tracker + 1;
        if (successful == growth_interval) {
            let grown = bitcast<f32>(scale_bits) * growth_factor;
            if (!is_nonfinite(grown)) {
                scale_bits = bitcast<u32>(grown);
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
