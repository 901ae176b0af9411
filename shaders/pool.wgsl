// 2-D max pooling (NCHW, no padding, floor mode: PyTorch's defaults), forward and backward.
//
// One thread per row (forward: an output row, backward: an input row), so a thread owns the
// neighbouring elements of its row and writes packed words whole (store2); only a word that
// straddles two rows (odd row length) is written per element through the atomic-safe store.
//
// Backward is a gather, not a scatter: each input element sums dy over the windows that
// contain it and whose recorded argmax is this element. Overlapping windows (stride < kernel)
// then sum correctly without atomics, and the order of the sum is fixed.
//
// A ReLU before the pool runs in it where the windows tile the input (stride = kernel, the
// sizes divisible: each input element in one window), src/nn/layers/pool.rs: the forward
// reads the ReLU's input `pre` and writes its output `act` whole as well as the pool's; the
// backward writes the gradient of `act` (dx) and of `pre` (dpre). Same values, same bits as
// the two kernels each replaces.

#tensor x 1 read
#tensor y 2 read_write
#tensor dy 3 read
#tensor dx 4 read_write
#tensor pre 6 read
#tensor act 7 read_write
#tensor dpre 8 read_write
// Flat index into x of each output's max (one u32 per output element).
@group(0) @binding(5) var<storage, read_write> indices: array<u32>;

#struct Params // src/ops/pool.rs
@group(0) @binding(0) var<uniform> params: Params;

const WG: u32 = 64u;

#include relu

// ReLU and its gradient as src/ops/unary.rs's table writes them.
fn relu(v: f32) -> f32 {
    return select(v, 0.0, is_non_positive(v));
}
fn relu_grad(v: f32, g: f32) -> f32 {
    return select(g, 0.0, is_non_positive(v));
}

fn row_of(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return thread_index(gid, nwg, WG);
}

struct WindowMax {
    value: f32,
    index: u32,
}

// Max of one window, as PyTorch computes it: strict > keeps the first maximum, and any NaN
// wins (so a window with a NaN gives NaN, and its gradient goes to that NaN).
fn window_max(x_plane: u32, oy: u32, ox: u32) -> WindowMax {
    let y0 = oy * params.stride;
    let x0 = ox * params.stride;
    // Start from the window's first element: the same maximum and index as starting from
    // -inf, and WGSL has no -inf constant (`bitcast<f32>(0xff800000u)` is a constant
    // expression, and Tint rightly rejects its non-finite value; naga accepts it).
    let first = x_plane + y0 * params.in_w + x0;
    var best = WindowMax(x_load(first), first);
    for (var ky = 0u; ky < params.kernel; ky = ky + 1u) {
        let row = x_plane + (y0 + ky) * params.in_w + x0;
        for (var kx = 0u; kx < params.kernel; kx = kx + 1u) {
            best = keep_max(best, x_load(row + kx), row + kx);
        }
    }
    return best;
}

fn keep_max(best: WindowMax, v: f32, i: u32) -> WindowMax {
    if (v > best.value || is_nan(v)) {
        return WindowMax(v, i);
    }
    return best;
}

// window_max of relu(pre), the values the ReLU's kernel would have stored in `act` (in the
// storage of `pre`, where ReLU is exact: the value or +0).
fn relu_window_max(x_plane: u32, oy: u32, ox: u32) -> WindowMax {
    let y0 = oy * params.stride;
    let x0 = ox * params.stride;
    let first = x_plane + y0 * params.in_w + x0;
    var best = WindowMax(relu(pre_load(first)), first);
    for (var ky = 0u; ky < params.kernel; ky = ky + 1u) {
        let row = x_plane + (y0 + ky) * params.in_w + x0;
        for (var kx = 0u; kx < params.kernel; kx = kx + 1u) {
            best = keep_max(best, relu(pre_load(row + kx)), row + kx);
        }
    }
    return best;
}

// The pair of `pre` elements a row slot covers (the second is the first's again in a lone
// slot, which stores only the first).
fn pre_slot(s: vec2<u32>) -> vec2<f32> {
    return vec2<f32>(pre_load(s.x), pre_load(s.x + s.y - 1u));
}

@compute @workgroup_size(WG)
fn maxpool_forward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = row_of(gid, nwg); // (plane, oy)
    if (row >= params.planes * params.out_h) { return; }
    let plane = row / params.out_h;
    let oy = row - plane * params.out_h;
    let x_plane = plane * params.in_h * params.in_w;
    let y_row = row * params.out_w;
    var ox = 0u;
    loop {
        if (ox >= params.out_w) { break; }
        let f = y_row + ox;
        let a = window_max(x_plane, oy, ox);
        indices[f] = a.index;
        if ((f & 1u) == 0u && ox + 1u < params.out_w) {
            let b = window_max(x_plane, oy, ox + 1u);
            indices[f + 1u] = b.index;
            y_store2(f, vec2<f32>(a.value, b.value));
            ox = ox + 2u;
        } else {
            y_store(f, a.value);
            ox = ox + 1u;
        }
    }
}

