// 2-D convolution (NCHW, PyTorch semantics: cross-correlation, zero padding), forward and
// backward, each an implicit GEMM. No im2col buffer: the tile loaders gather straight from
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

// Forward and input gradient gather from `src` (x, or dy) into `dst` (y, or dx); the weight
// gradient reads x and dy into dw. Without a bias the forward binds w as `bias` (never read),
// and the input gradient does too (the shared epilogue names it).
#tensor src 1 read
#tensor w 2 read
#tensor bias 3 read
#tensor dst 4 read_write
#tensor x 5 read
#tensor dy 6 read
#tensor dw 7 read_write
#tensor partials 8 read_write

#struct Params // src/ops/conv/gemm.rs
@group(0) @binding(0) var<uniform> params: Params;

const KHW: u32 = KH * KW;

const TR: u32 = 8u;             // threads along rows (each owns 4 rows)
const TC: u32 = 4u;             // threads along columns (each owns 8 columns)
const THREADS: u32 = TR * TC;
const TILE_R: u32 = 4u * TR;
const TILE_C: u32 = 8u * TC;
const BK: u32 = 16u;            // depth of one tile step

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

// Flat NCHW index of GEMM row `m` (pixel) in channel `ch` of a [*, chans, plane] tensor.
fn nchw_index(m: u32, ch: u32, chans: u32, plane: u32) -> u32 {
    let img = m / plane;
    return (img * chans + ch) * plane + (m - img * plane);
}

// ---- forward and input gradient: one pixel-row GEMM ---------------------------------------
// Both are a GEMM whose rows are the pixels of an NCHW output `dst` and whose columns are its
// channels: forward gathers x into y (plus bias), the input gradient gathers dy into dx (a
// convolution transpose written as a gather over the taps). They share the tile loop and the
// epilogue; `kind` (a constant at each call) picks the row decode, the gather and the weight
// layout.

const FORWARD: u32 = 0u;
const INPUT_GRAD: u32 = 1u;

// Where one thread's GEMM row (one pixel of dst) reads src. The thread always loads the same
// row into tile_a, so this is decoded once.
struct PixelRow {
    ok: bool,   // the row exists (pixel < rows)
    base: u32,  // forward: first element of the image in x; input gradient: image * out_ch
    y0: i32,    // forward: oy * stride - pad; input gradient: iy + pad
    x0: i32,    // forward: ox * stride - pad; input gradient: ix + pad
}

fn pixel_row(kind: u32, pix: u32) -> PixelRow {
    let ok = pix < params.rows;
    if (kind == FORWARD) {
        let plane_out = params.out_h * params.out_w;
        let img = pix / plane_out;
        let rem = pix - img * plane_out;
        let oy = rem / params.out_w;
        let ox = rem - oy * params.out_w;
        let base = img * params.in_ch * params.in_h * params.in_w;
        return PixelRow(ok, base, i32(oy * params.stride) - i32(params.pad), i32(ox * params.stride) - i32(params.pad));
    }
    let plane_in = params.in_h * params.in_w;
    let img = pix / plane_in;
    let rem = pix - img * plane_in;
    let iy = rem / params.in_w;
    let ix = rem - iy * params.in_w;
    return PixelRow(ok, img * params.out_ch, i32(iy + params.pad), i32(ix + params.pad));
}

// GEMM element (row, k) of src: forward x at tap k = (ci, ky, kx) of the output pixel; input
// gradient dy at the output pixel that reads this input pixel through tap k = (o, ky, kx),
// (iy + pad - ky) / stride when that divides exactly. Zero outside the image.
fn gather(kind: u32, row: PixelRow, k: u32) -> f32 {
    let ch = k / KHW;
    let tap = k - ch * KHW;
    let ky = tap / KW;
    let kx = tap - ky * KW;
    if (kind == FORWARD) {
        let iy = row.y0 + i32(ky);
        let ix = row.x0 + i32(kx);
        if (iy >= 0 && iy < i32(params.in_h) && ix >= 0 && ix < i32(params.in_w)) {
            return src_load(row.base + (ch * params.in_h + u32(iy)) * params.in_w + u32(ix));
        }
        return 0.0;
    }
    let ty = row.y0 - i32(ky);
    let tx = row.x0 - i32(kx);
    if (ty >= 0 && tx >= 0) {
        var oy = u32(ty);
        var ox = u32(tx);
        var hit = true;
        if (params.stride != 1u) {
            hit = oy % params.stride == 0u && ox % params.stride == 0u;
            oy = oy / params.stride;
            ox = ox / params.stride;
        }
        if (hit && oy < params.out_h && ox < params.out_w) {
            return src_load(((row.base + ch) * params.out_h + oy) * params.out_w + ox);
        }
    }
    return 0.0;
}

