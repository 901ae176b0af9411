// Matrix multiply on cooperative matrices (tensor cores): the same product, layouts, batches
// and epilogue as shaders/matmul.wgsl, for native f16 inputs on adapters whose tensor cores
// are used (src/gpu/tensor_cores.rs). bf16 has no cooperative type in naga 30 and stays on
// the SIMT bodies.
//
// The tile loop is shaders/include/coop_gemm.wgsl; this file says how it reads op(a) and
// op(b): each staged chunk is 8 consecutive halves of the *stored* matrix (along k for a
// plain a, along m for a transposed one; along n for a plain b, along k for a transposed
// one), so a transposed operand is staged as stored and read with column-major loads.
//
// Two variants per layout, chosen per dispatch from the shapes (src/ops/matmul/coop.rs):
// - ALIGNED (interior): M, N and K (or the split's K) are whole tiles, and every row start
//   of a and b is a multiple of 8 halves, so each chunk is one 16-byte load of the tensor
//   bound as `array<mat2x4<f16>>` (eight halves, no conversion), with no bounds test. Range invariant (what makes the trusted
//   pipeline safe): row0 + BM <= M, col0 + BN <= N, k0 + BK <= k_end <= K, so every chunk
//   lies inside its matrix, which check_layout proved inside the tensor.
// - checked (edges): each half tested against the matrix, zero outside.
//
// Constants injected by src/ops/matmul: TRANS_A, TRANS_B, ALIGNED, the tile loop's and the
// epilogue's (include/matmul_common.wgsl).

enable wgpu_cooperative_matrix;

#tensor a 1 read vec4_if ALIGNED
#tensor b 2 read vec4_if ALIGNED
#tensor c 3 read_write
#tensor bias 4 read

#include matmul_common
#include coop_gemm

// One half of a stored matrix, zero outside its rows x cols (checked variant).
fn a_half(row: u32, col: u32, rows: u32, cols: u32) -> f16 {
#if ALIGNED
    return f16(0.0);
#else
    if (row >= rows || col >= cols) {
        return f16(0.0);
    }
    return a[a_base + row * params.a_ld + col];
#end
}
fn b_half(row: u32, col: u32, rows: u32, cols: u32) -> f16 {
#if ALIGNED
    return f16(0.0);
#else
    if (row >= rows || col >= cols) {
        return f16(0.0);
    }
    return b[b_base + row * params.b_ld + col];
#end
}

// Halves col .. col + 4 of a stored row (checked variant).
fn a_quad(row: u32, col: u32, rows: u32, cols: u32) -> vec4<f16> {
    return vec4<f16>(a_half(row, col, rows, cols), a_half(row, col + 1u, rows, cols), a_half(row, col + 2u, rows, cols), a_half(row, col + 3u, rows, cols));
}
fn b_quad(row: u32, col: u32, rows: u32, cols: u32) -> vec4<f16> {
    return vec4<f16>(b_half(row, col, rows, cols), b_half(row, col + 1u, rows, cols), b_half(row, col + 2u, rows, cols), b_half(row, col + 3u, rows, cols));
}

// Staged row r, columns c .. c + 8 of op(a)'s slice at k0: stored a [M, K] rows are m and
// columns k; a transposed a is stored [K, M].
fn coop_chunk_a(r: u32, c: u32, row0: u32, k0: u32) -> Halves {
    var row = row0 + r;
    var col = k0 + c;
    var rows = params.m;
    var cols = k_end;
    if (TRANS_A) {
        row = k0 + r;
        col = row0 + c;
        rows = k_end;
        cols = params.m;
    }
#if ALIGNED
    let h = a_h8((a_base + row * params.a_ld + col) >> 3u);
    return Halves(h[0], h[1]);
#else
    return Halves(a_quad(row, col, rows, cols), a_quad(row, col + 4u, rows, cols));
#end
}

// Staged row r, columns c .. c + 8 of op(b)'s slice at k0: stored b [K, N] rows are k and
// columns n; a transposed b is stored [N, K].
fn coop_chunk_b(r: u32, c: u32, col0: u32, k0: u32) -> Halves {
    var row = k0 + r;
    var col = col0 + c;
    var rows = k_end;
    var cols = params.n;
    if (TRANS_B) {
        row = col0 + r;
        col = k0 + c;
        rows = params.n;
        cols = k_end;
    }
#if ALIGNED
    let h = b_h8((b_base + row * params.b_ld + col) >> 3u);
    return Halves(h[0], h[1]);
#else
    return Halves(b_quad(row, col, rows, cols), b_quad(row, col + 4u, rows, cols));
#end
}

fn coop_store(row: u32, col: u32, v: vec2<f32>) {
    store_result(row, col, v);
}

@compute @workgroup_size(THREADS)
fn matmul_coop(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
    @builtin(subgroup_id) sg: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    if (!start_batch(wid, nwg)) {
        return;
    }
    let row0 = (wid.y % params.m_tiles) * BM;
    let k = k_range(wid); // uniform, as coop_gemm's barriers need (see k_range)
    coop_gemm(tid, sg, lane, row0, wid.x * BN, k.x, k.y);
}
