// ---- prelude: portable numerics and launch indices, shared by every kernel --------------------------
// WGSL leaves f32 -> f16 rounding to the implementation and makes pack2x16float
// indeterminate out of range, so every store to f16 or bf16 goes through these integer
// helpers: round to nearest even, |x| >= 65520 -> +-inf, NaN kept. Overflow then looks the
// same on every device, and the GradScaler sees it everywhere.

// True for +-inf and NaN, from the bit pattern (compilers may assume finite math).
fn is_nonfinite(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7f800000u) == 0x7f800000u;
}

// True for NaN only, from the bit pattern.
fn is_nan(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}

// A quiet NaN. The bitcast takes a function parameter so it is evaluated at run time: a
// const-expression that yields NaN is a shader-creation error in WGSL (Tint rejects it).
fn f32_from_bits(bits: u32) -> f32 {
    return bitcast<f32>(bits);
}
fn quiet_nan() -> f32 {
    return f32_from_bits(0x7fc00000u);
}

fn f32_to_f16_bits(v: f32) -> u32 {
    let x = bitcast<u32>(v);
    let sign = (x >> 16u) & 0x8000u;
    let e = (x >> 23u) & 0xffu;
    let m = x & 0x7fffffu;
    if (e == 0xffu) {
        if (m != 0u) { return sign | 0x7e00u; }
        return sign | 0x7c00u;
    }
    if (e >= 143u) { return sign | 0x7c00u; } // 2^16 and above overflow
    if (e >= 113u) {
        // Normal f16 (the rounding carry may reach the exponent, and 0x7c00 is inf: correct).
        var h = ((e - 112u) << 10u) | (m >> 13u);
        let rem = m & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (h & 1u) == 1u)) { h = h + 1u; }
        return sign | h;
    }
    if (e < 102u) { return sign; } // below half the smallest subnormal: zero
    // Subnormal f16: value = mm * 2^(e - 150), unit 2^-24.
    let mm = m | 0x800000u;
    let shift = 126u - e; // 14..24
    var h = mm >> shift;
    let rem = mm & ((1u << shift) - 1u);
    let halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (h & 1u) == 1u)) { h = h + 1u; }
    return sign | h;
}

fn f32_to_bf16_bits(v: f32) -> u32 {
    let x = bitcast<u32>(v);
    if ((x & 0x7f800000u) == 0x7f800000u && (x & 0x7fffffu) != 0u) {
        return ((x >> 16u) & 0x8000u) | 0x7fc0u; // quiet NaN
    }
    // Round to nearest even on the 16 dropped bits; overflow carries into inf, as in IEEE.
    return (x + 0x7fffu + ((x >> 16u) & 1u)) >> 16u;
}

// Two bf16 in one word (low half first) to f32.
fn unpack_bf16x2(w: u32) -> vec2<f32> {
    return vec2<f32>(bitcast<f32>(w << 16u), bitcast<f32>(w & 0xffff0000u));
}

// The f32 value of v rounded to f16 / bf16 (used where a kernel emulates a store).
fn round_f16(v: f32) -> f32 { return unpack2x16float(f32_to_f16_bits(v)).x; }
fn round_bf16(v: f32) -> f32 { return bitcast<f32>(f32_to_bf16_bits(v) << 16u); }

// A parameter gradient as PyTorch's autocast produces it: computed in the forward's low dtype
// (rounded once, overflow to inf) before it lands in the f32 gradient. `to`: 0 keeps f32,
// 1 rounds to f16, 2 to bf16 (ROUND_* in src/ops/mod.rs).
fn round_grad(v: f32, to: u32) -> f32 {
    if (to == 1u) { return round_f16(v); }
    if (to == 2u) { return round_bf16(v); }
    return v;
}

