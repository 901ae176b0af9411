// Average pooling over the planes of x [N, C, H, W] (NCHW), forward and backward:
// torch.nn.AvgPool2d(kernel, stride) (no padding, floor mode: PyTorch's defaults; a window's
// divisor is kernel²) and torch.nn.AdaptiveAvgPool2d((Ho, Wo)) (output row o averages input rows
// floor(o·H/Ho) .. ceil((o+1)·H/Ho), PyTorch's bins, which may overlap; likewise columns).
// Math in f32 whatever the storage; the output is stored in its own.
//
// One thread per element pair (2p, 2p + 1) of its output (`#map`): a packed word is written
// whole by one thread. The backward is a gather, not a scatter: each input element sums dy / divisor
// over the windows (bins) that contain it, in a fixed order, with no atomics.

#tensor x 1 read
#tensor y 2 read_write
#tensor dy 3 read
#tensor dx 4 read_write

#struct Params // src/ops/avgpool.rs
@group(0) @binding(0) var<uniform> params: Params;

const WG: u32 = 256u;

// Input rows [start, end) of output row o along an axis of `size` inputs and `outs` outputs.
fn bin(o: u32, size: u32, outs: u32) -> vec2<u32> {
    if (params.adaptive != 0u) {
        return vec2<u32>((o * size) / outs, ((o + 1u) * size + outs - 1u) / outs);
    }
    let start = o * params.stride;
    return vec2<u32>(start, start + params.kernel);
}

// Outputs [first, end) whose bin holds input i along an axis (first >= end: none, the tail
// that floor mode drops).
fn covering(i: u32, size: u32, outs: u32) -> vec2<u32> {
    if (params.adaptive != 0u) {
        // PyTorch's START_IND(i, size, outs) and END_IND: floor(i·outs/size) and
        // ceil((i+1)·outs/size).
        return vec2<u32>((i * outs) / size, ((i + 1u) * outs + size - 1u) / size);
    }
    var first = 0u;
    if (i >= params.kernel) {
        first = (i - params.kernel) / params.stride + 1u;
    }
    return vec2<u32>(first, min(i / params.stride + 1u, outs));
}

fn divisor(rows: vec2<u32>, cols: vec2<u32>) -> f32 {
    return f32((rows.y - rows.x) * (cols.y - cols.x));
}

// Flat index i of planes h x w: (plane, row, column).
fn place(i: u32, h: u32, w: u32) -> vec3<u32> {
    let plane = i / (h * w);
    let r = i - plane * h * w;
    let y = r / w;
    return vec3<u32>(plane, y, r - y * w);
}

// What an element of one side (output or input) meets on the other, in its plane: the
// plane's first element there and the row and column ranges [start, end).
struct Reach {
    base: u32,
    rows: vec2<u32>,
    cols: vec2<u32>,
}

// The inputs output o averages: its window (bin).
fn window_of(o: u32) -> Reach {
    let at = place(o, params.out_h, params.out_w);
    return Reach(at.x * params.in_h * params.in_w, bin(at.y, params.in_h, params.out_h), bin(at.z, params.in_w, params.out_w));
}

// The outputs whose windows (bins) hold input i.
fn windows_holding(i: u32) -> Reach {
    let at = place(i, params.in_h, params.in_w);
    return Reach(at.x * params.out_h * params.out_w, covering(at.y, params.in_h, params.out_h), covering(at.z, params.in_w, params.out_w));
}

// y at flat output index o: the mean of its window.
fn pooled(o: u32) -> f32 {
    let w = window_of(o);
    var sum = 0.0;
    for (var iy = w.rows.x; iy < w.rows.y; iy = iy + 1u) {
        for (var ix = w.cols.x; ix < w.cols.y; ix = ix + 1u) {
            sum = sum + x_load(w.base + iy * params.in_w + ix);
        }
    }
    return sum / divisor(w.rows, w.cols);
}

#map avgpool_forward: y = pooled(i) // params.n: outputs

// dx at flat input index i: Σ dy / divisor over the outputs whose window holds it.
fn gathered(i: u32) -> f32 {
    let w = windows_holding(i);
    var g = 0.0;
    for (var oy = w.rows.x; oy < w.rows.y; oy = oy + 1u) {
        let rows = bin(oy, params.in_h, params.out_h);
        for (var ox = w.cols.x; ox < w.cols.y; ox = ox + 1u) {
            let cols = bin(ox, params.in_w, params.out_w);
            g = g + dy_load(w.base + oy * params.out_w + ox) / divisor(rows, cols);
        }
    }
    return g;
}

#map avgpool_backward: dx = gathered(i) // params.n: inputs
