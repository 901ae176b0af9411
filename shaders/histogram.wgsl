// Histogram of log2|g| over a range of a flat f32 buffer (a layer's gradient), twice in one
// pass: for the values as they are (unscaled) and for the values times the GradScaler's
// current scale. This is the mixed-precision paper's picture: where the gradients sit
// against f16's subnormal (2^-14), flush-to-zero (2^-24) and overflow (65504) limits.
//
// Bins are whole binades taken from the f32 bit pattern (exact, no log2 approximation):
// bin k counts |x| in [2^(lo+k), 2^(lo+k+1)). f32 subnormals get their exponent from the
// leading zeros of the mantissa, with no arithmetic on them (GPUs may flush subnormals).
//
// counts layout, per histogram h (0: unscaled, 1: scaled), base h * (bins + 4):
//   [0, bins)  binades      bins      below lo      bins + 1  at or above lo + bins
//   bins + 2   exact zeros  bins + 3  inf or NaN
// The caller zeroes counts before each dispatch.

#struct Params // src/ops/histogram.rs

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> values: array<f32>;
// The GradScaler state buffer; word SCALE is the scale (1 when the scaler is off).
@group(0) @binding(2) var<storage, read> scale_state: array<f32>;

#consts scaler_state // the state buffer's word offsets: src/ops/scaler_state.rs
@group(0) @binding(3) var<storage, read_write> counts: array<atomic<u32>>;

const WG: u32 = 256u;
const MAX_BINS: u32 = 128u;
const SLOTS: u32 = 2u * (MAX_BINS + 4u);

var<workgroup> local_counts: array<atomic<u32>, SLOTS>;

// The slot of x within one histogram.
fn slot_of(x: f32) -> u32 {
    let bits = bitcast<u32>(x) & 0x7fffffffu;
    if (bits == 0u) {
        return params.bins + 2u;
    }
    if (bits >= 0x7f800000u) {
        return params.bins + 3u;
    }
    let field = bits >> 23u;
    var e: i32;
    if (field == 0u) {
        // Subnormal: value = bits * 2^-149.
        e = i32(31u - countLeadingZeros(bits)) - 149;
    } else {
        e = i32(field) - 127;
    }
    let k = e - params.lo;
    if (k < 0) {
        return params.bins;
    }
    if (k >= i32(params.bins)) {
        return params.bins + 1u;
    }
    return u32(k);
}

@compute @workgroup_size(WG)
fn log2_histogram(
    @builtin(local_invocation_index) lid: u32,
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let width = params.bins + 4u;
    for (var i = lid; i < 2u * width; i += WG) {
        atomicStore(&local_counts[i], 0u);
    }
    workgroupBarrier();
    let scale = scale_state[SCALE];
    let stride = nwg.x * WG;
    for (var i = gid.x; i < params.len; i += stride) {
        let g = values[params.offset + i];
        atomicAdd(&local_counts[slot_of(g)], 1u);
        atomicAdd(&local_counts[width + slot_of(g * scale)], 1u);
    }
    workgroupBarrier();
    for (var i = lid; i < 2u * width; i += WG) {
        let c = atomicLoad(&local_counts[i]);
        if (c != 0u) {
            atomicAdd(&counts[i], c);
        }
    }
}
