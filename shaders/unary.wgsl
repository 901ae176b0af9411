// Unary ops (activations), forward and backward. The table in src/ops/unary.rs gives each op
// two WGSL expressions, `y = f(v)` and `dx = f'(v, g)` (g the upstream gradient); they are
// appended below this file as the scalar pair `NAME(v)`, `NAME_grad(v, g)` and a `#unary NAME`
// line, which writes the entry points NAME_forward (x -> y) and NAME_backward (x, dy -> dx)
// (src/shader/map.rs). This file holds what the expressions call.
//
// NaN: WGSL leaves min/max/comparisons of NaN to the implementation and compilers may assume
// finite math, so where PyTorch's NaN behaviour matters (ReLU, GELU) it is decided on the bits.

#tensor x 1 read
#tensor dy 2 read
#tensor y 3 read_write
#tensor dx 4 read_write

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

// ---- generated from src/ops/unary.rs's table ----------------------------------------------
