// Matrix multiply on cooperative matrices (tensor cores): the same product, layouts, batches
// and epilogue as shaders/matmul.wgsl, for f16 inputs on adapters that expose a 16x16x16
// f16 x f16 -> f32 configuration (wgpu's EXPERIMENTAL_COOPERATIVE_MATRIX; Vulkan
// VK_KHR_cooperative_matrix). src/ops/matmul picks it per adapter; bf16 has no cooperative
// type in naga 30 and stays on the SIMT bodies.
//
// A workgroup of 4 subgroups owns a BM x BN = 64 x 64 tile of c. Each k slice of BK = 32 is
// staged through workgroup memory as f16 (exact: the inputs are f16), zero outside the
// matrices, so every cooperative load is a whole 16 x 16 tile and the subgroups stay in
// uniform control flow. Subgroup s owns the 32 x 32 quadrant (s / 2, s % 2): 2 x 2
// accumulators of 16 x 16 in f32. At the end the accumulators go through workgroup memory
// once more, and every thread stores its column pairs with store_pair, the epilogue the SIMT
// bodies use (bias, accumulate, rounding, f16 stores with round-to-nearest-even and overflow
// to inf).
//
// naga 30.0.1 notes: only square 8x8 and 16x16 shapes exist; a cooperative store takes its
// matrix and pointer from `let`s computed before the call (the store statement is pushed
// before pending expressions are emitted, which can leave its pointer unemitted for the
// SPIR-V writer).
//
// Constants injected by src/ops/matmul: TRANS_A, TRANS_B (bool) and SUBGROUP (u32, the
// adapter's fixed subgroup size: a workgroup is exactly 4 subgroups).

enable wgpu_cooperative_matrix;

#tensor a 1 read
#tensor b 2 read
#tensor c 3 read_write
#tensor bias 4 read

#include matmul_common

const BM: u32 = 64u;
const BN: u32 = 64u;
const BK: u32 = 32u;
const THREADS: u32 = 4u * SUBGROUP;

// Row-major [BM][BK] of op(a), [BK][BN] of op(b), and [BM][BN] of the f32 results.
var<workgroup> tile_a: array<f16, BM * BK>;
var<workgroup> tile_b: array<f16, BK * BN>;
var<workgroup> tile_c: array<f32, BM * BN>;

// Stage op(a)[row0 .., k0 ..] and op(b)[k0 .., col0 ..]; consecutive threads walk the
// contiguous dimension of each input so global reads coalesce.
fn stage(tid: u32, row0: u32, col0: u32, k0: u32) {
    let m = params.m;
    let n = params.n;
    let k = params.k;
    for (var s = 0u; s < BM * BK / THREADS; s++) {
        let l = tid + s * THREADS;
        var i: u32;
        var kk: u32;
        if (TRANS_A) { i = l % BM; kk = l / BM; } else { kk = l % BK; i = l / BK; }
        let row = row0 + i;
        let kg = k0 + kk;
        var v = 0.0;
        if (row < m && kg < k) {
            v = a_load(a_row_base(row) + kg * a_k_stride());
        }
        tile_a[i * BK + kk] = f16(v);
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
            v = b_load(b_col_base(col) + kg * b_k_stride());
        }
        tile_b[kk * BN + j] = f16(v);
    }
}

@compute @workgroup_size(THREADS)
fn matmul_coop(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
    @builtin(subgroup_id) sg: u32,
) {
    if (!start_batch(wid, nwg)) {
        return;
    }
    let row0 = (wid.y % params.m_tiles) * BM;
    let col0 = wid.x * BN;
    let qr = (sg / 2u) * 32u;
    let qc = (sg % 2u) * 32u;

    var acc00 = coop_mat16x16<f32, C>();
    var acc01 = coop_mat16x16<f32, C>();
    var acc10 = coop_mat16x16<f32, C>();
    var acc11 = coop_mat16x16<f32, C>();
    for (var k0 = 0u; k0 < params.k; k0 += BK) {
        stage(tid, row0, col0, k0);
        workgroupBarrier();
        for (var kk = 0u; kk < BK; kk += 16u) {
            let ia0 = qr * BK + kk;
            let ia1 = (qr + 16u) * BK + kk;
            let ib0 = kk * BN + qc;
            let ib1 = kk * BN + qc + 16u;
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&tile_a[ia0], BK);
            let a1 = coopLoadT<coop_mat16x16<f16, A>>(&tile_a[ia1], BK);
            let b0 = coopLoadT<coop_mat16x16<f16, B>>(&tile_b[ib0], BN);
            let b1 = coopLoadT<coop_mat16x16<f16, B>>(&tile_b[ib1], BN);
            acc00 = coopMultiplyAdd(a0, b0, acc00);
            acc01 = coopMultiplyAdd(a0, b1, acc01);
            acc10 = coopMultiplyAdd(a1, b0, acc10);
            acc11 = coopMultiplyAdd(a1, b1, acc11);
        }
        workgroupBarrier();
    }

    // Results through workgroup memory, then the shared epilogue per column pair.
    let i00 = qr * BN + qc;
    let i01 = qr * BN + qc + 16u;
    let i10 = (qr + 16u) * BN + qc;
    let i11 = (qr + 16u) * BN + qc + 16u;
    let r00 = acc00;
    let r01 = acc01;
    let r10 = acc10;
    let r11 = acc11;
    let p00 = &tile_c[i00];
    let p01 = &tile_c[i01];
    let p10 = &tile_c[i10];
    let p11 = &tile_c[i11];
    coopStoreT(r00, p00, BN);
    coopStoreT(r01, p01, BN);
    coopStoreT(r10, p10, BN);
    coopStoreT(r11, p11, BN);
    workgroupBarrier();
    for (var s = 0u; s < BM * BN / (2u * THREADS); s++) {
        let p = tid + s * THREADS;
        let i = p / (BN / 2u);
        let j = 2u * (p % (BN / 2u));
        let e = i * BN + j;
        store_pair(row0 + i, col0 + j, vec2<f32>(tile_c[e], tile_c[e + 1u]));
    }
}
