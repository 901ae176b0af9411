// Matrix multiply: c[M,N] (+)= op(a) · op(b) (+ bias[N] broadcast over rows), accumulated in
// f32 whatever the storages. op(a) is a [M,K] or aᵀ of a [K,M] (TRANS_A); op(b) is b [K,N]
// or bᵀ of b [N,K] (TRANS_B).
//
// Strided batches: each matrix lives at `off + z0 * s0 + z1 * s1` in its tensor with row
// stride `ld` (the stored matrix's row stride: [K,M] for TRANS_A, [N,K] for TRANS_B), for
// z = (z0, z1) over the batch. A plain matmul is one batch of contiguous matrices (off 0,
// ld = stored columns), and the arithmetic is the same either way: only index math differs.
//
// Constants injected by src/ops/matmul/ (one pipeline per combination):
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

#include matmul_common

const BM: u32 = WG_Y * TM;
const BN: u32 = WG_X * TN;
const THREADS: u32 = WG_X * WG_Y;

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
    let row0 = (wid.y % params.m_tiles) * BM;
    let col0 = wid.x * BN;

    // acc[i * TN / 4 + jg] holds row tile_row(i), columns tile_col(4 * jg .. 4 * jg + 4).
    var acc: array<vec4<f32>, TM * TN / 4u>;
    var frag_a: array<vec4<f32>, TM / 4u>;
    var frag_b: array<vec4<f32>, TN / 4u>;

    for (var k0 = 0u; k0 < params.k; k0 += BK) {
        // Stage the tiles (include/matmul_common.wgsl): element (i, kk) of op(a)'s tile at
        // kk * BM + i, element (kk, j) of op(b)'s at kk * BN + j.
        for (var s = 0u; s < BM * BK / THREADS; s++) {
            let t = a_tile_element(tid, s, row0, k0);
            let e = t.col * BM + t.row;
            tile_a[e / 4u][e % 4u] = t.value;
        }
        for (var s = 0u; s < BN * BK / THREADS; s++) {
            let t = b_tile_element(tid, s, col0, k0);
            let e = t.row * BN + t.col;
            tile_b[e / 4u][e % 4u] = t.value;
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
