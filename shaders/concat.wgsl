// Concatenation along the last dimension, one input at a time: a composition's concat join
// (src/nn/layers/join.rs). `concat_part` writes x [rows, width] into the columns
// [offset, offset + width) of out [rows, total]; `concat_slice` is its backward, the same
// columns of dy read back into dx [rows, width]. One thread per element of the part, each
// stored alone (a packed 16-bit word shared by two parts is written half by half).

#tensor x 1 read
#tensor out 2 read_write

#struct Params // src/ops/concat.rs
@group(0) @binding(0) var<uniform> params: Params;

const WG: u32 = 256u;

// The element of the whole [rows, total] tensor that element i of the part [rows, width] is.
fn whole_index(i: u32) -> u32 {
    let row = i / params.width;
    return row * params.total + params.offset + (i - row * params.width);
}

@compute @workgroup_size(WG)
fn concat_part(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * WG;
    if (i >= params.n) {
        return;
    }
    out_store(whole_index(i), x_load(i));
}

@compute @workgroup_size(WG)
fn concat_slice(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * WG;
    if (i >= params.n) {
        return;
    }
    out_store(i, x_load(whole_index(i)));
}
