// Shared by the matmul kernels (shaders/matmul.wgsl, the SIMT bodies, and
// shaders/matmul_coop.wgsl, the cooperative-matrix body): the uniform block, the strided
// batch walk and split of K, the index math of op(a) and op(b), and the epilogue every body
// stores through (bias, accumulate, rounding, f16 stores with round-to-nearest-even and
// overflow to inf).

#struct Params // src/ops/matmul/launch.rs
@group(0) @binding(0) var<uniform> params: Params;

// Split-K partial sums (f32 [splits, M, N]): kernels built with SPLIT_OUT write their split's
// raw sums here, and matmul_split_reduce adds the splits in order through the epilogue.
#tensor partials 5 read_write

// The epilogue's options are compile-time constants of each pipeline (src/ops/matmul/
// epilogue.rs), so no store branches on them at run time:
//   EPI_BIAS        add bias[col]
//   EPI_ROUND       round the product before it is stored or accumulated (round_grad's `to`)
//   EPI_ACCUMULATE  add the product to c's existing values
//   EPI_PAIRS       every column pair (col, col + 1) with col even starts a packed word of c
//                   (c_off, c_ld and the batch strides are even), so one store2 writes it
//   SPLIT_OUT       the kernel writes split-K partial sums instead (no epilogue yet)

// Element offsets of this workgroup's matrices, and its split of K (set once at the top of
// each entry point by start_batch).
var<private> a_base: u32;
var<private> b_base: u32;
var<private> c_base: u32;
var<private> k_end: u32;
var<private> split_id: u32;

// This workgroup's k range [x, y), from the grid and the uniform params only. A loop whose
// bounds come from it may hold barriers: Tint's uniformity analysis takes any read of a
// module-scope private variable (such as k_end) as non-uniform and rejects them there.
fn k_range(wid: vec3<u32>) -> vec2<u32> {
#if SPLIT_OUT
    let lo = wid.z * params.k_split;
    return vec2<u32>(lo, min(params.k, lo + params.k_split));
#else
    return vec2<u32>(0u, params.k);
#end
}

// Pick this workgroup's batch and m tile; false when it is a padding workgroup past the last
// batch (a whole workgroup, so returning is uniform). One return, at the end: FXC (DX12's
// default compiler) takes a value returned from inside an `if` as possibly uninitialized and
// then rejects every barrier after the caller's check as in varying control flow (X4026).
// A padding workgroup's bases are never read.
fn start_batch(wid: vec3<u32>, nwg: vec3<u32>) -> bool {
    // The end of k, for the edge variants' bounds tests when staging.
    k_end = k_range(wid).y;
#if SPLIT_OUT
    // One matrix; the grid's z walks the splits of K.
    split_id = wid.z;
    a_base = params.a_off;
    b_base = params.b_off;
    c_base = params.c_off;
    return true;
#else
    let zf = wid.z + (wid.y / params.m_tiles) * nwg.z;
    let z0 = zf / params.batch_inner;
    let z1 = zf % params.batch_inner;
    a_base = params.a_off + z0 * params.a_s0 + z1 * params.a_s1;
    b_base = params.b_off + z0 * params.b_s0 + z1 * params.b_s1;
    c_base = params.c_off + z0 * params.c_s0 + z1 * params.c_s1;
    return zf < params.batches;
#end
}

// Flat index of op(a)[row, kk] = a_row_base(row) + kk * a_k_stride().
fn a_row_base(row: u32) -> u32 {
    if (TRANS_A) { return a_base + row; }
    return a_base + row * params.a_ld;
}
fn a_k_stride() -> u32 {
    if (TRANS_A) { return params.a_ld; }
    return 1u;
}
// Flat index of op(b)[kk, col] = b_col_base(col) + kk * b_k_stride().
fn b_col_base(col: u32) -> u32 {
    if (TRANS_B) { return b_base + col * params.b_ld; }
    return b_base + col;
}
fn b_k_stride() -> u32 {
    if (TRANS_B) { return 1u; }
    return params.b_ld;
}

// The epilogue every body stores through, for the column pair (col, col + 1) of one row:
// bias, rounding, accumulate, store (f16 stores round to nearest even, overflow to inf). A
// thread owns both halves of the packed word when the pairs are word-aligned (EPI_PAIRS: N
// even for a plain matmul; col is always even), so it writes the pair with one store2;
// otherwise a word may span two rows owned by different threads, and the single-element
// stores (atomic on packed storage) keep that race-free. A fused activation or residual
// belongs here, on `out`, before the one rounding.
fn store_pair(row: u32, col: u32, v: vec2<f32>) {
    let n = params.n;
    if (row >= params.m || col >= n) {
        return;
    }
    let has_second = col + 1u < n;
    var out = v;
    if (EPI_BIAS) {
        out.x += bias_load(col);
        if (has_second) {
            out.y += bias_load(col + 1u);
        }
    }
    if (EPI_ROUND != 0u) {
        out = vec2<f32>(round_grad(out.x, EPI_ROUND), round_grad(out.y, EPI_ROUND));
    }
    let idx = c_base + row * params.c_ld + col;
    if (has_second && EPI_PAIRS) {
        if (EPI_ACCUMULATE) {
            out += c_load2(idx);
        }
        c_store2(idx, out);
    } else {
        if (EPI_ACCUMULATE) {
            out.x += c_load(idx);
        }
        c_store(idx, out.x);
        if (has_second) {
            if (EPI_ACCUMULATE) {
                out.y += c_load(idx + 1u);
            }
            c_store(idx + 1u, out.y);
        }
    }
}

// Where a body's results go: the epilogue, or (SPLIT_OUT) this split's partial sums, raw.
fn store_result(row: u32, col: u32, v: vec2<f32>) {
#if SPLIT_OUT
    let n = params.n;
    if (row >= params.m || col >= n) {
        return;
    }
    let idx = (split_id * params.m + row) * n + col;
    partials_store(idx, v.x);
    if (col + 1u < n) {
        partials_store(idx + 1u, v.y);
    }
#else
    store_pair(row, col, v);
#end
}