// relu then maxpool_forward, windows tiling the input: an output row's windows cover whole
// input rows, which this thread writes as the ReLU's output.
@compute @workgroup_size(WG)
fn maxpool_relu_forward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = row_of(gid, nwg); // (plane, oy)
    if (row >= params.planes * params.out_h) { return; }
    let plane = row / params.out_h;
    let oy = row - plane * params.out_h;
    let x_plane = plane * params.in_h * params.in_w;
    for (var ky = 0u; ky < params.kernel; ky = ky + 1u) {
        let start = x_plane + (oy * params.kernel + ky) * params.in_w;
        for (var k = 0u; k < row_slots(start, params.in_w); k = k + 1u) {
            let s = row_slot(start, params.in_w, k);
            let v = pre_slot(s);
            act_store_slot(s, vec2<f32>(relu(v.x), relu(v.y)));
        }
    }
    let y_row = row * params.out_w;
    for (var k = 0u; k < row_slots(y_row, params.out_w); k = k + 1u) {
        let s = row_slot(y_row, params.out_w, k);
        let ox = s.x - y_row;
        let a = relu_window_max(x_plane, oy, ox);
        indices[s.x] = a.index;
        var b = a;
        if (s.y == 2u) {
            b = relu_window_max(x_plane, oy, ox + 1u);
            indices[s.x + 1u] = b.index;
        }
        y_store_slot(s, vec2<f32>(a.value, b.value));
    }
}

// First and last output (inclusive) whose window covers input coordinate `i`; first > last
// when none does (the tail that floor mode drops).
fn covering(i: u32, out_len: u32) -> vec2<u32> {
    var first = 0u;
    if (i >= params.kernel) { first = (i - params.kernel) / params.stride + 1u; }
    let last = min(i / params.stride, out_len - 1u);
    return vec2<u32>(first, last);
}

// dx of one input element: dy summed over the windows whose argmax it is.
fn gathered_grad(flat: u32, dy_plane: u32, oys: vec2<u32>, ix: u32) -> f32 {
    let oxs = covering(ix, params.out_w);
    var g = 0.0;
    for (var oy = oys.x; oy <= oys.y; oy = oy + 1u) {
        for (var ox = oxs.x; ox <= oxs.y; ox = ox + 1u) {
            let o = dy_plane + oy * params.out_w + ox;
            if (indices[o] == flat) { g = g + dy_load(o); }
        }
    }
    return g;
}

// One input row (plane, iy) of the backward: where it starts in x, and the dy rows and
// plane its elements gather from.
struct InputRow {
    start: u32,
    dy_plane: u32,
    oys: vec2<u32>,
}

fn input_row(row: u32) -> InputRow {
    let plane = row / params.in_h;
    let iy = row - plane * params.in_h;
    return InputRow(row * params.in_w, plane * params.out_h * params.out_w, covering(iy, params.out_h));
}

// dx of a row slot (prelude's `row_slot`; a lone slot's second value is 0 and not stored).
fn gathered_slot(r: InputRow, s: vec2<u32>) -> vec2<f32> {
    let ix = s.x - r.start;
    var g = vec2<f32>(gathered_grad(s.x, r.dy_plane, r.oys, ix), 0.0);
    if (s.y == 2u) { g.y = gathered_grad(s.x + 1u, r.dy_plane, r.oys, ix + 1u); }
    return g;
}

@compute @workgroup_size(WG)
fn maxpool_backward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = row_of(gid, nwg); // (plane, iy)
    if (row >= params.planes * params.in_h) { return; }
    let r = input_row(row);
    for (var k = 0u; k < row_slots(r.start, params.in_w); k = k + 1u) {
        let s = row_slot(r.start, params.in_w, k);
        dx_store_slot(s, gathered_slot(r, s));
    }
}

// maxpool_backward then the ReLU's backward: dx (the gradient of the ReLU's output) as
// maxpool_backward writes it, and dpre = relu_grad(pre, dx). dx and dpre share a storage, so
// rounding the gradient once (here) or twice (stored as dx, read back, stored as dpre) gives
// the same bits.
@compute @workgroup_size(WG)
fn maxpool_relu_backward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = row_of(gid, nwg); // (plane, iy)
    if (row >= params.planes * params.in_h) { return; }
    let r = input_row(row);
    for (var k = 0u; k < row_slots(r.start, params.in_w); k = k + 1u) {
        let s = row_slot(r.start, params.in_w, k);
        let g = gathered_slot(r, s);
        dx_store_slot(s, g);
        let v = pre_slot(s);
        dpre_store_slot(s, vec2<f32>(relu_grad(v.x, g.x), relu_grad(v.y, g.y)));
    }
}
