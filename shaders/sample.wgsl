// Next-token sampling on the GPU (nanoGPT's generate: logits / temperature, optional top-k,
// softmax, multinomial), one workgroup per draw, so N tokens are N dispatches of one
// submission with no host round trip. State lives in small u32 buffers:
//   sample_state[0] = len, the context length (clamped into 1..=block), sample_state[1] = the
//   number of tokens drawn so far (the draw index and the write position in out_tokens).
// Every reduction is integer (exact) or a fixed-order tree, so a seed reproduces the text.

#struct Params // src/ops/sample.rs
@group(0) @binding(0) var<uniform> params: Params;

#tensor logits 1 read
// The context tokens [block] (u32).
@group(0) @binding(2) var<storage, read_write> ctx_tokens: array<u32>;
@group(0) @binding(3) var<storage, read_write> sample_state: array<u32>;
// Every drawn token, at index sample_state[1] (skipped past out_len).
@group(0) @binding(4) var<storage, read_write> out_tokens: array<u32>;

const WG: u32 = 256u;
const NO_INDEX: u32 = 0xffffffffu;

var<workgroup> wg_counts: array<atomic<u32>, 32>; // bisection round r: count of keys >= candidate
var<workgroup> wg_max_kept: atomic<u32>;   // largest key of a kept finite value (0: none)
var<workgroup> wg_max_any: atomic<u32>;    // largest key of all
var<workgroup> wg_argmax: atomic<u32>;     // first index with the largest key
var<workgroup> wg_selected: atomic<u32>;   // first index whose cumulative weight > target
var<workgroup> wg_last_weighted: atomic<u32>; // 1 + last index with a positive weight (0: none)
var<workgroup> wg_scan: array<f32, WG>;

// ---- counter-based uniforms -----------------------------------------------------------------

// A 32-bit integer mixer (Wellons' "triple32": a bijection with very low bias).
fn mix32(x_in: u32) -> u32 {
    var x = x_in;
    x = x ^ (x >> 17u);
    x = x * 0xed5ad4bbu;
    x = x ^ (x >> 11u);
    x = x * 0xac4c1b51u;
    x = x ^ (x >> 15u);
    x = x * 0x31848babu;
    x = x ^ (x >> 14u);
    return x;
}

// Uniform in [0, 1) with 24 bits from (seed, draw): a sponge absorbing the four words.
fn uniform01(seed_lo: u32, seed_hi: u32, draw_lo: u32, draw_hi: u32) -> f32 {
    var h = mix32(seed_lo ^ 0x9e3779b9u);
    h = mix32(h ^ seed_hi);
    h = mix32(h ^ draw_lo);
    h = mix32(h ^ draw_hi);
    return f32(h >> 8u) * (1.0 / 16777216.0);
}

// ---- order keys -----------------------------------------------------------------------------

// A u32 whose unsigned order is the float order: -inf < ... < -0 = +0 < ... < +inf; NaN gets 0,
// below everything (it is never kept by a top-k, never sampled).
fn order_key(v: f32) -> u32 {
    let b = bitcast<u32>(v);
    if ((b & 0x7fffffffu) > 0x7f800000u) {
        return 0u;
    }
    if (b == 0x80000000u) {
        return 0x80000000u; // -0 ranks with +0, as the float comparison does
    }
    if ((b & 0x80000000u) != 0u) {
        return ~b;
    }
    return b | 0x80000000u;
}

fn key_value(k: u32) -> f32 {
    if ((k & 0x80000000u) != 0u) {
        return bitcast<f32>(k & 0x7fffffffu);
    }
    return bitcast<f32>(~k);
}

fn is_finite(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7f800000u) != 0x7f800000u;
}

// Scaled logit j of the row.
fn z_at(base: u32, j: u32) -> f32 {
    return logits_load(base + j) / params.temperature;
}

// Softmax numerator of j: exp(z - m) when kept (key >= threshold, finite), else 0.
fn weight_at(base: u32, j: u32, threshold: u32, m: f32) -> f32 {
    let z = z_at(base, j);
    if (order_key(z) >= threshold && is_finite(z)) {
        return exp(z - m);
    }
    return 0.0;
}

