// Fused optimizers (torch.optim SGD, Adam, AdamW): one dispatch over every parameter of the
// model (parameters, gradients and each moment live in one flat f32 buffer each).
//
// Skipped steps: the GradScaler state's FOUND_INF word is read first; when set, the
// kernel leaves parameters, moments AND the step counter untouched, as PyTorch's
// GradScaler.step skips optimizer.step() entirely. No CPU readback decides anything.
//
// The compute-dtype copy of the weights: with `writes_low` set, each updated parameter is
// also stored into `low` through the same store helpers `elementwise.wgsl`'s cast uses (same
// bits), so a trainer's step needs no separate master -> f16/bf16 cast. A thread owns whole
// element pairs (2j, 2j + 1), so a packed word is written whole by one thread.
//
// Step counter: each workgroup keeps its own copy (`words[group]`), read and written only
// by that workgroup, so counting needs no grid-wide synchronisation inside the one dispatch.
// All copies are equal: they start equal and advance under the same found_inf.

const WG: u32 = 256u;
const EPT: u32 = 4u;

#struct Hyper // src/optim/config.rs

@group(0) @binding(0) var<uniform> hyper: Hyper;
@group(0) @binding(1) var<storage, read> scaler: array<u32>;
// The step counters (one per workgroup), then the weight-decay mask from word
// `hyper.mask_at`: one binding, so Adam's step stays within WebGPU's 8 storage buffers.
// Parameter groups (nanoGPT's configure_optimizers): bit i % 32 of mask word i / 32 is set
// when element i gets weight decay. Read only when `grouped` is 1; otherwise every element
// decays.
@group(0) @binding(2) var<storage, read_write> words: array<u32>;
@group(0) @binding(3) var<storage, read_write> param: array<f32>;
@group(0) @binding(4) var<storage, read> grad: array<f32>;
@group(0) @binding(5) var<storage, read_write> momentum_buffer: array<f32>;
@group(0) @binding(6) var<storage, read_write> exp_avg: array<f32>;
@group(0) @binding(7) var<storage, read_write> exp_avg_sq: array<f32>;
// Gradient clipping folded into the step: [total_norm, clip_coef] as `clip.wgsl`'s
// clip_reduce wrote them. Read only when `clipped` is 1.
@group(0) @binding(9) var<storage, read> clip_norm: array<f32>;
// The weights' compute-dtype copy (any storage; written only when `writes_low` is 1).
#tensor low 10 read_write

#consts scaler_state // the state buffer's word offsets: src/ops/scaler_state.rs

var<workgroup> wg_prev_steps: u32;

// Steps applied before this one, as one uniform value for the whole workgroup (every thread
// has read it once this returns, so thread 0 may then overwrite the counter).
fn begin(lid: u32, group: u32) -> u32 {
    if (lid == 0u) {
        wg_prev_steps = words[group];
    }
    return workgroupUniformLoad(&wg_prev_steps);
}

// Count this step (only thread 0 of the group touches its counter; everyone has read it).
fn count_step(lid: u32, group: u32, step: u32) {
    if (lid == 0u) {
        words[group] = step;
    }
}

fn skipped() -> bool {
    return scaler[FOUND_INF] != 0u;
}

struct StepStart {
    count: u32, // element pairs this thread updates: EPT / 2, or 0 when found_inf skips
    prev: u32,  // steps applied before this one
    base: u32,  // this thread's first element; its pairs start at base + 2 * k * WG, k < count
}

// What every optimizer kernel starts with: read this workgroup's step count, and unless the
// GradScaler found inf/NaN, count the step. Call it first, in uniform control flow.
fn start_step(lid: u32, wid: vec3<u32>, nwg: vec3<u32>) -> StepStart {
    let group = workgroup_index(wid, nwg);
    let prev = begin(lid, group);
    if (skipped()) {
        return StepStart(0u, prev, 0u);
    }
    count_step(lid, group, prev + 1u);
    return StepStart(EPT / 2u, prev, group * WG * EPT + 2u * lid);
}

// The first element of pair k of this thread.
fn pair_at(start: StepStart, k: u32) -> u32 {
    return start.base + 2u * k * WG;
}

// The updated parameters of the pair at i (i even) into the compute-dtype copy.
fn store_low(i: u32, v: vec2<f32>) {
    if (hyper.writes_low == 0u) {
        return;
    }
    if (i + 1u < hyper.n) {
        low_store2(i, v);
    } else if (i < hyper.n) {
        low_store(i, v.x);
    }
}

// Whether element i is in the weight-decay group.
fn decays(i: u32) -> bool {
    if (hyper.grouped == 0u) {
        return true;
    }
    return ((words[hyper.mask_at + (i >> 5u)] >> (i & 31u)) & 1u) != 0u;
}

// The gradient, times the clip coefficient when clipping precedes the step: the multiply
// `clip.wgsl`'s clip_apply did in a dispatch of its own, the same f32 op on the same values
// (same bits), done here instead. The gradient buffer itself keeps the unclipped values.
fn clipped_grad(i: u32) -> f32 {
    let g = grad[i];
    if (hyper.clipped != 0u) {
        return g * clip_norm[1];
    }
    return g;
}

