// Matrix multiply on cooperative matrices (tensor cores): the same product, layouts, batches
// and epilogue as shaders/matmul.wgsl, for native f16 inputs on adapters whose tensor cores
// are used (src/gpu/tensor_cores.rs). bf16 has no cooperative type in naga 30 and stays on
// the SIMT bodies.
//
// The tile loop is shaders/include/coop_gemm.wgsl; this file says how it reads op(a) and
// op(b): each chunk is 8 consecutive halves of the *stored* matrix (along k for a plain a,
// along m for a transposed one; along n for a plain b, along k for a transposed one), and
// the tile loop stages both K-contiguous whichever way they arrive (A_KMAJOR = TRANS_A,
// B_KMAJOR = !TRANS_B).
//
// Two variants per layout, chosen per dispatch from the shapes (src/ops/matmul/coop.rs):
// - ALIGNED (interior): M, N and K (or the split's K) are whole tiles, and every row start
//   of a and b is a multiple of 8 halves, so each chunk is one 16-byte load of the tensor
//   bound as `array<mat2x4<f16>>` (eight halves, no conversion), with no bounds test. Range invariant (what makes the trusted
//   pipeline safe): row0 + BM <= M, col0 + BN <= N, k0 + BK <= k_end <= K, so every chunk
//   lies inside its matrix, which check_layout proved inside the tensor.
// - checked (edges): a chunk wholly inside the matrix is read as eight halves with one test
//   (every chunk but those across its last rows or columns); one across an edge tests each
//   half, zero outside. (Eight tested halves in every chunk kept 4 more registers live: the
//   128x128 tile with B k-major spilled on Ampere.)
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

// Where chunk (r, c) of a slice lies in the stored matrix at k0: stored a [M, K] rows are m
// and columns k; a transposed a is stored [K, M] (r is then a k step, c an m). Likewise b:
// stored [K, N] rows are k, a transposed b is stored [N, K] (r is then an n, c a k step).
fn a_place(r: u32, c: u32, row0: u32, k0: u32) -> vec2<u32> {
    if (TRANS_A) {
        return vec2<u32>(k0 + r, row0 + c);
    }
    return vec2<u32>(row0 + r, k0 + c);
}
fn b_place(r: u32, c: u32, col0: u32, k0: u32) -> vec2<u32> {
    if (TRANS_B) {
        return vec2<u32>(col0 + r, k0 + c);
    }
    return vec2<u32>(k0 + r, col0 + c);
}

// The element index of chunk (r, c) at k = 0; a chunk at k0 lies k0 steps on (k0 elements
// along a K-contiguous row, k0 rows down a k-major matrix).
fn coop_base_a(r: u32, c: u32, row0: u32) -> u32 {
    let p = a_place(r, c, row0, 0u);
    return a_base + p.x * params.a_ld + p.y;
}
fn coop_base_b(r: u32, c: u32, col0: u32) -> u32 {
    let p = b_place(r, c, col0, 0u);
    return b_base + p.x * params.b_ld + p.y;
}

// Chunk (r, c) of op(a)'s slice at k0, the i-th of its unit: one 16-byte load (ALIGNED), or
// eight halves, tested once where the chunk lies inside the matrix, else one by one.
fn coop_chunk_a(base: u32, i: u32, r: u32, c: u32, row0: u32, k0: u32) -> Halves {
#if ALIGNED
    var step = 1u;
    if (TRANS_A) {
        step = params.a_ld;
    }
    let h = a_h8((base + (k0 + i) * step) >> 3u);
    return Halves(h[0], h[1]);
#else
    let p = a_place(r, c, row0, k0);
    var rows = params.m;
    var cols = k_end;
    var step = 1u;
    if (TRANS_A) {
        rows = k_end;
        cols = params.m;
        step = params.a_ld;
    }
    if (p.x < rows && p.y + 8u <= cols) {
        let e = base + (k0 + i) * step;
        return Halves(vec4<f16>(a[e], a[e + 1u], a[e + 2u], a[e + 3u]), vec4<f16>(a[e + 4u], a[e + 5u], a[e + 6u], a[e + 7u]));
    }
    return Halves(a_quad(p.x, p.y, rows, cols), a_quad(p.x, p.y + 4u, rows, cols));
#end
}
fn coop_chunk_b(base: u32, i: u32, r: u32, c: u32, col0: u32, k0: u32) -> Halves {
#if ALIGNED
    var step = params.b_ld;
    if (TRANS_B) {
        step = 1u;
    }
    let h = b_h8((base + (k0 + i) * step) >> 3u);
    return Halves(h[0], h[1]);
#else
    let p = b_place(r, c, col0, k0);
    var rows = k_end;
    var cols = params.n;
    var step = params.b_ld;
    if (TRANS_B) {
        rows = params.n;
        cols = k_end;
        step = 1u;
    }
    if (p.x < rows && p.y + 8u <= cols) {
        let e = base + (k0 + i) * step;
        return Halves(vec4<f16>(b[e], b[e + 1u], b[e + 2u], b[e + 3u]), vec4<f16>(b[e + 4u], b[e + 5u], b[e + 6u], b[e + 7u]));
    }
    return Halves(b_quad(p.x, p.y, rows, cols), b_quad(p.x, p.y + 4u, rows, cols));
#end
}

fn coop_store(row: u32, col: u32, v: vec2<f32>) {
    store_result(row, col, v);
}

@compute @workgroup_size(THREADS)
fn matmul_coop(inv: Invocation) {
    let wid = inv.wid;
    if (!start_batch(wid, inv.nwg)) {
        return;
    }
    let row0 = (wid.y % params.m_tiles) * BM;
    let k = k_range(wid); // uniform, as coop_gemm's barriers need (see k_range)
    coop_gemm(inv, row0, wid.x * BN, k.x, k.y);
}
