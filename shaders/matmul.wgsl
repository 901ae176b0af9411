// Matrix multiply: c[M,N] (+)= op(a) · op(b) (+ bias[N] broadcast over rows), accumulated in
// f32 whatever the storages. op(a) is a [M,K] or aᵀ of a [K,M] (TRANS_A); op(b) is b [K,N]
// or bᵀ of b [N,K] (TRANS_B).
//
// Strided batches: each matrix lives at `off + z0 * s0 + z1 * s1` in its tensor with row
// stride `ld` (the stored matrix's row stride: [K,M] for TRANS_A, [N,K] for TRANS_B), for
// z = (z0, z1) over the batch. A plain matmul is one batch of contiguous matrices (off 0,
// ld = stored columns), and the arithmetic is the same either way: only index math differs.
//
// Constants injected by src/ops/matmul.rs (one pipeline per combination):
//   TRANS_A, TRANS_B: bool   layouts, so index arithmetic is fixed at compile time
//   WG_X, WG_Y: u32          threads per workgroup along N and M
//   TM, TN: u32              outputs per thread along M and N (tiled: multiples of 4;
//                            direct: TN even; either way a thread owns whole column pairs,
//                            so packed outputs are written a word at a time)
//   BK: u32                  depth of a shared-memory tile (matmul_tiled only)
//
// Three entry points:
// - matmul_tiled: workgroup tiles of (WG_Y*TM) x (WG_X*TN) staged through workgroup memory,
//   each thread accumulating a TM x TN register block. For real GPUs.
// - matmul_direct: the same register blocking read straight from the buffers, no workgroup
//   memory and no barriers. For CPU adapters (lavapipe, llvmpipe), where a barrier is a
//   context switch between invocations and the caches already do the tiling.
// - matmul_direct_narrow: matmul_direct for products at most half a workgroup's columns
//   wide, the threads split into row groups (params.lanes threads each).

#tensor a 1 read
#tensor b 2 read
#tensor c 3 read_write
#tensor bias 4 read

struct Params {
    m: u32,
    n: u32,
    k: u32,
    flags: u32, // FLAG_ACCUMULATE | FLAG_BIAS | FLAG_PAIRS | rounding << ROUND_SHIFT
    // Layouts (elements): offset and row stride of a, b and c.
    a_off: u32,
    a_ld: u32,
    b_off: u32,
    b_ld: u32,
    c_off: u32,
    c_ld: u32,
    // Batch: z = (z0, z1), flat zf = z0 * batch_inner + z1, zf < batches. The grid's z
    // dimension walks zf; past 65535 batches the rest folds into y (y = m tile + m_tiles * hi).
    batch_inner: u32,
    batches: u32,
    m_tiles: u32,
    a_s0: u32,
    a_s1: u32,
    b_s0: u32,
    b_s1: u32,
    c_s0: u32,
    c_s1: u32,
    lanes: u32, // matmul_direct_narrow: threads per row group (a power of two <= THREADS)
}
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
// batch (a whole workgroup, so returning is uniform).
fn start_batch(wid: vec3<u32>, nwg: vec3<u32>) -> bool {
    let zf = wid.z + (wid.y / params.m_tiles) * nwg.z;
    if (zf >= params.batches) {
        return false;
    }
    let z0 = zf / params.batch_inner;
    let z1 = zf % params.batch_inner;
    a_base = params.a_off + z0 * params.a_s0 + z1 * params.a_s1;
    b_base = params.b_off + z0 * params.b_s0 + z1 * params.b_s1;
    c_base = params.c_off + z0 * params.c_s0 + z1 * params.c_s1;
    return true;
}

const BM: u32 = WG_Y * TM;
const BN: u32 = WG_X * TN;
const THREADS: u32 = WG_X * WG_Y;

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

