// 2-D convolution on cooperative matrices (tensor cores): the implicit GEMMs of
// shaders/conv.wgsl for native f16 inputs, on the tile loop of shaders/include/coop_gemm.wgsl,
// with the gathers and epilogues of shaders/include/conv_gemm.wgsl. Each GEMM is laid out so
// its columns are the dimension contiguous in the output (the epilogue stores pairs along
// columns):
//
//   KIND  GEMM             rows (A)              columns (B)              depth
//   0     forward          out channels (w)      output pixels (x gather) (c, ky, kx)
//   1     input gradient   in channels (w)       input pixels (dy gather) (o, ky, kx)
//   2     weight gradient  out channels (dy)     taps (c, ky, kx) (x)     the batch's pixels
//
// The weight gradient's depth is split as in conv.wgsl (workgroup z = row tile + row tiles ×
// split): with several splits each writes its partial sums and conv.wgsl's conv_weight_reduce
// adds them in split order (no atomics: the same bits every run). Column tiles fold into the
// grid's x and y (`params.row_tiles` counts them, `params.col_tiles` the row tiles).
//
// Constants injected by src/ops/conv: KIND, KH, KW, and the tile loop's SUBGROUP, FRAG, FM,
// FN and fragment types.

enable wgpu_cooperative_matrix;

#include conv_gemm
#include tile_staging
#include coop_gemm

const WEIGHT_GRAD: u32 = 2u;

// The weight gradient's split (set once per workgroup).
var<private> split_id: u32;

fn coop_a(row: u32, k: u32) -> f32 {
    if (KIND == WEIGHT_GRAD) {
        return dy_at(out_pixel(k, params.depth), row);
    }
    return weight(KIND, row, k);
}

fn coop_b(k: u32, col: u32) -> f32 {
    if (KIND == WEIGHT_GRAD) {
        return x_tap(out_pixel(k, params.depth), col);
    }
    return gather(KIND, pixel_row(KIND, col), k);
}

// Staging (include/tile_staging.wgsl): A is read along its depth (weights and dy rows); B
// along its pixels, except the weight gradient's x, whose neighbouring depth steps are
// neighbouring pixels.
fn coop_a_element(tid: u32, s: u32, row0: u32, k0: u32, k_end: u32) -> TileElement {
    let p = tile_position(tid + s * THREADS, BM, true);
    var v = 0.0;
    if (row0 + p.x < params.rows && k0 + p.y < k_end) {
        v = coop_a(row0 + p.x, k0 + p.y);
    }
    return TileElement(p.x, p.y, v);
}

fn coop_b_element(tid: u32, s: u32, col0: u32, k0: u32, k_end: u32) -> TileElement {
    let p = tile_position(tid + s * THREADS, BN, KIND == WEIGHT_GRAD);
    var v = 0.0;
    if (col0 + p.x < params.cols && k0 + p.y < k_end) {
        v = coop_b(k0 + p.y, col0 + p.x);
    }
    return TileElement(p.y, p.x, v);
}

fn coop_store(row: u32, col: u32, v: vec2<f32>) {
    if (KIND == WEIGHT_GRAD) {
        store_weight_pair(row, col, v, split_id);
        return;
    }
    if (row >= params.rows) { return; }
    var plane = params.in_h * params.in_w;
    if (KIND == FORWARD) {
        plane = params.out_h * params.out_w;
    }
    store_pixel_pair(col, row, v, params.cols, params.rows, plane);
}

@compute @workgroup_size(THREADS)
fn conv_coop(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
    @builtin(subgroup_id) sg: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    let col_tile = workgroup_index(wid, nwg);
    if (col_tile >= params.row_tiles) { return; }
    let split = wid.z / params.col_tiles;
    let row_tile = wid.z - split * params.col_tiles;
    split_id = split;
    let k_begin = split * params.split_len;
    let k_end = min(params.depth, k_begin + params.split_len);
    coop_gemm(tid, sg, lane, row_tile * BM, col_tile * BN, k_begin, k_end);
}