// The (clipped) gradient plus PyTorch's L2 term (SGD and Adam `weight_decay`; 0 for AdamW,
// which decays the parameter instead), for elements in the weight-decay group.
fn l2_grad(i: u32, p: f32) -> f32 {
    let g = clipped_grad(i);
    if (hyper.weight_decay != 0.0 && decays(i)) {
        return g + hyper.weight_decay * p;
    }
    return g;
}

// torch.lerp: start + w * (end - start) for |w| < 0.5, else end - (end - start) * (1 - w).
fn torch_lerp(start: f32, end: f32, w: f32) -> f32 {
    if (abs(w) < 0.5) {
        return start + w * (end - start);
    }
    return end - (end - start) * (1.0 - w);
}

// 1 - e^x for x <= 0 without cancellation: a series near 0 (where 1 - beta^step is tiny and
// 1 - exp(x) would lose most digits), exp below -1 (where the loss is at most a factor 1.6).
fn one_minus_exp(x_in: f32) -> f32 {
    let x = max(x_in, -200.0);
    if (x > -1.0) {
        // -(e^x - 1) = -x (1 + x/2 (1 + x/3 (1 + ... (1 + x/13)))), truncation < 1e-10.
        var t = 1.0;
        for (var k = 13u; k >= 2u; k--) {
            t = 1.0 + x * t / f32(k);
        }
        return -x * t;
    }
    return 1.0 - exp(x);
}

@compute @workgroup_size(WG)
fn sgd_step(#workgroup_builtins) {
    let start = start_step(lid, wid, nwg);
    for (var k = 0u; k < start.count; k++) {
        let i = pair_at(start, k);
        store_low(i, vec2<f32>(sgd_update(i), sgd_update(i + 1u)));
    }
}

// Each update returns the new parameter (0 past the end, where it writes nothing).
fn sgd_update(i: u32) -> f32 {
    if (i >= hyper.n) {
        return 0.0;
    }
    let p = param[i];
    let updated = p + (-hyper.lr) * l2_grad(i, p);
    param[i] = updated;
    return updated;
}

@compute @workgroup_size(WG)
fn sgd_momentum_step(#workgroup_builtins) {
    let start = start_step(lid, wid, nwg);
    for (var k = 0u; k < start.count; k++) {
        let i = pair_at(start, k);
        let updated = vec2<f32>(momentum_update(i, start.prev), momentum_update(i + 1u, start.prev));
        store_low(i, updated);
    }
}

// `prev`: steps applied before this one.
fn momentum_update(i: u32, prev: u32) -> f32 {
    if (i >= hyper.n) {
        return 0.0;
    }
    let p = param[i];
    var g = l2_grad(i, p);
    // PyTorch creates the buffer as a clone of the first applied gradient.
    var buf = g;
    if (prev != 0u) {
        buf = momentum_buffer[i] * hyper.momentum + hyper.one_minus_dampening * g;
    }
    momentum_buffer[i] = buf;
    if (hyper.nesterov != 0u) {
        g = g + hyper.momentum * buf;
    } else {
        g = buf;
    }
    let updated = p + (-hyper.lr) * g;
    param[i] = updated;
    return updated;
}

// Adam and AdamW (AdamW: param_decay = 1 - lr * wd and weight_decay = 0).
@compute @workgroup_size(WG)
fn adam_step(#workgroup_builtins) {
    let start = start_step(lid, wid, nwg);
    // Bias corrections 1 - beta^step as 1 - e^(step ln beta), accurate to a few f32 ulp.
    let t = f32(start.prev + 1u);
    let step_size = hyper.lr / one_minus_exp(t * hyper.log_beta1);
    let bias_correction2_sqrt = sqrt(one_minus_exp(t * hyper.log_beta2));
    for (var k = 0u; k < start.count; k++) {
        let i = pair_at(start, k);
        let first = adam_update(i, step_size, bias_correction2_sqrt);
        let second = adam_update(i + 1u, step_size, bias_correction2_sqrt);
        store_low(i, vec2<f32>(first, second));
    }
}

fn adam_update(i: u32, step_size: f32, bias_correction2_sqrt: f32) -> f32 {
    if (i >= hyper.n) {
        return 0.0;
    }
    var p = param[i];
    if (decays(i)) {
        p = p * hyper.param_decay;
    }
    let g = l2_grad(i, p);
    let m = torch_lerp(exp_avg[i], g, hyper.one_minus_beta1);
    let v = exp_avg_sq[i] * hyper.beta2 + hyper.one_minus_beta2 * g * g;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    let denom = sqrt(v) / bias_correction2_sqrt + hyper.eps;
    // addcdiv(value = -step_size): (value * m) / denom, PyTorch's evaluation order.
    let updated = p + (-step_size) * m / denom;
    param[i] = updated;
    return updated;
}
