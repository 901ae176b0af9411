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
//   BK: u32                  depth of a k slice (matmul_tiled only)
//   ALIGNED: bool            matmul_tiled's interior variant (below)
//   A_ROWS, A_COLS, B_ROWS, B_COLS, LOADS_A, LOADS_B, TM4, TN4: the staged slices' shapes
//                            and each thread's share of them, computed by the dispatcher
//   the epilogue's EPI_* and SPLIT_OUT (include/matmul_common.wgsl)
//
// Four entry points:
// - matmul_tiled: workgroup tiles of (WG_Y*TM) x (WG_X*TN), each thread accumulating a TM x TN
//   register block (named vec4 accumulators, written out per variant). Each k slice of a and
//   b is staged in chunks of 8 consecutive elements of the stored matrix (16-byte vector
//   loads: two vec4<f32>, or one of eight 16-bit values), double-buffered through
//   workgroup memory with a register prefetch: one barrier per k slice. For real GPUs; the
//   register blocking comes from the adapter's kernel table (gpu::kernel_table).
//   ALIGNED (interior) variant: M, N and K (or the split's K) are whole tiles and the row
//   starts of a and b are multiples of 8 elements, so chunks are vector loads with no bounds
//   test. Range invariant: row0 + BM <= M, col0 + BN <= N, k0 + BK <= k_end <= K. The
//   checked variant tests every element and reads zero outside the matrices.
// - matmul_direct: the same register blocking read straight from the buffers, no workgroup
//   memory and no barriers. For CPU adapters (lavapipe, llvmpipe), where a barrier is a
//   context switch between invocations and the caches already do the tiling.
// - matmul_direct_narrow: matmul_direct for products at most half a workgroup's columns
//   wide, the threads split into row groups (params.lanes threads each).
// - matmul_split_reduce: split-K's second kernel, the splits' partial sums added in order
//   through the epilogue.

#tensor a 1 read vec4_if ALIGNED
#tensor b 2 read vec4_if ALIGNED
#tensor c 3 read_write
#tensor bias 4 read

#include matmul_common

const BM: u32 = WG_Y * TM;
const BN: u32 = WG_X * TN;
const THREADS: u32 = WG_X * WG_Y;

// ---- tiled kernel (GPUs) ----------------------------------------------------------------
// Element (kk, i) of op(a)'s slice at vec4 kk * BM / 4 + i / 4 of tile_a (component i % 4),
// element (kk, j) of op(b)'s at kk * BN / 4 + j / 4 of tile_b; two buffers each.
// (A_ROW, B_ROW: the vec4s of one staged k row.)
const A_ROW: u32 = BM / 4u;
const B_ROW: u32 = BN / 4u;
const A_SLICE: u32 = BK * A_ROW;
const B_SLICE: u32 = BK * B_ROW;
var<workgroup> tile_a: array<vec4<f32>, 2u * A_SLICE>;
var<workgroup> tile_b: array<vec4<f32>, 2u * B_SLICE>;

// Staged slices in the stored orientation: chunk c is staged row c / CPR, columns
// (c % CPR) * 8 .. + 8 (A_KROWS: a's staged rows are k, as a transposed a is stored).
const A_KROWS: bool = TRANS_A;
const B_KROWS: bool = !TRANS_B;
const A_CPR: u32 = A_COLS / 8u;
const B_CPR: u32 = B_COLS / 8u;
const CHUNKS_A: u32 = A_ROWS * A_CPR;
const CHUNKS_B: u32 = B_ROWS * B_CPR;

// Eight consecutive elements of a stored matrix, as f32.
struct Chunk {
    lo: vec4<f32>,
    hi: vec4<f32>,
}

// The outer extents of op(a) (its rows, M) and op(b) (its columns, N).
fn outer_a() -> u32 {
    return params.m;
}
fn outer_b() -> u32 {
    return params.n;
}

#for side in a b
// Element (row, col) of the stored {side}, zero outside rows x cols (checked variant).
fn {side}_at(row: u32, col: u32, rows: u32, cols: u32) -> f32 {
    if (row >= rows || col >= cols) { return 0.0; }
    return {side}_load({side}_base + row * params.{side}_ld + col);
}

