// Unary ops (activations), forward and backward. The table in src/ops/unary.rs gives each op
// two WGSL expressions, `y = f(v)` and `dx = f'(v, g)` (g the upstream gradient); they are
// appended below this file as the scalar pair `NAME(v)`, `NAME_grad(v, g)` and a `#unary NAME`
// line, which writes the entry points NAME_forward (x -> y) and NAME_backward (x, dy -> dx)
// (src/shader/map.rs). This file holds what the expressions call, and Llama's SwiGLU (the
// table's SiLU of a gate times an up projection) at its end.
//
// NaN: WGSL leaves min/max/comparisons of NaN to the implementation and compilers may assume
// finite math, so where PyTorch's NaN behaviour matters (ReLU, GELU) it is decided on the bits.

#tensor x 1 read
#tensor dy 2 read
#tensor y 3 read_write
#tensor dx 4 read_write
// SwiGLU's second input (x is its gate) and that input's gradient.
#tensor up 5 read
#tensor dup 6 read_write

#struct Params // src/ops/unary.rs
@group(0) @binding(0) var<uniform> params: Params;

const WG: u32 = 256u;

#include relu

// The logistic function 1 / (1 + e^-v), from e^-|v| <= 1: no exp overflows (compilers may
// assume finite math). NaN gives NaN, +inf 1 and -inf 0.
fn sigmoid(v: f32) -> f32 {
    let e = exp(-abs(v));
    return select(e, 1.0, v >= 0.0) / (1.0 + e);
}

#include gelu


// ---- SwiGLU: transformers' LlamaMLP, act_fn(gate_proj(x)) * up_proj(x), with act_fn SiLU --
// One kernel each way, over gate (x), up, the product y and their gradients, with the SiLU of
// the table below (silu, silu_grad). transformers stores act_fn's output in gate's dtype
// before the product, and autograd rounds the product's gradients to that dtype too, so
// these round where it does (params.round: 0 f32, 1 f16, 2 bf16) and give the bits of the
// silu and mul kernels run one after the other.
fn silu_stored(g: f32) -> f32 {
    return round_grad(silu(g), params.round);
}
fn swiglu(g: f32, u: f32) -> f32 {
    return silu_stored(g) * u;
}
// d gate = silu'(gate) · (dy · up in gate's dtype); d up = dy · silu(gate).
fn swiglu_dgate(g: f32, u: f32, d: f32) -> f32 {
    return silu_grad(g, round_grad(d * u, params.round));
}
fn swiglu_dup(g: f32, d: f32) -> f32 {
    return d * silu_stored(g);
}
#map swiglu_forward: y = swiglu(x, up)
#map swiglu_backward: dx = swiglu_dgate(x, up, dy); dup = swiglu_dup(x, dy)
// The backward that recomputes y (for down_proj's weight gradient) and writes the gradients.
#map swiglu_forward_backward: y = swiglu(x, up); dx = swiglu_dgate(x, up, dy); dup = swiglu_dup(x, dy)

// ---- generated from src/ops/unary.rs's table ----------------------------------------------
