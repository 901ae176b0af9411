// ---- GELU, exact and tanh forms (`#include gelu`): unary.wgsl's activations and the GELU that
// batchnorm.wgsl fuses after a BatchNorm (the same code, so the same bits) ------------------

// NaN from inf or NaN bits (sets the quiet bit), without a NaN constant or `inf * 0`, which
// compilers may fold to 0.
fn nan_from(v: f32) -> f32 {
    return bitcast<f32>(bitcast<u32>(v) | 0x00400000u);
}

// ---- GELU, tanh form ----------------------------------------------------------------------
// PyTorch approximate='tanh': 0.5 x (1 + tanh(u)), u = k0 (x + k1 x^3).
// 0.5 (1 + tanh(u)) = sigmoid(2u), which has no cancellation for negative x and no tanh of
// large arguments (whose WGSL accuracy is loose on some backends).
const GELU_K0: f32 = 0.7978845608028654; // sqrt(2 / pi)
const GELU_K1: f32 = 0.044715;
// Past this |x| the tanh form is exactly x (or 0) in f32, and x^3 could overflow.
const GELU_SATURATE: f32 = 10.0;

// Non-finite inputs give what PyTorch's tanh formula gives: gelu(NaN) = NaN, gelu(+inf) = +inf,
// gelu(-inf) = -inf * 0 = NaN (so an overflow upstream is not hidden from the GradScaler).
fn gelu_by_tanh(v: f32) -> f32 {
    if (is_nonfinite(v)) {
        return select(nan_from(v), v, bitcast<u32>(v) == 0x7f800000u);
    }
    if (abs(v) > GELU_SATURATE) {
        return select(0.0, v, v > 0.0);
    }
    let u = GELU_K0 * (v + GELU_K1 * v * v * v);
    return v / (1.0 + exp(-2.0 * u));
}

// d/dx [x sigmoid(2u)] = s + x * 2 u' * s (1 - s), with s = sigmoid(2u), 1 - s = sigmoid(-2u).
// A non-finite x gives NaN (PyTorch's formula has inf * 0 there); where the derivative is 0, an
// inf or NaN upstream gradient gives NaN (IEEE 0 * inf), which the GradScaler then sees.
fn gelu_by_tanh_grad(v: f32, g: f32) -> f32 {
    if (is_nonfinite(v)) {
        return nan_from(v);
    }
    if (abs(v) > GELU_SATURATE) {
        if (v > 0.0) {
            return g;
        }
        return select(0.0, nan_from(g), is_nonfinite(g));
    }
    let u = GELU_K0 * (v + GELU_K1 * v * v * v);
    let du = GELU_K0 * (1.0 + 3.0 * GELU_K1 * v * v);
    let s = 1.0 / (1.0 + exp(-2.0 * u));
    let s_neg = 1.0 / (1.0 + exp(2.0 * u));
    return g * (s + 2.0 * v * du * s * s_neg);
}

// ---- GELU, exact (erf) form ---------------------------------------------------------------
// nn.GELU(): gelu(x) = x Φ(x), Φ(x) = 0.5 erfc(-x / √2). WGSL has no erf; erfc comes from the
// Chebyshev-fitted exponential form of Numerical Recipes' erfcc (fractional error < 1.2e-7 for
// every z >= 0), so Φ is accurate to that *relative* error in the negative tail too, and
// 1 - erfc never cancels where it matters. Checked on the GPU against an f64 erf to 1e-6
// absolute for |x| <= 10 (tests/transformer_elementwise.rs).
const GELU_ERF_SQRT1_2: f32 = 0.7071067811865476;
const GELU_ERF_INV_SQRT_2PI: f32 = 0.3989422804014327;
// Past this |x|, Φ(x) is 0 or 1 in f32 (and x² stays far from overflow below it).
const GELU_ERF_SATURATE: f32 = 30.0;

// erfc(z) for z >= 0.
fn erfc_nonneg(z: f32) -> f32 {
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806
        + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))));
    return t * exp(poly - z * z);
}

// Standard normal CDF Φ(v), |v| <= GELU_ERF_SATURATE.
fn normal_cdf(v: f32) -> f32 {
    let tail = 0.5 * erfc_nonneg(abs(v) * GELU_ERF_SQRT1_2);
    return select(tail, 1.0 - tail, v > 0.0);
}

// Non-finite inputs as PyTorch's formula gives them: NaN -> NaN, +inf -> +inf, -inf -> NaN.
fn gelu_by_erf(v: f32) -> f32 {
    if (is_nonfinite(v)) {
        return select(nan_from(v), v, bitcast<u32>(v) == 0x7f800000u);
    }
    if (abs(v) > GELU_ERF_SATURATE) {
        return select(0.0, v, v > 0.0);
    }
    return v * normal_cdf(v);
}

// d/dx [x Φ(x)] = Φ(x) + x φ(x). Non-finite x gives NaN (inf * 0 in PyTorch's formula); where
// the derivative is 0, an inf or NaN upstream gradient gives NaN, as IEEE 0 * inf does.
fn gelu_by_erf_grad(v: f32, g: f32) -> f32 {
    if (is_nonfinite(v)) {
        return nan_from(v);
    }
    if (abs(v) > GELU_ERF_SATURATE) {
        if (v > 0.0) {
            return g;
        }
        return select(0.0, nan_from(g), is_nonfinite(g));
    }
    let pdf = GELU_ERF_INV_SQRT_2PI * exp(-0.5 * v * v);
    return g * (normal_cdf(v) + v * pdf);
}
// ---- end GELU ------------------------------------------------------------------------------