// ---- tiled kernel (GPUs) ----------------------------------------------------------------
// Element e = kk * BM + i of tile_a is op(a)[row0 + i, k0 + kk]; element kk * BN + j of tile_b
// is op(b)[k0 + kk, col0 + j]. Stored as vec4 so the inner loop reads four rows or columns
// per shared-memory access.
var<workgroup> tile_a: array<vec4<f32>, BK * BM / 4u>;
var<workgroup> tile_b: array<vec4<f32>, BK * BN / 4u>;

// This thread's outputs: TM / 4 groups of 4 consecutive rows, group g at
// g * 4 * WG_Y + 4 * lid.y, and likewise TN / 4 groups of 4 consecutive columns. Neighbouring
// threads read neighbouring vec4s (no bank conflicts), and a thread owns whole column pairs.
fn tile_row(lid_y: u32, i: u32) -> u32 {
    return (i / 4u) * 4u * WG_Y + 4u * lid_y + (i % 4u);
}
fn tile_col(lid_x: u32, j: u32) -> u32 {
    return (j / 4u) * 4u * WG_X + 4u * lid_x + (j % 4u);
}

@compute @workgroup_size(WG_X, WG_Y)
fn matmul_tiled(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    if (!start_batch(wid, nwg)) {
        return;
    }
    let m = params.m;
    let n = params.n;
    let k = params.k;
    let row0 = (wid.y % params.m_tiles) * BM;
    let col0 = wid.x * BN;
    let a_ks = a_k_stride();
    let b_ks = b_k_stride();

    // acc[i * TN / 4 + jg] holds row tile_row(i), columns tile_col(4 * jg .. 4 * jg + 4).
    var acc: array<vec4<f32>, TM * TN / 4u>;
    var frag_a: array<vec4<f32>, TM / 4u>;
    var frag_b: array<vec4<f32>, TN / 4u>;

    for (var k0 = 0u; k0 < k; k0 += BK) {
        // Stage the tiles; consecutive threads walk the contiguous dimension of each input,
        // so global reads coalesce. Out-of-range elements are zero.
        for (var s = 0u; s < BM * BK / THREADS; s++) {
            let l = tid + s * THREADS;
            var i: u32;
            var kk: u32;
            if (TRANS_A) { i = l % BM; kk = l / BM; } else { kk = l % BK; i = l / BK; }
            let row = row0 + i;
            let kg = k0 + kk;
            var v = 0.0;
            if (row < m && kg < k) {
                v = a_load(a_row_base(row) + kg * a_ks);
            }
            let e = kk * BM + i;
            tile_a[e / 4u][e % 4u] = v;
        }
        for (var s = 0u; s < BN * BK / THREADS; s++) {
            let l = tid + s * THREADS;
            var j: u32;
            var kk: u32;
            if (TRANS_B) { kk = l % BK; j = l / BK; } else { j = l % BN; kk = l / BN; }
            let col = col0 + j;
            let kg = k0 + kk;
            var v = 0.0;
            if (col < n && kg < k) {
                v = b_load(b_col_base(col) + kg * b_ks);
            }
            let e = kk * BN + j;
            tile_b[e / 4u][e % 4u] = v;
        }
        workgroupBarrier();

        for (var kk = 0u; kk < BK; kk++) {
            for (var g = 0u; g < TM / 4u; g++) {
                frag_a[g] = tile_a[(kk * BM + tile_row(lid.y, 4u * g)) / 4u];
            }
            for (var g = 0u; g < TN / 4u; g++) {
                frag_b[g] = tile_b[(kk * BN + tile_col(lid.x, 4u * g)) / 4u];
            }
            for (var i = 0u; i < TM; i++) {
                let av = vec4<f32>(frag_a[i / 4u][i % 4u]);
                for (var g = 0u; g < TN / 4u; g++) {
                    acc[i * (TN / 4u) + g] = fma(av, frag_b[g], acc[i * (TN / 4u) + g]);
                }
            }
        }
        workgroupBarrier();
    }

    for (var i = 0u; i < TM; i++) {
        let row = row0 + tile_row(lid.y, i);
        for (var g = 0u; g < TN / 4u; g++) {
            let col = col0 + tile_col(lid.x, 4u * g);
            let v = acc[i * (TN / 4u) + g];
            store_pair(row, col, v.xy);
            store_pair(row, col + 2u, v.zw);
        }
    }
}

