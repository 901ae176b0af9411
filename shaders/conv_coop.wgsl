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
// Constants injected by src/ops/conv: KIND, KH, KW, and the tile loop's
// (include/coop_gemm.wgsl), its tile from the adapter's kernel table: 128 wide where both
// sides of the GEMM allow, as the matmul's.

enable wgpu_cooperative_matrix;

#include conv_gemm
#include coop_gemm

const WEIGHT_GRAD: u32 = 2u;

// The weight gradient's split, and the end of this workgroup's depth (set once per
// workgroup).
var<private> split_id: u32;
var<private> gemm_k_end: u32;

// Decoded once, not per element (no division in the tile loop; the taps' divisions are by
// the compile-time kernel size):
// - forward and input gradient: the 8 pixels of B's columns this thread's first staging unit
//   covers (the same columns every step), decoded at the start;
// - weight gradient: the walk to the 8 output pixels of the depth this thread stages, moved
//   on BK pixels a step by compares and adds.
var<private> cached_col: u32;
var<private> cached_rows: array<PixelRow, 8>;
var<private> walk_at: PixelWalk;
var<private> walk_known: bool;

// Four f16 values (exact: the inputs are f16).
fn quad(v0: f32, v1: f32, v2: f32, v3: f32) -> vec4<f16> {
    return vec4<f16>(f16(v0), f16(v1), f16(v2), f16(v3));
}

// The output pixels from p0 on, from the cached walk where it already stands there or one
// slice before.
fn pixels_from(p0: u32) -> PixelWalk {
    if (!walk_known || (walk_at.p != p0 && walk_at.p + BK != p0)) {
        walk_at = walk_start(p0);
        walk_known = true;
    } else if (walk_at.p != p0) {
        walk_at = walk_on(walk_at, BK);
    }
    return walk_at;
}

// Weight gradient: A (dy, rows = out channels) or B (x, rows = taps) at `row`, over the 8
// depth steps (pixels) k .. k + 8.
fn weight_grad_chunk(is_a: bool, row: u32, k: u32) -> Halves {
    var v: array<f32, 8>;
    var w = pixels_from(k);
    let rows = select(params.cols, params.rows, is_a);
    for (var e = 0u; e < 8u; e++) {
        let px = walk_pixel(w, gemm_k_end);
        var x = 0.0;
        if (px.ok && row < rows) {
            if (is_a) {
                x = dy_at(px, row);
            } else {
                x = x_tap(px, row);
            }
        }
        v[e] = x;
        w = walk_on(w, 1u);
    }
    return Halves(quad(v[0], v[1], v[2], v[3]), quad(v[4], v[5], v[6], v[7]));
}

// Chunks (include/coop_gemm.wgsl): A's come along its depth (A_KMAJOR false: weights and dy
// are read along their depth). B's come k-major (B_KMAJOR: 8 pixels of one tap) where its
// columns are pixels (forward, input gradient), else along the depth (the weight gradient's
// x, whose neighbouring depth steps are neighbouring pixels).
// (Nothing of a gather's address is hoisted: the tile loop's `base` is unused here.)
fn coop_base_a(r: u32, c: u32, row0: u32) -> u32 {
    return 0u;
}
fn coop_base_b(r: u32, c: u32, col0: u32) -> u32 {
    return 0u;
}

fn coop_chunk_a(base: u32, i: u32, r: u32, c: u32, row0: u32, k0: u32) -> Halves {
    let row = row0 + r;
    let k = k0 + c;
    if (KIND == WEIGHT_GRAD) {
        return weight_grad_chunk(true, row, k);
    }
    var v: array<f32, 8>;
    var t = tap_of(k);
    for (var e = 0u; e < 8u; e++) {
        var x = 0.0;
        if (row < params.rows && k + e < gemm_k_end) {
            x = weight_at(KIND, row, k + e, t);
        }
        v[e] = x;
        t = tap_next(t);
    }
    return Halves(quad(v[0], v[1], v[2], v[3]), quad(v[4], v[5], v[6], v[7]));
}

fn coop_chunk_b(base: u32, i: u32, r: u32, c: u32, col0: u32, k0: u32) -> Halves {
    if (KIND == WEIGHT_GRAD) {
        return weight_grad_chunk(false, col0 + r, k0 + c);
    }
    let k = k0 + r;
    let col = col0 + c;
    let t = tap_of(k);
    var v: array<f32, 8>;
    for (var e = 0u; e < 8u; e++) {
        var x = 0.0;
        if (col + e < params.cols && k < gemm_k_end) {
            var row: PixelRow;
            if (col == cached_col) {
                row = cached_rows[e];
            } else {
                row = pixel_row(KIND, col + e);
            }
            x = gather_at(KIND, row, t);
        }
        v[e] = x;
    }
    return Halves(quad(v[0], v[1], v[2], v[3]), quad(v[4], v[5], v[6], v[7]));
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
fn conv_coop(inv: Invocation) {
    let wid = inv.wid;
    let col_tile = workgroup_index(wid, inv.nwg);
    if (col_tile >= params.row_tiles) { return; }
    let split = wid.z / params.col_tiles;
    let row_tile = wid.z - split * params.col_tiles;
    split_id = split;
    let k_begin = split * params.split_len;
    let k_end = min(params.depth, k_begin + params.split_len);
    gemm_k_end = k_end;
    walk_known = false;
    cached_col = 0xffffffffu;
    if (KIND != WEIGHT_GRAD) {
        cached_col = col_tile * BN + unit_at(inv.tid, B_KMAJOR).x;
        for (var e = 0u; e < 8u; e++) {
            cached_rows[e] = pixel_row(KIND, cached_col + e);
        }
    }
    coop_gemm(inv, row_tile * BM, col_tile * BN, k_begin, k_end);
}
