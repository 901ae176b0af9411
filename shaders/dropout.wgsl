// Dropout with a counter-based mask: element e of layer L is kept or dropped by
// dropout_keep2 (prelude), a pure function of (seed, micro-batch counter, L, e). Masks are
// therefore identical under every precision and backend and after a resume, nothing is
// stored between forward and backward, and the backward recomputes the same mask.
//
// Forward: y = dropout(x); backward: dx = dropout(dy) (same mask and scale). In eval mode
// (training word 0) or with p = 0 both are the identity (a cast into the output's storage).
// One thread per 4 elements (one Philox block), written as two whole-word pairs.

#tensor x 1 read
#tensor y 2 read_write
// DropoutState: [seed_lo, seed_hi, counter_lo, counter_hi, training, 0, 0, 0].
@group(0) @binding(3) var<storage, read> dropout_state: array<u32>;

#struct Params // src/ops/dropout.rs
@group(0) @binding(0) var<uniform> params: Params;

const WG: u32 = 256u;

// x -> y for the pair (i, i + 1) (i even, both in range, or only i when i + 1 == n).
fn dropout_pair(i: u32, state: vec4<u32>, enabled: bool) {
    let pair = i + 1u < params.n;
    var v = vec2<f32>(x_load(i), 0.0);
    if (pair) {
        v = x_load2(i);
    }
    var out = v;
    if (enabled) {
        let keep = dropout_keep2(state, params.layer, i, params.threshold);
        out = vec2<f32>(dropout_apply(v.x, keep.x, params.scale), dropout_apply(v.y, keep.y, params.scale));
    }
    if (pair) {
        y_store2(i, out);
    } else {
        y_store(i, out.x);
    }
}

@compute @workgroup_size(WG)
fn dropout(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = 4u * (gid.x + gid.y * nwg.x * WG);
    if (i >= params.n) {
        return;
    }
    let state = vec4<u32>(dropout_state[0], dropout_state[1], dropout_state[2], dropout_state[3]);
    let enabled = dropout_state[4] != 0u && params.threshold != 0u;
    dropout_pair(i, state, enabled);
    if (i + 2u < params.n) {
        dropout_pair(i + 2u, state, enabled);
    }
}