// ---- direct kernel (CPU adapters) -------------------------------------------------------
// One row of WG_X threads per workgroup (WG_Y = 1). The workgroup owns rows row0 .. row0 + TM,
// so every read of a is the same for all its threads: CPU drivers turn it into one scalar
// load broadcast across SIMD lanes, and only the reads of b are per-lane gathers. Each thread
// owns TN / 2 column pairs, interleaved with its neighbours' so a SIMD group's gathers of b
// hit consecutive addresses. Indices are clamped into the matrix, so the inner loop has no
// bounds checks; the epilogue drops the clamped duplicates.
@compute @workgroup_size(WG_X, WG_Y)
fn matmul_direct(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lane: u32,
) {
    if (!start_batch(wid, nwg)) {
        return;
    }
    direct_block((wid.y % params.m_tiles) * BM, wid.x * BN + 2u * lane, THREADS);
}

// The direct kernel for narrow products (N at most half a workgroup's BN columns, such as
// attention's head-sized products): the workgroup's threads split into THREADS / lanes row
// groups of `params.lanes` threads (a power of two), each owning TM rows and lanes * TN
// columns, so few threads hold clamped duplicates. Reads of a are uniform within a row group
// only. Every output is the same chain of FMAs as in matmul_direct, so the bits are too.
@compute @workgroup_size(WG_X, WG_Y)
fn matmul_direct_narrow(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lane: u32,
) {
    if (!start_batch(wid, nwg)) {
        return;
    }
    let lanes = params.lanes;
    let group = lane / lanes;
    let row0 = (wid.y % params.m_tiles) * TM * (THREADS / lanes) + group * TM;
    direct_block(row0, wid.x * lanes * TN + 2u * (lane % lanes), lanes);
}

// One thread's TM x TN block of the direct kernels: rows row0 .. row0 + TM, column pairs
// (col0 + p * 2 * stride, + 1) for p < TN / 2.
fn direct_block(row0: u32, col0: u32, stride: u32) {
    let m = params.m;
    let n = params.n;
    let k = params.k;
    let a_ks = a_k_stride();
    let b_ks = b_k_stride();
    var a_idx: array<u32, TM>;
    var b_idx: array<u32, TN>;
    for (var i = 0u; i < TM; i++) {
        a_idx[i] = a_row_base(min(row0 + i, m - 1u));
    }
    for (var j = 0u; j < TN; j++) {
        b_idx[j] = b_col_base(min(col0 + (j / 2u) * 2u * stride + (j & 1u), n - 1u));
    }

    var acc: array<f32, TM * TN>;
    var frag_a: array<f32, TM>;
    var frag_b: array<f32, TN>;
    for (var kk = 0u; kk < k; kk++) {
        for (var i = 0u; i < TM; i++) {
            frag_a[i] = a_load(a_idx[i] + kk * a_ks);
        }
        for (var j = 0u; j < TN; j++) {
            frag_b[j] = b_load(b_idx[j] + kk * b_ks);
        }
        for (var i = 0u; i < TM; i++) {
            for (var j = 0u; j < TN; j++) {
                acc[i * TN + j] = fma(frag_a[i], frag_b[j], acc[i * TN + j]);
            }
        }
    }

    for (var i = 0u; i < TM; i++) {
        for (var p = 0u; p < TN / 2u; p++) {
            let col = col0 + p * 2u * stride;
            store_pair(row0 + i, col, vec2<f32>(acc[i * TN + 2u * p], acc[i * TN + 2u * p + 1u]));
        }
    }
}
