// ---- softmax logits (`#include logit_class`): shared by shaders/attention.wgsl and the fused
// attention (shaders/include/flash_common.wgsl's users) -------------------------------------

const F32_MAX: f32 = 3.4028234663852886e38;
const NEG_INF_BITS: u32 = 0xff800000u;

// A quiet NaN computed at run time (a NaN const-expression is a shader-creation error).
fn nan_of(bits: u32) -> f32 {
    return bitcast<f32>(bits | 0x7fc00000u);
}

// Classes of a scaled logit, as PyTorch's masked_fill(-inf) + softmax treat them: 0 finite,
// 1 -inf (p = 0), 2 NaN or +inf (poisons the row).
fn logit_class(x: f32) -> u32 {
    if (!is_nonfinite(x)) {
        return 0u;
    }
    if (bitcast<u32>(x) == NEG_INF_BITS) {
        return 1u;
    }
    return 2u;
}
// ---- end softmax logits -----------------------------------------------------------------