// GEMM element (k, col) of the weight [O, C, kh, kw]: forward w[col, k] (col = output
// channel, k = (c, ky, kx)); input gradient w[o, col, ky, kx] (col = input channel, k = (o, ky, kx)).
fn weight(kind: u32, col: u32, k: u32) -> f32 {
    if (kind == FORWARD) {
        return w_load(col * params.depth + k);
    }
    let o = k / KHW;
    return w_load((o * params.in_ch + col) * KHW + (k - o * KHW));
}

// Store this thread's 4x8 block into dst (NCHW: rows are pixels of `plane`, columns channels),
// plus bias[channel] when there is one. A pair of neighbouring pixels in one plane is one
// store2 (a whole packed word); otherwise each element is stored alone.
fn store_pixels(row0: u32, col0: u32, lid: u32, plane: u32) {
    let tr = lid % TR;
    let tc = lid / TR;
    for (var j = 0u; j < 8u; j = j + 1u) {
        let ch = col0 + 8u * tc + j;
        if (ch >= params.cols) { break; }
        var v = acc_col(j);
        if (params.has_bias != 0u) { v = v + vec4<f32>(bias_load(ch)); }
        for (var i = 0u; i < 4u; i = i + 2u) {
            let m = row0 + 4u * tr + i;
            if (m >= params.rows) { break; }
            let f0 = nchw_index(m, ch, params.cols, plane);
            let pair = vec2<f32>(v[i], v[i + 1u]);
            if (m + 1u < params.rows) {
                let f1 = nchw_index(m + 1u, ch, params.cols, plane);
                if (f1 == f0 + 1u && (f0 & 1u) == 0u) {
                    dst_store2(f0, pair);
                } else {
                    dst_store(f0, pair.x);
                    dst_store(f1, pair.y);
                }
            } else {
                dst_store(f0, pair.x);
            }
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

    acc0 = vec4<f32>(0.0); acc1 = vec4<f32>(0.0); acc2 = vec4<f32>(0.0); acc3 = vec4<f32>(0.0);
    acc4 = vec4<f32>(0.0); acc5 = vec4<f32>(0.0); acc6 = vec4<f32>(0.0); acc7 = vec4<f32>(0.0);
    for (var k0 = 0u; k0 < depth; k0 = k0 + BK) {
        for (var kk = lid / TILE_R; kk < BK; kk = kk + THREADS / TILE_R) {
            let k = k0 + kk;
            var v = 0.0;
            if (row.ok && k < depth) { v = gather(kind, row, k); }
            put_a(kk, lr, v);
        }
        for (var kk = lid / TILE_C; kk < BK; kk = kk + THREADS / TILE_C) {
            let k = k0 + kk;
            var v = 0.0;
            if (col_ok && k < depth) { v = weight(kind, col, k); }
            put_b(kk, lc, v);
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
fn conv_forward(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    pixel_gemm(FORWARD, wid, nwg, lid);
}

// dx = conv_transpose(dy, w): src = dy, dst = dx (no bias).
@compute @workgroup_size(THREADS)
fn conv_backward_input(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    pixel_gemm(INPUT_GRAD, wid, nwg, lid);
}

// ---- backward weight: dw (+)= sum over pixels of dy * x ------------------------------------

@compute @workgroup_size(THREADS)
fn conv_backward_weight(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row_tile = workgroup_index(wid, nwg);
    if (row_tile >= params.row_tiles) { return; }
    let row0 = row_tile * TILE_R;
    let split = wid.z / params.col_tiles;
    let col0 = (wid.z - split * params.col_tiles) * TILE_C;
    // This workgroup's pixels: [k_begin, depth), at most split_len of them.
    let k_begin = split * params.split_len;
    let depth = min(params.depth, k_begin + params.split_len); // batch * out_h * out_w
    let taps = params.rows;   // in_ch * KH * KW
    let plane_out = params.out_h * params.out_w;
    let x_chw = params.in_ch * params.in_h * params.in_w;

    // Loaders: this thread fills depth slot kk = lid % BK of both tiles; the pixel it stands
    // for is decoded once per step and shared by both loads.
    let kk = lid % BK;

    acc0 = vec4<f32>(0.0); acc1 = vec4<f32>(0.0); acc2 = vec4<f32>(0.0); acc3 = vec4<f32>(0.0);
    acc4 = vec4<f32>(0.0); acc5 = vec4<f32>(0.0); acc6 = vec4<f32>(0.0); acc7 = vec4<f32>(0.0);
    for (var k0 = k_begin; k0 < depth; k0 = k0 + BK) {
        let p = k0 + kk;
        let p_ok = p < depth;
        let img = p / plane_out;
        let rem = p - img * plane_out;
        let oy = rem / params.out_w;
        let ox = rem - oy * params.out_w;
        let iy0 = i32(oy * params.stride) - i32(params.pad);
        let ix0 = i32(ox * params.stride) - i32(params.pad);
        let x_img = img * x_chw;
        for (var r = lid / BK; r < TILE_R; r = r + THREADS / BK) {
            let t = row0 + r;
            var v = 0.0;
            if (p_ok && t < taps) {
                let ci = t / KHW;
                let tap = t - ci * KHW;
                let ky = tap / KW;
                let iy = iy0 + i32(ky);
                let ix = ix0 + i32(tap - ky * KW);
                if (iy >= 0 && iy < i32(params.in_h) && ix >= 0 && ix < i32(params.in_w)) {
                    v = x_load(x_img + (ci * params.in_h + u32(iy)) * params.in_w + u32(ix));
                }
            }
            put_a(kk, r, v);
        }
        let dy_img = img * params.out_ch;
        for (var c = lid / BK; c < TILE_C; c = c + THREADS / BK) {
            let o = col0 + c;
            var v = 0.0;
            if (p_ok && o < params.out_ch) { v = dy_load((dy_img + o) * plane_out + rem); }
            put_b(kk, c, v);
        }
        workgroupBarrier();
        multiply_tiles(lid % TR, lid / TR);
        workgroupBarrier();
    }

    let tr = lid % TR;
    let tc = lid / TR;
    let split_base = split * params.out_ch * taps;
    for (var j = 0u; j < 8u; j = j + 1u) {
        let o = col0 + 8u * tc + j;
        if (o >= params.out_ch) { break; }
        let v = acc_col(j);
        for (var i = 0u; i < 4u; i = i + 2u) {
            let t = row0 + 4u * tr + i;
            if (t >= taps) { break; }
            let f0 = o * taps + t;
            if (params.splits > 1u) {
                partials_store(split_base + f0, v[i]);
                if (t + 1u < taps) { partials_store(split_base + f0 + 1u, v[i + 1u]); }
                continue;
            }
            var pair = vec2<f32>(
                round_grad(v[i], params.round_to),
                round_grad(v[i + 1u], params.round_to),
            );
            if (t + 1u < taps && (f0 & 1u) == 0u) {
                if (params.accumulate != 0u) { pair = pair + dw_load2(f0); }
                dw_store2(f0, pair);
            } else {
                var v0 = pair.x;
                if (params.accumulate != 0u) { v0 = v0 + dw_load(f0); }
                dw_store(f0, v0);
                if (t + 1u < taps) {
                    var v1 = pair.y;
                    if (params.accumulate != 0u) { v1 = v1 + dw_load(f0 + 1u); }
                    dw_store(f0 + 1u, v1);
                }
            }
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