// Chunk s of thread tid of op({side})'s slice at k0 (outer0: the tile's first row of op(a) or
// column of op(b)): eight consecutive elements of a stored row, along k, or along the outer
// extent where the stored rows are k ({SIDE}_KROWS: a transposed a, a plain b).
fn load_{side}(tid: u32, s: u32, outer0: u32, k0: u32) -> Chunk {
    let c = tid + s * THREADS;
    if (CHUNKS_{SIDE} % THREADS != 0u && c >= CHUNKS_{SIDE}) { return Chunk(); }
    var row = outer0 + c / {SIDE}_CPR;
    var col = k0 + (c % {SIDE}_CPR) * 8u;
    var rows = outer_{side}();
    var cols = k_end;
    if ({SIDE}_KROWS) {
        row = k0 + c / {SIDE}_CPR;
        col = outer0 + (c % {SIDE}_CPR) * 8u;
        rows = k_end;
        cols = outer_{side}();
    }
#if ALIGNED
    let v = {side}_x8(({side}_base + row * params.{side}_ld + col) >> 3u);
    return Chunk(v[0], v[1]);
#else
    return Chunk(
        vec4<f32>({side}_at(row, col, rows, cols), {side}_at(row, col + 1u, rows, cols), {side}_at(row, col + 2u, rows, cols), {side}_at(row, col + 3u, rows, cols)),
        vec4<f32>({side}_at(row, col + 4u, rows, cols), {side}_at(row, col + 5u, rows, cols), {side}_at(row, col + 6u, rows, cols), {side}_at(row, col + 7u, rows, cols)),
    );
#end
}
#end

#for side in a b
// Element (kk, i) of a slice into buffer `base` of operand {side}'s tile.
fn put_{side}1(base: u32, kk: u32, i: u32, v: f32) { tile_{side}[base + kk * {SIDE}_ROW + i / 4u][i % 4u] = v; }

// Chunk s of thread tid into buffer `buf`: whole vec4s where the staged rows are k, else
// eight elements down a column of the tile.
fn put_{side}(buf: u32, tid: u32, s: u32, v: Chunk) {
    let c = tid + s * THREADS;
    if (CHUNKS_{SIDE} % THREADS != 0u && c >= CHUNKS_{SIDE}) { return; }
    let r = c / {SIDE}_CPR;
    let col = (c % {SIDE}_CPR) * 8u;
    let base = buf * {SIDE}_SLICE;
    if ({SIDE}_KROWS) {
        tile_{side}[base + r * {SIDE}_ROW + col / 4u] = v.lo;
        tile_{side}[base + r * {SIDE}_ROW + col / 4u + 1u] = v.hi;
    } else {
#for e in 0..4
        put_{side}1(base, col + {e}u, r, v.lo[{e}]);
        put_{side}1(base, col + {e}u + 4u, r, v.hi[{e}]);
#end
    }
}
#end

// This thread's outputs: TM / 4 groups of 4 consecutive rows, group g at
// g * 4 * WG_Y + 4 * lid.y, and likewise TN / 4 groups of 4 consecutive columns. Neighbouring
// threads read neighbouring vec4s (no bank conflicts), and a thread owns whole column pairs.
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
    // Uniform bounds for the loop that holds the barriers (not the private k_end).
    let k = k_range(wid);

    // acc_{h}_{r}_{g}: row 4h + r of this thread's block, columns 4g .. 4g + 4.
#for h in 0..TM4
#for r in 0..4
#for g in 0..TN4
    var acc_{h}_{r}_{g} = vec4<f32>();
#end
#end
#end
#for s in 0..LOADS_A
    var pa_{s} = Chunk();
#end
#for s in 0..LOADS_B
    var pb_{s} = Chunk();
