// ---- the sign test of ReLU (`#include relu`): unary.wgsl's relu and pool.wgsl's fused one --
// True when v <= 0 in IEEE terms (false for NaN), from the bits. ReLU is
// select(v, 0.0, is_non_positive(v)), so relu(NaN) = NaN as in PyTorch (max(NaN, 0) may drop
// the NaN), and its gradient PyTorch's threshold_backward(grad, result, 0): grad where
// !(result <= 0), else 0. A NaN input gives a NaN result, which is not <= 0, so its gradient
// passes through.
fn is_non_positive(v: f32) -> bool {
    let bits = bitcast<u32>(v);
    return (bits & 0x7fffffffu) == 0u || ((bits >> 31u) == 1u && !is_nan(v));
}
