// AMP helpers over flat f32 buffers: round values in place to a 16-bit dtype. Pure f16 mode
// (no master weights) uses it to keep parameters and gradients f16-valued, which is exactly
// what loses the small updates the tutorials warn about.

#struct Params // src/amp/round.rs
@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> values: array<f32>;

const WG: u32 = 256u;

@compute @workgroup_size(WG)
fn round_inplace(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = thread_index(gid, nwg, WG);
    if (i >= params.n) { return; }
    if (params.dtype == 0u) {
        values[i] = round_f16(values[i]);
    } else {
        values[i] = round_bf16(values[i]);
    }
}
