// LayerNorm over the last dim of x [rows, C] (torch.nn.LayerNorm(C), biased variance,
// rstd = 1 / sqrt(var + eps)), forward and backward. Statistics and all math in f32 whatever
// the storages; two-pass statistics (mean, then the centred sum of squares).
// With the variant constant RMS, Llama's RMSNorm (transformers' LlamaRMSNorm) instead:
// rstd = 1 / sqrt(mean(x²) + eps) in f32, y = weight · (x · rstd rounded to x's dtype), no
// mean, no bias; its backward dx = rstd · (g − x̂ · mean(g · x̂)), g = dy · weight rounded to
// x's dtype, x̂ = x · rstd, dweight = Σ dy · (x̂ rounded to x's dtype).
// Deterministic: row reductions are fixed-order workgroup trees, and the weight and bias
// gradients are summed over fixed chunks of rows into a scratch buffer (by the input
// gradient's kernel, which reads the same x and dy), then over the chunks in chunk order
// (no float atomics), so the same inputs give the same bits every run.

#tensor x 1 read
#tensor weight 2 read
// Without a bias the Rust side binds `weight` here and sets has_bias = 0; it is never read.
#tensor bias 3 read
#tensor y 4 read_write
// Statistics written by the forward (f32) ...
#tensor mean_out 5 read_write
#tensor rstd_out 6 read_write
// ... and read by the backward (separate names keep the backward's bindings read-only).
#tensor dy 7 read
#tensor mean 8 read
#tensor rstd 9 read
#tensor dx 10 read_write
#tensor dweight 11 read_write
// Without a bias the Rust side binds a one-word buffer of its own here (WebGPU refuses two
// writable bindings of one range) and sets has_bias = 0; it is never touched.
#tensor dbias 12 read_write
// Per-chunk partial sums of the parameter gradients: [chunks, C] of sum dy * xhat, then (with
// a bias) [chunks, C] of sum dy.
@group(0) @binding(13) var<storage, read_write> partials: array<f32>;
// The forward with a residual's add (variant constant ADD_INPUT): the sum `s = a + b` is
// written in sum_out's storage, as the add kernel would, and normalised in place of `x`.
#tensor a 14 read
#tensor b 15 read
#tensor sum_out 16 read_write
// The input gradient's copy in a low dtype (variant constant LOW_COPY), for a residual
// branch that reads it there: the same rounding as the cast kernel it replaces.
#tensor dx_low 17 read_write

#struct Params // src/ops/layernorm.rs
@group(0) @binding(0) var<uniform> params: Params;

// Threads per row (forward and input gradient), and per workgroup of the flat kernels.
const ROW_WG: u32 = 64u;
const WG: u32 = 256u;

var<workgroup> scratch: array<vec2<f32>, ROW_WG>;

// Sums of both components over the workgroup in a fixed tree order; every thread gets them.
fn row_sum2(lid: u32, v: vec2<f32>) -> vec2<f32> {
    workgroupBarrier(); // earlier readers of scratch are done
    scratch[lid] = v;
    workgroupBarrier();
    for (var s = ROW_WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            scratch[lid] = scratch[lid] + scratch[lid + s];
        }
        workgroupBarrier();
    }
    return scratch[0];
}

// ---- forward ------------------------------------------------------------------------------

// The values normalised: x, or the sum the kernel wrote first.
fn ln_in(i: u32) -> f32 {
#if ADD_INPUT
    return sum_out_load(i);
#else
    return x_load(i);
#end
}

// x̂ as RMSNorm hands it to the weight: `.to(input_dtype)` (params.x_round: 0 f32, 1 f16,
// 2 bf16, round_grad's codes).
fn rms_cast(xhat: f32) -> f32 {
    return round_grad(xhat, params.x_round);
}

fn ln_y(base: u32, j: u32, mu: f32, rs: f32) -> f32 {
#if RMS
    return weight_load(j) * rms_cast(ln_in(base + j) * rs);
#else
    var v = ((ln_in(base + j) - mu) * rs) * weight_load(j);
    if (params.has_bias != 0u) {
        v = v + bias_load(j);
    }
    return v;
#end
}

// One workgroup per row: mean, then variance of the centred values, then y, stored by row
// slots (prelude's `row_slot`: whole words of a packed y; a lone slot's second value is its
// first again, and is not stored).
@compute @workgroup_size(ROW_WG)
fn layernorm_forward(#workgroup_builtins) {
    let row = workgroup_index(wid, nwg);
    if (row >= params.rows) {
        return; // whole workgroup: barriers stay in uniform control flow
    }
    let n = params.cols;
    let base = row * n;
#if ADD_INPUT
    // The residual's add, slot by slot as its own kernel stores pairs; then every thread
    // reads its row's sums back (other threads wrote some).
    for (var k = lid; k < row_slots(base, n); k = k + ROW_WG) {
        let slot = row_slot(base, n, k);
        let last = slot.x + slot.y - 1u;
        sum_out_store_slot(slot, vec2<f32>(a_load(slot.x) + b_load(slot.x), a_load(last) + b_load(last)));
    }
    storageBarrier();
#end
#if RMS
    let mu = 0.0; // RMSNorm does not centre: the sum of squares is of x itself
#else
    var sum = 0.0;
    for (var j = lid; j < n; j = j + ROW_WG) {
        sum = sum + ln_in(base + j);
    }
    let mu = row_sum2(lid, vec2<f32>(sum, 0.0)).x / f32(n);
#end
    var ss = 0.0;
    for (var j = lid; j < n; j = j + ROW_WG) {
        let d = ln_in(base + j) - mu;
        ss = ss + d * d;
    }
    let variance = row_sum2(lid, vec2<f32>(ss, 0.0)).x / f32(n);
    let rs = 1.0 / sqrt(variance + params.eps);
    if (lid == 0u) {
#if !RMS
        mean_out_store(row, mu);
#end
        rstd_out_store(row, rs);
    }
    for (var k = lid; k < row_slots(base, n); k = k + ROW_WG) {
        let slot = row_slot(base, n, k);
        let y0 = ln_y(base, slot.x - base, mu, rs);
        y_store_slot(slot, vec2<f32>(y0, ln_y(base, slot.x + slot.y - 1u - base, mu, rs)));
    }
}

