// 2-D convolution (NCHW, PyTorch semantics: cross-correlation, zero padding), forward and
// backward, each an implicit GEMM (index math and epilogues: shaders/include/conv_gemm.wgsl,
// shared with the tensor-core bodies in shaders/conv_coop.wgsl). No im2col buffer: the tile loaders gather straight from
// the tensors into workgroup memory (converted to f32 once), and each thread accumulates a
// 4x8 block of outputs in registers (f32): on a software GPU the shared-memory reads
// (gathers) are the bottleneck, and 4x8 beat 4x4 by about a quarter in CPU time.
//
//   forward         rows = output pixels (n, oy, ox)   cols = out channels   depth = (c, ky, kx)
//   backward input  rows = input pixels (n, iy, ix)    cols = in channels    depth = (o, ky, kx)
//   backward weight rows = weight taps (c, ky, kx)     cols = out channels   depth = (n, oy, ox)
//
// The weight gradient's depth (every output pixel of the batch) is long and its output small,
// so it is split (split-K): workgroup z = column tile + col_tiles × split walks only its
// split's pixels and, when there are several splits, writes its partial sums to `partials`
// [splits, out_ch, taps]; conv_weight_reduce then adds the splits in order (fixed order, no
// atomics: the same bits every run). With one split the workgroup writes dw directly.
//
// Rows are always the dimension that is contiguous in the output, so a thread owns pairs of
// neighbouring output elements and writes packed words whole (store2); it falls back to the
// per-element store only where a pair straddles two output planes. Every output element is
// written by exactly one thread: no atomics for accumulation. KH and KW are compile-time
// constants (injected), so the tap decodes below divide by constants.

// The tensors and their bindings are declared in conv_gemm, with the helpers that read them.
#include conv_gemm

const TR: u32 = 8u;             // threads along rows (each owns 4 rows)
const TC: u32 = 4u;             // threads along columns (each owns 8 columns)
const THREADS: u32 = TR * TC;
const TILE_R: u32 = 4u * TR;
const TILE_C: u32 = 8u * TC;
const BK: u32 = 16u;            // depth of one tile step
// Each thread loads every depth step of its row of tile_a and column of tile_b, so the taps
// it stands at step one at a time (pixel_gemm).
const_assert THREADS == TILE_R && THREADS == TILE_C;

// tile_a[k][row] and tile_b[k][col], four rows / columns per vec4.
var<workgroup> tile_a: array<vec4<f32>, BK * TILE_R / 4u>;
var<workgroup> tile_b: array<vec4<f32>, BK * TILE_C / 4u>;

// acc_j[i]: this thread's row 4*tr + i, column 8*tc + j.
var<private> acc0: vec4<f32>;
var<private> acc1: vec4<f32>;
var<private> acc2: vec4<f32>;
var<private> acc3: vec4<f32>;
var<private> acc4: vec4<f32>;
var<private> acc5: vec4<f32>;
var<private> acc6: vec4<f32>;
var<private> acc7: vec4<f32>;

fn put_a(k: u32, r: u32, v: f32) { tile_a[k * (TILE_R / 4u) + r / 4u][r % 4u] = v; }
fn put_b(k: u32, c: u32, v: f32) { tile_b[k * (TILE_C / 4u) + c / 4u][c % 4u] = v; }

// acc += tile_a^T tile_b for this thread's 4x8 block.
fn multiply_tiles(tr: u32, tc: u32) {
    for (var k = 0u; k < BK; k = k + 1u) {
        let a = tile_a[k * (TILE_R / 4u) + tr];
        let b = tile_b[k * (TILE_C / 4u) + 2u * tc];
        let c = tile_b[k * (TILE_C / 4u) + 2u * tc + 1u];
        acc0 = acc0 + a * b.x;
        acc1 = acc1 + a * b.y;
        acc2 = acc2 + a * b.z;
        acc3 = acc3 + a * b.w;
        acc4 = acc4 + a * c.x;
        acc5 = acc5 + a * c.y;
        acc6 = acc6 + a * c.z;
        acc7 = acc7 + a * c.w;
    }
}

