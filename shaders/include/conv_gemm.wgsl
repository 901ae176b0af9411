// Shared by the convolution kernels (shaders/conv.wgsl, the SIMT bodies, and
// shaders/conv_coop.wgsl, the cooperative-matrix bodies): the uniform block, the implicit
// GEMM's index math (which element of x, dy or w one GEMM element is) and the epilogues (NCHW
// pixel stores with bias; weight-gradient stores with split-K partial sums, rounding and
// accumulation), and the tensors both bind, declared here once.
//
// The GEMMs, by their dimensions (which one is the row depends on the body):
//   forward         pixels (n, oy, ox)   out channels   depth = (c, ky, kx)
//   backward input  pixels (n, iy, ix)   in channels    depth = (o, ky, kx)
//   backward weight taps (c, ky, kx)     out channels   depth = (n, oy, ox)

// Forward and input gradient gather from `src` (x, or dy) into `dst` (y, or dx); the weight
// gradient reads x and dy into dw (or, split, its partial sums into `partials`). Without a
// bias the forward binds w as `bias` (never read), and the input gradient does too (the
// shared epilogue names it).
#tensor src 1 read
#tensor w 2 read
#tensor bias 3 read
#tensor dst 4 read_write
#tensor x 5 read
#tensor dy 6 read
#tensor dw 7 read_write
#tensor partials 8 read_write

#struct Params // src/ops/conv/gemm.rs: rows, cols and depth are the GEMM's; row_tiles counts
// the tiles the grid folds into x and y (row tiles of the SIMT bodies, column tiles of the
// cooperative ones), col_tiles the other
@group(0) @binding(0) var<uniform> params: Params;

const KHW: u32 = KH * KW;

// Flat NCHW index of GEMM row `m` (pixel) in channel `ch` of a [*, chans, plane] tensor.
fn nchw_index(m: u32, ch: u32, chans: u32, plane: u32) -> u32 {
    let img = m / plane;
    return (img * chans + ch) * plane + (m - img * plane);
}

// ---- forward and input gradient: pixels of dst by its channels ------------------------------
// Forward gathers x into y (plus bias), the input gradient gathers dy into dx (a convolution
// transpose written as a gather over the taps). `kind` (a constant at each call) picks the
// pixel decode, the gather and the weight layout.

const FORWARD: u32 = 0u;
const INPUT_GRAD: u32 = 1u;

// Pixels of dst: the batch's output pixels (forward) or input pixels (input gradient).
fn dst_pixels(kind: u32) -> u32 {
    if (kind == FORWARD) {
        return params.batch * params.out_h * params.out_w;
    }
    return params.batch * params.in_h * params.in_w;
}

// Where one pixel of dst reads src, decoded once per pixel.
struct PixelRow {
    ok: bool,   // the pixel exists
    base: u32,  // forward: first element of the image in x; input gradient: image * out_ch
    y0: i32,    // forward: oy * stride - pad; input gradient: iy + pad
    x0: i32,    // forward: ox * stride - pad; input gradient: ix + pad
}

