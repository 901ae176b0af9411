// Shared by the matmul kernels (shaders/matmul.wgsl, the SIMT bodies, and
// shaders/matmul_coop.wgsl, the cooperative-matrix body): the uniform block, the strided
// batch walk, the index math of op(a) and op(b), the staging of tiles through workgroup
// memory, and the epilogue every body stores through (bias, accumulate, rounding, f16 stores
// with round-to-nearest-even and overflow to inf).

#struct Params // src/ops/matmul/launch.rs
@group(0) @binding(0) var<uniform> params: Params;

const FLAG_ACCUMULATE: u32 = 1u;
const FLAG_BIAS: u32 = 2u;
// Every column pair (col, col + 1) with col even starts a packed word of c (c_off, c_ld and
// the batch strides are even), so a thread owning both writes them with one store2.
const FLAG_PAIRS: u32 = 4u;
// The product's rounding before it is stored or accumulated: bits 3-4 hold round_grad's `to`.
const ROUND_SHIFT: u32 = 3u;

// Element offsets of this workgroup's matrices (set once at the top of each entry point).
var<private> a_base: u32;
var<private> b_base: u32;
var<private> c_base: u32;

// Pick this workgroup's batch and m tile; false when it is a padding workgroup past the last
// batch (a whole workgroup, so returning is uniform). One return, at the end: FXC (DX12's
// default compiler) takes a value returned from inside an `if` as possibly uninitialized and
// then rejects every barrier after the caller's check as in varying control flow (X4026).
// A padding workgroup's bases are never read.
fn start_batch(wid: vec3<u32>, nwg: vec3<u32>) -> bool {
    let zf = wid.z + (wid.y / params.m_tiles) * nwg.z;
    let z0 = zf / params.batch_inner;
    let z1 = zf % params.batch_inner;
    a_base = params.a_off + z0 * params.a_s0 + z1 * params.a_s1;
    b_base = params.b_off + z0 * params.b_s0 + z1 * params.b_s1;
    c_base = params.c_off + z0 * params.c_s0 + z1 * params.c_s1;
    return zf < params.batches;
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

// ---- tile staging ---------------------------------------------------------------------
// A k slice of op(a) (BM x BK, at row0, k0) and of op(b) (BK x BN, at k0, col0), staged as
// include/tile_staging.wgsl says: step s of thread tid stages element tid + s * THREADS of
// each tile (BM * BK / THREADS steps for a, BN * BK / THREADS for b). Used by the tiled SIMT
// body and the cooperative one. Needs the including shader's BM, BN, BK and THREADS.
#include tile_staging

// op(a)[row, kg] and op(b)[kg, col], 0 outside the matrices.
fn a_or_zero(row: u32, kg: u32) -> f32 {
    if (row >= params.m || kg >= params.k) { return 0.0; }
    return a_load(a_row_base(row) + kg * a_k_stride());
}
fn b_or_zero(kg: u32, col: u32) -> f32 {
    if (col >= params.n || kg >= params.k) { return 0.0; }
    return b_load(b_col_base(col) + kg * b_k_stride());
}

fn a_tile_element(tid: u32, s: u32, row0: u32, k0: u32) -> TileElement {
    let p = tile_position(tid + s * THREADS, BM, !TRANS_A);
    return TileElement(p.x, p.y, a_or_zero(row0 + p.x, k0 + p.y));
}

fn b_tile_element(tid: u32, s: u32, col0: u32, k0: u32) -> TileElement {
    let p = tile_position(tid + s * THREADS, BN, TRANS_B);
    return TileElement(p.y, p.x, b_or_zero(k0 + p.y, col0 + p.x));
}

// Epilogue for the column pair (col, col + 1) of one row: bias, accumulate, store. A thread
// owns both halves of the packed word when the pairs are word-aligned (FLAG_PAIRS: N even
// for a plain matmul; col is always even), so it writes the pair with one store2; otherwise
// a word may span two rows owned by different threads, and the single-element stores
// (atomic on packed storage) keep that race-free.
fn store_pair(row: u32, col: u32, v: vec2<f32>) {
    let n = params.n;
    if (row >= params.m || col >= n) {
        return;
    }
    let has_second = col + 1u < n;
    var out = v;
    if ((params.flags & FLAG_BIAS) != 0u) {
        out.x += bias_load(col);
        if (has_second) {
            out.y += bias_load(col + 1u);
        }
    }
    let round_to = (params.flags >> ROUND_SHIFT) & 3u;
    out = vec2<f32>(round_grad(out.x, round_to), round_grad(out.y, round_to));
    let accumulate = (params.flags & FLAG_ACCUMULATE) != 0u;
    let idx = c_base + row * params.c_ld + col;
    if (has_second && (params.flags & FLAG_PAIRS) != 0u) {
        if (accumulate) {
            out += c_load2(idx);
        }
        c_store2(idx, out);
    } else {
        if (accumulate) {
            out.x += c_load(idx);
        }
        c_store(idx, out.x);
        if (has_second) {
            if (accumulate) {
                out.y += c_load(idx + 1u);
            }
            c_store(idx + 1u, out.y);
        }
    }
}
