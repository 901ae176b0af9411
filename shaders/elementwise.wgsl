// Elementwise ops, forward and backward side by side. One thread per element pair, so
// packed outputs are written a whole word at a time (store2).

#tensor x 1 read
#tensor y 2 read
#tensor out 3 read_write

struct Params {
    n: u32,       // number of elements
    alpha: f32,   // scale factor (scale op)
    _pad0: u32,
    _pad1: u32,
}
@group(0) @binding(0) var<uniform> params: Params;

const WG: u32 = 256u;

// Index of the first element this thread handles (two per thread), or n when out of range.
fn pair_index(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return 2u * (gid.x + gid.y * nwg.x * WG);
}

// Apply f to x, writing out: a full pair, or the single last element.
@compute @workgroup_size(WG)
fn cast_forward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = pair_index(gid, nwg);
    if (i + 1u < params.n) {
        out_store2(i, x_load2(i));
    } else if (i < params.n) {
        out_store(i, x_load(i));
    }
}

@compute @workgroup_size(WG)
fn add(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = pair_index(gid, nwg);
    if (i + 1u < params.n) {
        out_store2(i, x_load2(i) + y_load2(i));
    } else if (i < params.n) {
        out_store(i, x_load(i) + y_load(i));
    }
}

@compute @workgroup_size(WG)
fn relu_forward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = pair_index(gid, nwg);
    if (i + 1u < params.n) {
        out_store2(i, max(x_load2(i), vec2<f32>(0.0)));
    } else if (i < params.n) {
        out_store(i, max(x_load(i), 0.0));
    }
}

// x: forward input, y: upstream gradient, out: input gradient.
@compute @workgroup_size(WG)
fn relu_backward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = pair_index(gid, nwg);
    if (i + 1u < params.n) {
        out_store2(i, select(vec2<f32>(0.0), y_load2(i), x_load2(i) > vec2<f32>(0.0)));
    } else if (i < params.n) {
        out_store(i, select(0.0, y_load(i), x_load(i) > 0.0));
    }
}
