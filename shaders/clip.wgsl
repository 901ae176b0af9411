// Gradient clipping by global L2 norm (torch.nn.utils.clip_grad_norm_) over the flat f32
// gradient buffer, after the GradScaler's unscale. Deterministic: a fixed assignment of
// elements to threads and fixed-shape tree reductions, no float atomics. Three kernels:
// partial sums of squares, the total norm and clip coefficient, the scaling.

const WG: u32 = 256u;
// Elements each thread handles (strided by WG so a workgroup's loads stay contiguous).
const EPT: u32 = 4u;

#struct Sizes // src/amp/clip.rs

@group(0) @binding(0) var<storage, read_write> grads: array<f32>;
@group(0) @binding(1) var<uniform> sizes: Sizes;
// One sum of squares per workgroup of clip_partial, from `sizes.first_group` for the piece
// of the gradients this dispatch binds; clip_reduce sums `sizes.groups` of them.
@group(0) @binding(2) var<storage, read_write> partials: array<f32>;
// [total_norm, clip_coef].
@group(0) @binding(3) var<storage, read_write> norm: array<f32, 2>;

#include workgroup_reduce

@compute @workgroup_size(WG)
fn clip_partial(#workgroup_builtins) {
    let group = workgroup_index(wid, nwg);
    let base = group * WG * EPT + lid;
    var acc = 0.0;
    for (var k = 0u; k < EPT; k++) {
        let i = base + k * WG;
        if (i < sizes.n) {
            let g = grads[i];
            acc = acc + g * g;
        }
    }
    let total = workgroup_sum(lid, acc);
    if (lid == 0u) {
        partials[sizes.first_group + group] = total;
    }
}

// One workgroup: total norm and clip coefficient max_norm / (norm + 1e-6), clamped to 1.
@compute @workgroup_size(WG)
fn clip_reduce(@builtin(local_invocation_index) lid: u32) {
    let sum_sq = sum_of_partials(lid, sizes.groups);
    if (lid == 0u) {
        let total = sqrt(sum_sq);
        // PyTorch: max_norm / (total + 1e-6) evaluates as reciprocal(total + 1e-6) * max_norm.
        let coef = (1.0 / (total + 1e-6)) * sizes.max_norm;
        // clamp(max=1) keeps NaN, as torch.clamp does (a NaN norm poisons the gradients).
        norm[0] = total;
        norm[1] = select(1.0, coef, is_nan(coef) || coef < 1.0);
    }
}

// grads *= clip_coef (1 when the norm is within max_norm, as PyTorch multiplies always).
@compute @workgroup_size(WG)
fn clip_apply(#workgroup_builtins) {
    let coef = norm[1];
    let base = workgroup_index(wid, nwg) * WG * EPT + lid;
    for (var k = 0u; k < EPT; k++) {
        let i = base + k * WG;
        if (i < sizes.n) {
            grads[i] = grads[i] * coef;
        }
    }
}