fn acc_col(j: u32) -> vec4<f32> {
    switch j {
        case 0u: { return acc0; }
        case 1u: { return acc1; }
        case 2u: { return acc2; }
        case 3u: { return acc3; }
        case 4u: { return acc4; }
        case 5u: { return acc5; }
        case 6u: { return acc6; }
        default: { return acc7; }
    }
}

// ---- forward and input gradient: one pixel-row GEMM ---------------------------------------
// Both are a GEMM whose rows are the pixels of an NCHW output `dst` and whose columns are its
// channels (shaders/include/conv_gemm.wgsl has the gathers). They share the tile loop and the
// epilogue; `kind` (a constant at each call) picks the row decode, the gather and the weight
// layout.

// Store this thread's 4x8 block into dst (NCHW: rows are pixels of `plane`, columns channels),
// plus bias[channel] when there is one, a pair of neighbouring pixels at a time.
fn store_pixels(row0: u32, col0: u32, lid: u32, plane: u32) {
    let tr = lid % TR;
    let tc = lid / TR;
    for (var j = 0u; j < 8u; j = j + 1u) {
        let ch = col0 + 8u * tc + j;
        if (ch >= params.cols) { break; }
        let v = acc_col(j);
        for (var i = 0u; i < 4u; i = i + 2u) {
            let m = row0 + 4u * tr + i;
            store_pixel_pair(m, ch, vec2<f32>(v[i], v[i + 1u]), params.rows, params.cols, plane);
        }
    }
}

// The tile loop and epilogue of both kernels.
fn pixel_gemm(kind: u32, wid: vec3<u32>, nwg: vec3<u32>, lid: u32) {
    let row_tile = workgroup_index(wid, nwg);
    if (row_tile >= params.row_tiles) { return; }
    let row0 = row_tile * TILE_R;
    let col0 = wid.z * TILE_C;
    let depth = params.depth;

    // This thread always loads the same pixel row into tile_a and column into tile_b.
    let lr = lid % TILE_R;
    let row = pixel_row(kind, row0 + lr);
    let lc = lid % TILE_C;
    let col = col0 + lc;
    let col_ok = col < params.cols;

    // The taps this thread's loads stand at, decoded once and stepped (every tile step
    // walks its BK depth steps one at a time: THREADS == TILE_R == TILE_C).
    var tap_a = tap_of(lid / TILE_R);
    var tap_b = tap_of(lid / TILE_C);

    acc0 = vec4<f32>(0.0); acc1 = vec4<f32>(0.0); acc2 = vec4<f32>(0.0); acc3 = vec4<f32>(0.0);
    acc4 = vec4<f32>(0.0); acc5 = vec4<f32>(0.0); acc6 = vec4<f32>(0.0); acc7 = vec4<f32>(0.0);
    for (var k0 = 0u; k0 < depth; k0 = k0 + BK) {
        for (var kk = lid / TILE_R; kk < BK; kk = kk + THREADS / TILE_R) {
            let k = k0 + kk;
            var v = 0.0;
            if (row.ok && k < depth) { v = gather_at(kind, row, tap_a); }
            put_a(kk, lr, v);
            tap_a = tap_next(tap_a);
        }
        for (var kk = lid / TILE_C; kk < BK; kk = kk + THREADS / TILE_C) {
            let k = k0 + kk;
            var v = 0.0;
            if (col_ok && k < depth) { v = weight_at(kind, col, k, tap_b); }
            put_b(kk, lc, v);
            tap_b = tap_next(tap_b);
        }
        workgroupBarrier();
        multiply_tiles(lid % TR, lid / TR);
        workgroupBarrier();
    }

    var plane = params.in_h * params.in_w;
    if (kind == FORWARD) {
        plane = params.out_h * params.out_w;
    }
    store_pixels(row0, col0, lid, plane);
}

// y = conv(x, w) + bias: src = x, dst = y.
@compute @workgroup_size(THREADS)
fn conv_forward(#workgroup_builtins) {
    pixel_gemm(FORWARD, wid, nwg, lid);
}