// ---- backward: input gradient and the parameter gradients' partial sums ---------------------

// g = dy * weight (RMSNorm: in x's dtype, as autograd forms it before the cast back).
fn ln_g(i: u32, j: u32) -> f32 {
#if RMS
    return rms_cast(dy_load(i) * weight_load(j));
#else
    return dy_load(i) * weight_load(j);
#end
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), xhat = (x - mean) * rstd (RMSNorm: mean
// and mean(g) are 0).
fn ln_dx(base: u32, j: u32, mu: f32, rs: f32, mg: f32, mgx: f32) -> f32 {
    let xhat = (x_load(base + j) - mu) * rs;
    return rs * ((ln_g(base + j, j) - mg) - xhat * mgx);
}

// One workgroup per chunk of `chunk_rows` rows, row after row. For each row: the tree sums of
// (g, g * xhat), then dx. On the way, the thread owning column c adds dy * xhat and dy of
// each row, in row order, to the chunk's partial sums of c (it alone touches them, so the
// order, hence the bits, are fixed). x and dy are read once for both gradients.
@compute @workgroup_size(ROW_WG)
fn layernorm_backward(#workgroup_builtins) {
    let n = params.cols;
    let k = workgroup_index(wid, nwg);
    if (k >= params.chunks) {
        return; // whole workgroup
    }
    let first = k * params.chunk_rows;
    let last_row = min(first + params.chunk_rows, params.rows);
    let pb_base = params.chunks * n;
    for (var row = first; row < last_row; row = row + 1u) {
        let base = row * n;
#if RMS
        let mu = 0.0;
#else
        let mu = mean_load(row);
#end
        let rs = rstd_load(row);
        var acc = vec2<f32>(0.0, 0.0);
        for (var j = lid; j < n; j = j + ROW_WG) {
            let d = dy_load(base + j);
            let xhat = (x_load(base + j) - mu) * rs;
            let g = ln_g(base + j, j);
            acc = acc + vec2<f32>(g, g * xhat);
            // Sums from 0, as a register would hold them (the same bits). RMSNorm's weight
            // multiplied the cast x̂.
#if RMS
            let dw = d * rms_cast(xhat);
#else
            let dw = d * xhat;
#end
            let p = k * n + j;
            var pw = 0.0;
            if (row != first) {
                pw = partials[p];
            }
            partials[p] = pw + dw;
            if (params.has_bias != 0u) {
                var pb = 0.0;
                if (row != first) {
                    pb = partials[pb_base + p];
                }
                partials[pb_base + p] = pb + d;
            }
        }
        let sums = row_sum2(lid, acc);
#if RMS
        let mg = 0.0;
#else
        let mg = sums.x / f32(n);
#end
        let mgx = sums.y / f32(n);
        for (var q = lid; q < row_slots(base, n); q = q + ROW_WG) {
            let slot = row_slot(base, n, q);
            let dx0 = ln_dx(base, slot.x - base, mu, rs, mg, mgx);
            var v = vec2<f32>(dx0, ln_dx(base, slot.x + slot.y - 1u - base, mu, rs, mg, mgx));
            // Added onto the gradient already in dx (a residual's skip path; f32 dx only, so
            // the sum rounds once, as the separate accumulate did).
            if (params.accumulate != 0u) {
                if (slot.y == 2u) {
                    v = v + dx_load2(slot.x);
                } else {
                    v.x = v.x + dx_load(slot.x);
                }
            }
            dx_store_slot(slot, v);
#if LOW_COPY
            dx_low_store_slot(slot, v);
#end
        }
    }
}

// ---- backward: weight and bias gradients ------------------------------------------------------

// Second pass: thread c adds the chunk sums, in chunk order, to dweight[c] (and dbias[c]).
@compute @workgroup_size(WG)
fn layernorm_param_final(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let n = params.cols;
    let c = thread_index(gid, nwg, WG);
    if (c >= n) {
        return;
    }
    var sw = 0.0;
    var sb = 0.0;
    for (var k = 0u; k < params.chunks; k = k + 1u) {
        sw = sw + partials[k * n + c];
        if (params.has_bias != 0u) {
            sb = sb + partials[(params.chunks + k) * n + c];
        }
    }
    dweight_store(c, dweight_load(c) + sw);
    if (params.has_bias != 0u) {
        dbias_store(c, dbias_load(c) + sb);
    }
}