#end
    var steps = 0u;
    if (k.y > k.x) {
        steps = (k.y - k.x + BK - 1u) / BK;
#for s in 0..LOADS_A
        put_a(0u, tid, {s}u, load_a(tid, {s}u, row0, k.x));
#end
#for s in 0..LOADS_B
        put_b(0u, tid, {s}u, load_b(tid, {s}u, col0, k.x));
#end
    }
    workgroupBarrier();
    for (var t = 0u; t < steps; t++) {
        let cur = t & 1u;
        let more = t + 1u < steps;
        if (more) {
            // Prefetch the next slice: its loads are in flight while this one multiplies.
            let k_next = k.x + (t + 1u) * BK;
#for s in 0..LOADS_A
            pa_{s} = load_a(tid, {s}u, row0, k_next);
#end
#for s in 0..LOADS_B
            pb_{s} = load_b(tid, {s}u, col0, k_next);
#end
        }
        let a0 = cur * A_SLICE + lid.y;
        let b0 = cur * B_SLICE + lid.x;
        // Written out per k step (not a loop): a WGSL loop gets wgpu's loop bounding in the
        // checked variant, which keeps the compiler from unrolling it.
#for kk in 0..BK
        {
#for g in 0..TM4
            let fa_{g} = tile_a[a0 + {kk}u * (BM / 4u) + {g}u * WG_Y];
#end
#for g in 0..TN4
            let fb_{g} = tile_b[b0 + {kk}u * (BN / 4u) + {g}u * WG_X];
#end
#for h in 0..TM4
#for r in 0..4
#for g in 0..TN4
            acc_{h}_{r}_{g} = fma(vec4<f32>(fa_{h}[{r}]), fb_{g}, acc_{h}_{r}_{g});
#end
#end
#end
        }
#end
        if (more) {
            // The other buffer was last read before the previous barrier: free to write.
#for s in 0..LOADS_A
            put_a(1u - cur, tid, {s}u, pa_{s});
#end
#for s in 0..LOADS_B
            put_b(1u - cur, tid, {s}u, pb_{s});
#end
        }
        workgroupBarrier();
    }

#for h in 0..TM4
#for r in 0..4
#for g in 0..TN4
    {
        let row = row0 + {h}u * 4u * WG_Y + 4u * lid.y + {r}u;
        let col = col0 + {g}u * 4u * WG_X + 4u * lid.x;
        store_result(row, col, acc_{h}_{r}_{g}.xy);
        store_result(row, col + 2u, acc_{h}_{r}_{g}.zw);
    }
#end
#end
#end
}

// ---- direct kernel (CPU adapters) -------------------------------------------------------
// One row of WG_X threads per workgroup (WG_Y = 1). The workgroup owns rows row0 .. row0 + TM,
// so every read of a is the same for all its threads: CPU drivers turn it into one scalar
// load broadcast across SIMD lanes, and only the reads of b are per-lane gathers. Each thread
// owns TN / 2 column pairs, interleaved with its neighbours' so a SIMD group's gathers of b
// hit consecutive addresses. Indices are clamped into the matrix, so the inner loop has no
// bounds checks; the epilogue drops the clamped duplicates.
@compute @workgroup_size(WG_X, WG_Y)
fn matmul_direct(#workgroup_builtins) {
    if (!start_batch(wid, nwg)) {
        return;
    }
    direct_block((wid.y % params.m_tiles) * BM, wid.x * BN + 2u * lid, THREADS);
}

// The direct kernel for narrow products (N at most half a workgroup's BN columns, such as
// attention's head-sized products): the workgroup's threads split into THREADS / lanes row
// groups of `params.lanes` threads (a power of two), each owning TM rows and lanes * TN
// columns, so few threads hold clamped duplicates. Reads of a are uniform within a row group
// only. Every output is the same chain of FMAs as in matmul_direct, so the bits are too.
@compute @workgroup_size(WG_X, WG_Y)
fn matmul_direct_narrow(#workgroup_builtins) {
    if (!start_batch(wid, nwg)) {
        return;
    }
    let lanes = params.lanes;
    let group = lid / lanes;
    let row0 = (wid.y % params.m_tiles) * TM * (THREADS / lanes) + group * TM;
    direct_block(row0, wid.x * lanes * TN + 2u * (lid % lanes), lanes);
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
            store_result(row0 + i, col, vec2<f32>(acc[i * TN + 2u * p], acc[i * TN + 2u * p + 1u]));
        }
    }
}

// ---- split-K: c (+)= the splits' partial sums, added in split order ----------------------
// One thread per column pair of the one matrix; the same epilogue as every body.
@compute @workgroup_size(64)
fn matmul_split_reduce(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let pairs = (params.n + 1u) / 2u;
    let p = thread_index(gid, nwg, 64u);
    if (p >= params.m * pairs) {
        return;
    }
    let row = p / pairs;
    let col = 2u * (p % pairs);
    c_base = params.c_off;
    var sum = vec2<f32>(0.0);
    for (var s = 0u; s < params.splits; s++) {
        let idx = (s * params.m + row) * params.n + col;
        sum.x += partials_load(idx);
        if (col + 1u < params.n) {
            sum.y += partials_load(idx + 1u);
        }
    }
    store_pair(row, col, sum);
}