// dx = conv_transpose(dy, w): src = dy, dst = dx (no bias).
@compute @workgroup_size(THREADS)
fn conv_backward_input(#workgroup_builtins) {
    pixel_gemm(INPUT_GRAD, wid, nwg, lid);
}

// ---- backward weight: dw (+)= sum over pixels of dy * x ------------------------------------

@compute @workgroup_size(THREADS)
fn conv_backward_weight(#workgroup_builtins) {
    let row_tile = workgroup_index(wid, nwg);
    if (row_tile >= params.row_tiles) { return; }
    let row0 = row_tile * TILE_R;
    let split = wid.z / params.col_tiles;
    let col0 = (wid.z - split * params.col_tiles) * TILE_C;
    // This workgroup's pixels: [k_begin, depth), at most split_len of them.
    let k_begin = split * params.split_len;
    let depth = min(params.depth, k_begin + params.split_len); // batch * out_h * out_w
    let taps = params.rows;   // in_ch * KH * KW

    // Loaders: this thread fills depth slot kk = lid % BK of both tiles; the pixel it stands
    // for is decoded once per step and shared by both loads.
    let kk = lid % BK;

    // The output pixel this thread's loads stand for, decoded once and walked BK pixels a
    // step (compares and adds: no division in the loop).
    var walk = walk_start(k_begin + kk);

    acc0 = vec4<f32>(0.0); acc1 = vec4<f32>(0.0); acc2 = vec4<f32>(0.0); acc3 = vec4<f32>(0.0);
    acc4 = vec4<f32>(0.0); acc5 = vec4<f32>(0.0); acc6 = vec4<f32>(0.0); acc7 = vec4<f32>(0.0);
    for (var k0 = k_begin; k0 < depth; k0 = k0 + BK) {
        let px = walk_pixel(walk, depth);
        walk = walk_on(walk, BK);
        for (var r = lid / BK; r < TILE_R; r = r + THREADS / BK) {
            let t = row0 + r;
            var v = 0.0;
            if (px.ok && t < taps) { v = x_tap(px, t); }
            put_a(kk, r, v);
        }
        for (var c = lid / BK; c < TILE_C; c = c + THREADS / BK) {
            let o = col0 + c;
            var v = 0.0;
            if (px.ok && o < params.out_ch) { v = dy_at(px, o); }
            put_b(kk, c, v);
        }
        workgroupBarrier();
        multiply_tiles(lid % TR, lid / TR);
        workgroupBarrier();
    }

    let tr = lid % TR;
    let tc = lid / TR;
    for (var j = 0u; j < 8u; j = j + 1u) {
        let v = acc_col(j);
        for (var i = 0u; i < 4u; i = i + 2u) {
            store_weight_pair(col0 + 8u * tc + j, row0 + 4u * tr + i, vec2<f32>(v[i], v[i + 1u]), split);
        }
    }
}

// ---- backward weight, split-K: dw (+)= the splits' partial sums, added in split order -----

@compute @workgroup_size(256)
fn conv_weight_reduce(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    // One thread per pair of dw elements (whole packed words).
    let n = params.out_ch * params.rows;
    let i = 2u * thread_index(gid, nwg, 256u);
    if (i >= n) { return; }
    var sum = vec2<f32>(0.0);
    for (var s = 0u; s < params.splits; s = s + 1u) {
        let base = s * n + i;
        sum.x = sum.x + partials_load(base);
        if (i + 1u < n) { sum.y = sum.y + partials_load(base + 1u); }
    }
    sum = vec2<f32>(round_grad(sum.x, params.round_to), round_grad(sum.y, params.round_to));
    if (i + 1u < n) {
        if (params.accumulate != 0u) { sum = sum + dw_load2(i); }
        dw_store2(i, sum);
    } else {
        if (params.accumulate != 0u) { sum.x = sum.x + dw_load(i); }
        dw_store(i, sum.x);
    }
}