// Position in a 1-D launch folded over x and y by the host (gpu::grid_1d): the index of this
// workgroup, and of this thread for `wg` threads per workgroup.
fn workgroup_index(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.x + wid.y * nwg.x;
}
fn thread_index(gid: vec3<u32>, nwg: vec3<u32>, wg: u32) -> u32 {
    return gid.x + gid.y * nwg.x * wg;
}
// A row of `n` elements from `start`, cut into slots a thread stores at once (`X_store_slot`):
// aligned pairs, which are whole words of a packed f16 tensor (store2), and a lone element
// where the row starts or ends inside a word that it shares with its neighbour (the per-half
// store). Slot k is (first element, 1 or 2 elements); the first slot is the lone head when
// `start` is odd.
fn row_slots(start: u32, n: u32) -> u32 {
    let head = min(start & 1u, n);
    return head + (n - head + 1u) / 2u;
}
fn row_slot(start: u32, n: u32, k: u32) -> vec2<u32> {
    let head = min(start & 1u, n);
    if (k < head) {
        return vec2<u32>(start, 1u);
    }
    let i = start + head + 2u * (k - head);
    return vec2<u32>(i, min(2u, start + n - i));
}
// ---- end prelude -----------------------------------------------------------------------

// ---- counter-based RNG for dropout masks (src/ops/dropout.rs has the CPU twin) ---------
// Philox4x32-10 (Salmon et al., SC'11; Random123), checked against Random123's known-answer
// vectors. Pure integer math, so every backend and precision gets the same bits.

// (hi, lo) words of the 64-bit product a * b, from 16-bit halves (WGSL has no mulhi).
fn philox_mulhilo(a: u32, b: u32) -> vec2<u32> {
    let a0 = a & 0xffffu;
    let a1 = a >> 16u;
    let b0 = b & 0xffffu;
    let b1 = b >> 16u;
    let p00 = a0 * b0;
    let p01 = a0 * b1;
    let p10 = a1 * b0;
    let p11 = a1 * b1;
    let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
    let hi = p11 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u);
    return vec2<u32>(hi, a * b);
}

fn philox4x32_10(counter: vec4<u32>, key: vec2<u32>) -> vec4<u32> {
    var c = counter;
    var k = key;
    for (var r = 0u; r < 10u; r++) {
        if (r > 0u) {
            k = k + vec2<u32>(0x9E3779B9u, 0xBB67AE85u);
        }
        let p0 = philox_mulhilo(0xD2511F53u, c.x);
        let p1 = philox_mulhilo(0xCD9E8D57u, c.z);
        c = vec4<u32>(p1.x ^ c.y ^ k.x, p1.y, p0.x ^ c.w ^ k.y, p0.y);
    }
    return c;
}

// Dropout keep decisions for the element pair (index, index + 1), index even: element e
// takes 32-bit word e % 4 of philox4x32_10((e / 4, layer, counter_lo, counter_hi),
// (seed_lo, seed_hi)); its top 24 bits u are kept when u >= threshold (= ceil(p * 2^24)).
// `state` is the DropoutState words [seed_lo, seed_hi, counter_lo, counter_hi, ...].
fn dropout_keep2(state: vec4<u32>, layer: u32, index: u32, threshold: u32) -> vec2<bool> {
    let w = philox4x32_10(vec4<u32>(index >> 2u, layer, state.z, state.w), state.xy);
    var pair = w.xy;
    if ((index & 2u) != 0u) {
        pair = w.zw;
    }
    return vec2<bool>((pair.x >> 8u) >= threshold, (pair.y >> 8u) >= threshold);
}

// dropout(x) = x / (1 - p) where kept, else 0 — except that a dropped inf or NaN gives NaN,
// as PyTorch's x * mask * scale does (0 * inf), so an overflow is never hidden from the
// GradScaler. The backward is the same function of the upstream gradient.
fn dropout_apply(x: f32, keep: bool, scale: f32) -> f32 {
    if (keep) {
        return x * scale;
    }
    if (is_nonfinite(x)) {
        return bitcast<f32>(bitcast<u32>(x) | 0x00400000u);
    }
    return 0.0;
}
// ---- end counter-based RNG -------------------------------------------------------------
