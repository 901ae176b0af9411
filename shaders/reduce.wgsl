// Reductions with a fixed order (no float atomics), so every result is bit-reproducible:
// sum and mean of a whole tensor (one or two passes), and the bias gradient (sum over every
// dim except dim 1). Accumulation is f32 whatever the storage.

#tensor x 1 read
#tensor out 2 read_write
#tensor dy 3 read
#tensor db 4 read_write
// Per-workgroup partial sums of the first pass of sum/mean.
@group(0) @binding(5) var<storage, read_write> partials: array<f32>;

#struct Params // src/ops/reduce.rs
@group(0) @binding(0) var<uniform> params: Params;

const WG: u32 = 256u;

#include workgroup_reduce

// First pass: workgroup g sums element pairs g*WG + lid, + groups*WG, ... of x.
@compute @workgroup_size(WG)
fn sum_partials(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let lid = lid3.x;
    let g = wid.x;
    let pairs = params.n / 2u + (params.n & 1u);
    var acc = 0.0;
    for (var p = g * WG + lid; p < pairs; p = p + params.groups * WG) {
        let i = 2u * p;
        if (i + 1u < params.n) {
            let v = x_load2(i);
            acc = acc + (v.x + v.y);
        } else {
            acc = acc + x_load(i);
        }
    }
    let total = workgroup_sum(lid, acc);
    if (lid == 0u) {
        if (params.groups == 1u) {
            out_store(0u, total * params.scale);
        } else {
            partials[g] = total;
        }
    }
}

// Second pass (one workgroup): the partial sums, times scale, into out[0].
@compute @workgroup_size(WG)
fn sum_final(@builtin(local_invocation_id) lid3: vec3<u32>) {
    let lid = lid3.x;
    let total = sum_of_partials(lid, params.groups);
    if (lid == 0u) {
        out_store(0u, total * params.scale);
    }
}

// db[c] (+)= sum of dy[b, c, s] over b and s: one workgroup per channel.
@compute @workgroup_size(WG)
fn bias_grad(
    @builtin(local_invocation_id) lid3: vec3<u32>,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let lid = lid3.x;
    let c = workgroup_index(wid, nwg);
    if (c >= params.channels) {
        return; // whole workgroup: barriers stay in uniform control flow
    }
    let per_channel = params.batch * params.inner;
    var acc = 0.0;
    for (var j = lid; j < per_channel; j = j + WG) {
        let b = j / params.inner;
        let s = j - b * params.inner;
        acc = acc + dy_load((b * params.channels + c) * params.inner + s);
    }
    let total = workgroup_sum(lid, acc);
    if (lid == 0u) {
        var previous = 0.0;
        if (params.accumulate != 0u) {
            previous = db_load(c);
        }
        // Packed db: neighbouring channels share a word; db_store writes only its half.
        db_store(c, previous + round_grad(total, params.round_to));
    }
}