// One draw. Thread l owns the contiguous indices [l * per, (l + 1) * per) of the row.
@compute @workgroup_size(WG)
fn sample_token(@builtin(local_invocation_id) lid3: vec3<u32>) {
    let lid = lid3.x;
    let len = clamp(sample_state[0], 1u, params.block);
    let draw = sample_state[1];
    let base = (len - 1u) * params.vocab;
    let per = (params.vocab + WG - 1u) / WG;
    let first = min(lid * per, params.vocab);
    let last = min(first + per, params.vocab);

    if (lid < 32u) {
        atomicStore(&wg_counts[lid], 0u);
    }
    if (lid == 0u) {
        atomicStore(&wg_max_kept, 0u);
        atomicStore(&wg_max_any, 0u);
        atomicStore(&wg_argmax, NO_INDEX);
        atomicStore(&wg_selected, NO_INDEX);
        atomicStore(&wg_last_weighted, 0u);
    }
    workgroupBarrier();

    // Top-k threshold: the k-th largest key, found bit by bit from the top as the largest
    // key K with #{j : key_j >= K} >= k (exact integer counts, so ties are all kept).
    var threshold = 0u;
    if (params.top_k < params.vocab) {
        var prefix = 0u;
        for (var r = 0u; r < 32u; r = r + 1u) {
            let candidate = prefix | (1u << (31u - r));
            var count = 0u;
            for (var j = first; j < last; j = j + 1u) {
                if (order_key(z_at(base, j)) >= candidate) {
                    count = count + 1u;
                }
            }
            if (count > 0u) {
                atomicAdd(&wg_counts[r], count);
            }
            workgroupBarrier();
            if (atomicLoad(&wg_counts[r]) >= params.top_k) {
                prefix = candidate;
            }
        }
        threshold = prefix;
    }

    // Largest kept finite value (the softmax shift) and the argmax (fallback).
    var max_kept = 0u;
    var max_any = 0u;
    for (var j = first; j < last; j = j + 1u) {
        let z = z_at(base, j);
        let k = order_key(z);
        max_any = max(max_any, k);
        if (k >= threshold && is_finite(z)) {
            max_kept = max(max_kept, k);
        }
    }
    atomicMax(&wg_max_kept, max_kept);
    atomicMax(&wg_max_any, max_any);
    workgroupBarrier();
    let top_key = atomicLoad(&wg_max_any);
    for (var j = first; j < last; j = j + 1u) {
        if (order_key(z_at(base, j)) == top_key) {
            atomicMin(&wg_argmax, j);
            break;
        }
    }
    let m = key_value(atomicLoad(&wg_max_kept));

    // Cumulative weights in index order: per-thread sums, then a Hillis-Steele scan.
    var own = 0.0;
    for (var j = first; j < last; j = j + 1u) {
        own = own + weight_at(base, j, threshold, m);
    }
    wg_scan[lid] = own;
    workgroupBarrier();
    for (var d = 1u; d < WG; d = d << 1u) {
        var s = wg_scan[lid];
        if (lid >= d) {
            s = wg_scan[lid - d] + s;
        }
        workgroupBarrier();
        wg_scan[lid] = s;
        workgroupBarrier();
    }
    let total = wg_scan[WG - 1u];
    var cumulative = 0.0;
    if (lid > 0u) {
        cumulative = wg_scan[lid - 1u];
    }
    let goal = uniform01(params.seed_lo, params.seed_hi, draw, 0u) * total;
    var found = false;
    var last_weighted = 0u;
    for (var j = first; j < last; j = j + 1u) {
        let w = weight_at(base, j, threshold, m);
        cumulative = cumulative + w;
        if (!found && cumulative > goal) {
            found = true;
            atomicMin(&wg_selected, j);
        }
        if (w > 0.0) {
            last_weighted = j + 1u;
        }
    }
    atomicMax(&wg_last_weighted, last_weighted);

    // Context window: when full, shift left by one (chunks of WG; every read of a chunk lands
    // before any write of it, and later chunks read only positions not yet written).
    let full = len >= params.block;
    for (var c = 0u; c < params.block; c = c + WG) {
        let i = c + lid;
        let moves = full && i + 1u < params.block;
        var v = 0u;
        if (moves) {
            v = ctx_tokens[i + 1u];
        }
        storageBarrier();
        if (moves) {
            ctx_tokens[i] = v;
        }
        storageBarrier();
    }
    workgroupBarrier();

    if (lid == 0u) {
        var token = atomicLoad(&wg_selected);
        if (token == NO_INDEX) {
            // Rounding put the target at the total: the last weighted index; no weight at
            // all (no finite value kept): the argmax.
            let lw = atomicLoad(&wg_last_weighted);
            if (lw > 0u) {
                token = lw - 1u;
            } else {
                token = atomicLoad(&wg_argmax);
            }
        }
        if (full) {
            ctx_tokens[params.block - 1u] = token;
        } else {
            ctx_tokens[len] = token;
            sample_state[0] = len + 1u;
        }
        if (draw < params.out_len) {
            out_tokens[draw] = token;
        }
        sample_state[1] = draw + 1u;
    }
}
