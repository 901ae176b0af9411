// Matrix multiply on cooperative matrices (tensor cores): the same product, layouts, batches
// and epilogue as shaders/matmul.wgsl, for native f16 inputs on adapters whose tensor cores
// are used (src/gpu/tensor_cores.rs). bf16 has no cooperative type in naga 30 and stays on
// the SIMT bodies.
//
// The tile loop is shaders/include/coop_gemm.wgsl (fragments of 8x8 or 16x16, 2 x 2
// subgroups per workgroup, BM x BN output tiles); this file says how it reads op(a) and
// op(b) and stores through store_pair, the epilogue the SIMT bodies use (bias, accumulate,
// rounding, f16 stores with round-to-nearest-even and overflow to inf).
//
// Constants injected by src/ops/matmul: TRANS_A, TRANS_B (bool), and the tile loop's
// SUBGROUP, FRAG, FM, FN and fragment types.

enable wgpu_cooperative_matrix;

#tensor a 1 read
#tensor b 2 read
#tensor c 3 read_write
#tensor bias 4 read

#include matmul_common
#include coop_gemm

// The tiles are staged as the SIMT body stages them (include/matmul_common.wgsl); the k range
// is always the whole of params.k here.
fn coop_a_element(tid: u32, s: u32, row0: u32, k0: u32, k_end: u32) -> TileElement {
    return a_tile_element(tid, s, row0, k0);
}
fn coop_b_element(tid: u32, s: u32, col0: u32, k0: u32, k_end: u32) -> TileElement {
    return b_tile_element(tid, s, col0, k0);
}
fn coop_store(row: u32, col: u32, v: vec2<f32>) { store_pair(row, col, v); }

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
    coop_gemm(tid, sg, lane, row0, wid.x * BN, 0u, params.k);
}