fn pixel_row(kind: u32, pix: u32) -> PixelRow {
    let ok = pix < dst_pixels(kind);
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

// Depth step k of a pixel GEMM: the channel (input channel forward, output channel for the
// input gradient) and the kernel tap. The divisions are by the compile-time kernel size
// (multiplies and shifts); a chunk of pixels decodes its k once.
struct Tap {
    ch: u32,
    ky: u32,
    kx: u32,
}

fn tap_of(k: u32) -> Tap {
    let ch = k / KHW;
    let tap = k - ch * KHW;
    let ky = tap / KW;
    return Tap(ch, ky, tap - ky * KW);
}

// Element (pixel, tap) of src: forward x at tap (ci, ky, kx) of the output pixel; input
// gradient dy at the output pixel that reads this input pixel through tap (o, ky, kx),
// (iy + pad - ky) / stride when that divides exactly. Zero outside the image.
fn gather_at(kind: u32, row: PixelRow, t: Tap) -> f32 {
    if (kind == FORWARD) {
        let iy = row.y0 + i32(t.ky);
        let ix = row.x0 + i32(t.kx);
        if (iy >= 0 && iy < i32(params.in_h) && ix >= 0 && ix < i32(params.in_w)) {
            return src_load(row.base + (t.ch * params.in_h + u32(iy)) * params.in_w + u32(ix));
        }
        return 0.0;
    }
    let ty = row.y0 - i32(t.ky);
    let tx = row.x0 - i32(t.kx);
    if (ty >= 0 && tx >= 0) {
        var oy = u32(ty);
        var ox = u32(tx);
        var hit = true;
        if (params.stride != 1u) {
            // Strided input gradients only: a uniform branch the presets (stride 1) skip.
            hit = oy % params.stride == 0u && ox % params.stride == 0u;
            oy = oy / params.stride;
            ox = ox / params.stride;
        }
        if (hit && oy < params.out_h && ox < params.out_w) {
            return src_load(((row.base + t.ch) * params.out_h + oy) * params.out_w + ox);
        }
    }
    return 0.0;
}

fn gather(kind: u32, row: PixelRow, k: u32) -> f32 {
    return gather_at(kind, row, tap_of(k));
}

// Element (k, channel) of the weight [O, C, kh, kw]: forward w[ch, k] (ch = output channel,
// k = (c, ky, kx), depth C * KHW); input gradient w[o, ch, ky, kx] (ch = input channel,
// k = (o, ky, kx)).
fn weight_at(kind: u32, ch: u32, k: u32, t: Tap) -> f32 {
    if (kind == FORWARD) {
        return w_load(ch * params.depth + k);
    }
    return w_load((t.ch * params.in_ch + ch) * KHW + t.ky * KW + t.kx);
}

fn weight(kind: u32, ch: u32, k: u32) -> f32 {
    return weight_at(kind, ch, k, tap_of(k));
}

// The tap after `t` (k + 1), by compares: kx, then ky, then the channel carry.
fn tap_next(t: Tap) -> Tap {
    var n = t;
    n.kx += 1u;
    if (n.kx == KW) {
        n.kx = 0u;
        n.ky += 1u;
        if (n.ky == KH) {
            n.ky = 0u;
            n.ch += 1u;
        }
    }
    return n;
}

// Pixels m and m + 1 of channel `ch` of dst (NCHW, `chans` channels of `plane` pixels, `pixels`
// in all), plus bias[ch] when there is one. A pair within one plane that starts a word is one
// store2 (a whole packed word); otherwise each element is stored alone.
fn store_pixel_pair(m: u32, ch: u32, v: vec2<f32>, pixels: u32, chans: u32, plane: u32) {
    if (m >= pixels) { return; }
    var pair = v;
    if (params.has_bias != 0u) { pair = pair + vec2<f32>(bias_load(ch)); }
    let f0 = nchw_index(m, ch, chans, plane);
    if (m + 1u < pixels) {
        let f1 = nchw_index(m + 1u, ch, chans, plane);
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

// ---- backward weight: dw (+)= sum over the batch's output pixels of dy * x ------------------

// One output pixel p of the batch (a step of the weight gradient's depth).
struct OutPixel {
    ok: bool,   // p < the split's end
    rem: u32,   // position in its image's output plane
    x_img: u32, // first element of its image in x
    dy_img: u32, // image * out_ch
    iy0: i32,   // oy * stride - pad
    ix0: i32,   // ox * stride - pad
}

// Where a walk over the batch's output pixels stands: pixel p = (img, oy, ox). Walks step
// with compares and adds only (no division in a hot loop): `walk_start` decodes once.
struct PixelWalk {
    p: u32,
    img: u32,
    oy: u32,
    ox: u32,
}

fn walk_start(p: u32) -> PixelWalk {
    let plane_out = params.out_h * params.out_w;
    let img = p / plane_out;
    let rem = p - img * plane_out;
    let oy = rem / params.out_w;
    return PixelWalk(p, img, oy, rem - oy * params.out_w);
}

// `w` moved on by `steps` pixels (a few rows at most per call: the carries are loops).
fn walk_on(w: PixelWalk, steps: u32) -> PixelWalk {
    var r = w;
    r.p += steps;
    r.ox += steps;
    while (r.ox >= params.out_w) {
        r.ox -= params.out_w;
        r.oy += 1u;
    }
    while (r.oy >= params.out_h) {
        r.oy -= params.out_h;
        r.img += 1u;
    }
    return r;
}

fn walk_pixel(w: PixelWalk, depth_end: u32) -> OutPixel {
    let iy0 = i32(w.oy * params.stride) - i32(params.pad);
    let ix0 = i32(w.ox * params.stride) - i32(params.pad);
    let x_img = w.img * params.in_ch * params.in_h * params.in_w;
    let rem = w.oy * params.out_w + w.ox;
    return OutPixel(w.p < depth_end, rem, x_img, w.img * params.out_ch, iy0, ix0);
}

fn out_pixel(p: u32, depth_end: u32) -> OutPixel {
    return walk_pixel(walk_start(p), depth_end);
}

// x at weight tap t = (ci, ky, kx) of output pixel px (zero in the padding).
fn x_tap(px: OutPixel, t: u32) -> f32 {
    let ci = t / KHW;
    let tap = t - ci * KHW;
    let ky = tap / KW;
    let iy = px.iy0 + i32(ky);
    let ix = px.ix0 + i32(tap - ky * KW);
    if (iy >= 0 && iy < i32(params.in_h) && ix >= 0 && ix < i32(params.in_w)) {
        return x_load(px.x_img + (ci * params.in_h + u32(iy)) * params.in_w + u32(ix));
    }
    return 0.0;
}

// dy at output channel o of output pixel px.
fn dy_at(px: OutPixel, o: u32) -> f32 {
    return dy_load((px.dy_img + o) * params.out_h * params.out_w + px.rem);
}

// dw[o, t] and dw[o, t + 1] (t even; taps = in_ch * KH * KW) of one split: with several
// splits the partial sums go to `partials` [splits, out_ch, taps] (conv_weight_reduce adds
// them in order); with one, rounded to round_to, added to dw when accumulating, and stored
// (a whole word when the pair starts one).
fn store_weight_pair(o: u32, t: u32, v: vec2<f32>, split: u32) {
    let taps = params.in_ch * KHW;
    if (o >= params.out_ch || t >= taps) { return; }
    let f0 = o * taps + t;
    if (params.splits > 1u) {
        let split_base = split * params.out_ch * taps;
        partials_store(split_base + f0, v.x);
        if (t + 1u < taps) { partials_store(split_base + f0 + 1u, v.y); }
        return;
    }
    var pair = vec2<f32>(round_grad(v.x, params.round_to), round_grad(v.y, params.round_to));
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
