// A kernel declared outside the crate (tests/custom_op.rs): y = x · s, a learned scale per
// column of a [rows, cols] input, and its gradients. Specialised per storage like every
// built-in shader; the uniform block comes from the Rust `Params`.

#tensor x 1 read
#tensor s 2 read
#tensor y 3 read_write
#tensor dy 4 read
#tensor ds 5 read_write

#struct Params // tests/custom_op.rs
@group(0) @binding(0) var<uniform> params: Params;

const WG: u32 = 64u;

// y[r, c] = x[r, c] · s[c]; the input gradient is the same product (dx = dy · s).
@compute @workgroup_size(WG)
fn scale_columns(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = thread_index(gid, nwg, WG);
    if (i >= params.rows * params.cols) {
        return;
    }
    y_store(i, x_load(i) * s_load(i % params.cols));
}

// ds[c] += Σ_r dy[r, c] · x[r, c], rows in order (one thread per column: the same bits
// every run), accumulated in f32.
@compute @workgroup_size(WG)
fn scale_grad(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let c = thread_index(gid, nwg, WG);
    if (c >= params.cols) {
        return;
    }
    var acc = 0.0;
    for (var r = 0u; r < params.rows; r++) {
        let i = r * params.cols + c;
        acc += dy_load(i) * x_load(i);
    }
    ds_store(c, ds_load(c) + acc);
}
