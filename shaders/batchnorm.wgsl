// BatchNorm over the channels of x [N, C, S] (torch.nn.BatchNorm1d / BatchNorm2d: S = 1, L or
// H·W), forward with batch statistics (training) or running statistics (eval), the running
// statistics' update and its commit, and the backward. Statistics and all math in f32 whatever
// the storages (what cuDNN does under autocast: f16 or bf16 in and out, f32 statistics and
// affine parameters).
//
// Deterministic, no float atomics: a channel's N·S values are cut into fixed chunks of
// `chunk_len` (a function of the shape only); one workgroup per (channel, chunk) reduces its
// chunk in a fixed tree order (the sum, then the centred sum of squares around the chunk's
// mean), and one thread per channel then combines the chunks in chunk order:
//   mean = Σ sum_j / M,   M2 = Σ (M2_j + n_j (mean_j − mean)²)
// (the exact parallel form of the two-pass variance). The backward sums (Σ g, Σ g·x̂) the same
// way. So the same inputs give the same bits on every run.
//
// A ReLU or GELU after the BatchNorm may run in its kernels (constant ACT: 0 none, 1 ReLU,
// 2 GELU): the BatchNorm's value is rounded to the output's storage first (`act_round`), as
// storing it and reading it back would, so y has the bits of the two kernels; the backward
// recomputes that value from x and the statistics and rounds the activation's gradient the same
// way before using it.

#tensor x 1 read
#tensor y 2 read_write
// The BatchNorm's own output when the activation after it is fused (y then holds the
// activation's): `batchnorm_apply_act` writes both, so every layer's output still exists.
#tensor pre 15 read_write
// Affine parameters [C] (the input's storage or f32). Without them the Rust side binds
// placeholders here and clears has_weight / has_bias; they are never read.
#tensor weight 3 read
#tensor bias 4 read
#tensor dy 5 read
#tensor dx 6 read_write
// Parameter gradients [C] (f32), added to (gradient accumulation). Placeholders (never
// touched) where a parameter is frozen or absent.
#tensor dweight 7 read_write
#tensor dbias 8 read_write
// Per-(channel, chunk) partial sums of the first passes: [C · chunks] pairs.
@group(0) @binding(9) var<storage, read_write> partials: array<f32>;
// Per-channel results of a final pass: the batch statistics [mean C | invstd C] (forward), or
// the backward's coefficients [mean(g) C | mean(g·x̂) C].
#tensor stats_out 10 read_write
// The forward's batch statistics [mean C | invstd C], read by the normalisation and backward.
#tensor stats 11 read
// The backward's coefficients, read by its input-gradient pass.
#tensor coefs 12 read
// Running statistics, laid out [running_mean C | running_var C | num_batches_tracked (int64:
// low word, high word)] from word `running_offset` of a model's buffer store (nn/buffers.rs):
// the committed copy, read by the eval forward ...
@group(0) @binding(13) var<storage, read> running: array<f32>;
// ... and the working copy a training forward updates, which the step's commit of every
// buffer (shaders/buffers.wgsl) keeps or, on a skipped step, rolls back.
@group(0) @binding(14) var<storage, read_write> pending: array<u32>;

#struct Params // src/ops/batchnorm.rs
@group(0) @binding(0) var<uniform> params: Params;

const WG: u32 = 256u;

#include workgroup_reduce
#include relu
#include gelu

// ---- indexing ---------------------------------------------------------------------------------

// Elements per channel: M = N · S.
fn per_channel() -> u32 {
    return params.batch * params.inner;
}

// Flat index of element e (0 <= e < M, sample-major) of channel c.
fn element(c: u32, e: u32) -> u32 {
    let n = e / params.inner;
    let s = e - n * params.inner;
    return (n * params.channels + c) * params.inner + s;
}

// The channel of flat index i.
fn channel_of(i: u32) -> u32 {
    return (i / params.inner) % params.channels;
}

// The elements [first, last) of chunk j of a channel.
fn chunk_range(j: u32) -> vec2<u32> {
    let first = j * params.chunk_len;
    return vec2<u32>(first, min(first + params.chunk_len, per_channel()));
}

// ---- the normalised value and the fused activation -------------------------------------------

struct ChannelStats {
    mean: f32,
    invstd: f32,
}

// The batch statistics a training forward wrote (what the backward reads).
fn saved_stats(c: u32) -> ChannelStats {
    return ChannelStats(stats_load(c), stats_load(params.channels + c));
}

// The statistics a forward normalises with: the batch's, or the running ones (eval), with
// invstd = 1 / sqrt(var + eps) as PyTorch computes it.
fn channel_stats(c: u32) -> ChannelStats {
    if (params.from_running != 0u) {
        let r = params.running_offset;
        return ChannelStats(running[r + c], 1.0 / sqrt(running[r + params.channels + c] + params.eps));
    }
    return saved_stats(c);
}

fn x_hat(i: u32, st: ChannelStats) -> f32 {
    return (x_load(i) - st.mean) * st.invstd;
}

// The BatchNorm's output at i: x̂ · weight + bias (PyTorch's order).
fn bn_value(i: u32, c: u32, st: ChannelStats) -> f32 {
    var v = x_hat(i, st);
    if (params.has_weight != 0u) {
        v = v * weight_load(c);
    }
    if (params.has_bias != 0u) {
        v = v + bias_load(c);
    }
    return v;
}

// The value as the activation kernel would have read it: stored in y's storage, then loaded.
fn stored(v: f32) -> f32 {
    return round_grad(v, params.act_round);
}

fn activation(z: f32) -> f32 {
    if (ACT == 1u) {
        return select(z, 0.0, is_non_positive(z));
    }
    if (ACT == 2u) {
        return gelu_by_erf(z);
    }
    return z;
}

// The gradient of the BatchNorm's output at i: dy, or (fused) the activation's input
// gradient, rounded as its kernel would have stored it.
fn bn_grad(i: u32, c: u32, st: ChannelStats) -> f32 {
    let g = dy_load(i);
    if (ACT == 0u) {
        return g;
    }
    let z = stored(bn_value(i, c, st));
    if (ACT == 1u) {
        return stored(select(g, 0.0, is_non_positive(z)));
    }
    return stored(gelu_by_erf_grad(z, g));
}

// ---- forward: batch statistics ----------------------------------------------------------------

// One workgroup per (channel, chunk): the chunk's sum and the centred sum of squares around
// its own mean, into partials [2 g, 2 g + 1].
@compute @workgroup_size(WG)
fn batchnorm_stats_partial(#workgroup_builtins) {
    let g = workgroup_index(wid, nwg);
    if (g >= params.channels * params.chunks) {
        return; // whole workgroup: the barriers stay in uniform control flow
    }
    let c = g / params.chunks;
    let range = chunk_range(g - c * params.chunks);
    var s = 0.0;
    for (var e = range.x + lid; e < range.y; e = e + WG) {
        s = s + x_load(element(c, e));
    }
    let sum = workgroup_sum(lid, s);
    let mu = sum / f32(range.y - range.x);
    var q = 0.0;
    for (var e = range.x + lid; e < range.y; e = e + WG) {
        let d = x_load(element(c, e)) - mu;
        q = q + d * d;
    }
    let m2 = workgroup_sum(lid, q);
    if (lid == 0u) {
        partials[2u * g] = sum;
        partials[2u * g + 1u] = m2;
    }
}

var<workgroup> tracked_lo: u32;
var<workgroup> tracked_hi: u32;

// One workgroup: per channel, the chunks combined in chunk order into the mean and the biased
// variance, written as [mean | invstd]; with `update_running`, the pending running statistics
// take this batch (the unbiased variance, PyTorch's momentum or, with `cumulative`, the factor
// 1 / num_batches_tracked after its increment), and num_batches_tracked counts it.
@compute @workgroup_size(WG)
fn batchnorm_stats_final(@builtin(local_invocation_index) lid: u32) {
    let channels = params.channels;
    let m = f32(per_channel());
    let r = params.running_offset;
    let at = r + 2u * channels;
    if (lid == 0u && params.update_running != 0u) {
        tracked_lo = pending[at];
        tracked_hi = pending[at + 1u];
    }
    // Every thread has the count before thread 0 writes the next one.
    let lo = workgroupUniformLoad(&tracked_lo);
    let hi = workgroupUniformLoad(&tracked_hi);
    let next_lo = lo + 1u;
    let next_hi = hi + select(0u, 1u, next_lo == 0u);
    var factor = params.momentum;
    if (params.cumulative != 0u) {
        factor = 1.0 / (f32(next_hi) * 4294967296.0 + f32(next_lo));
    }
    for (var c = lid; c < channels; c = c + WG) {
        var sum = 0.0;
        for (var j = 0u; j < params.chunks; j = j + 1u) {
            sum = sum + partials[2u * (c * params.chunks + j)];
        }
        let mean = sum / m;
        var m2 = 0.0;
        for (var j = 0u; j < params.chunks; j = j + 1u) {
            let p = 2u * (c * params.chunks + j);
            let range = chunk_range(j);
            let n_j = f32(range.y - range.x);
            let d = partials[p] / n_j - mean;
            m2 = m2 + (partials[p + 1u] + n_j * d * d);
        }
        stats_out_store(c, mean);
        stats_out_store(channels + c, 1.0 / sqrt(m2 / m + params.eps));
        if (params.update_running != 0u) {
            let unbiased = m2 / (m - 1.0);
            let old_mean = bitcast<f32>(pending[r + c]);
            let old_var = bitcast<f32>(pending[r + channels + c]);
            pending[r + c] = bitcast<u32>(factor * mean + (1.0 - factor) * old_mean);
            pending[r + channels + c] = bitcast<u32>(factor * unbiased + (1.0 - factor) * old_var);
        }
    }
    if (lid == 0u && params.update_running != 0u) {
        pending[at] = next_lo;
        pending[at + 1u] = next_hi;
    }
}

// ---- forward: normalisation (training and eval) ----------------------------------------------

// The BatchNorm's value at i as stored in the output's storage.
fn bn_stored(i: u32) -> f32 {
    let c = channel_of(i);
    return stored(bn_value(i, c, channel_stats(c)));
}

fn bn_output(i: u32) -> f32 {
    return activation(bn_stored(i));
}

// One thread per element pair (`#map`): a packed word is written whole by one thread.
#map batchnorm_apply: y = bn_output(i)
// A ReLU or GELU layer after the BatchNorm, in the same kernel: its input (the BatchNorm's
// output, as the separate kernel writes it) and its output (as the activation's kernel would
// compute it from that input).
#map batchnorm_apply_act: pre = bn_stored(i); y = bn_output(i)

// ---- backward ---------------------------------------------------------------------------------

// One workgroup per (channel, chunk): Σ g and Σ g·x̂ over the chunk (g the output gradient,
// through the fused activation's backward when there is one), into partials.
@compute @workgroup_size(WG)
fn batchnorm_backward_partial(#workgroup_builtins) {
    let g = workgroup_index(wid, nwg);
    if (g >= params.channels * params.chunks) {
        return; // whole workgroup
    }
    let c = g / params.chunks;
    let range = chunk_range(g - c * params.chunks);
    let st = saved_stats(c);
    var sg = 0.0;
    var sgx = 0.0;
    for (var e = range.x + lid; e < range.y; e = e + WG) {
        let i = element(c, e);
        let grad = bn_grad(i, c, st);
        sg = sg + grad;
        sgx = sgx + grad * x_hat(i, st);
    }
    let total_g = workgroup_sum(lid, sg);
    let total_gx = workgroup_sum(lid, sgx);
    if (lid == 0u) {
        partials[2u * g] = total_g;
        partials[2u * g + 1u] = total_gx;
    }
}

// One thread per channel: the chunks' sums in chunk order; dbias += Σ g, dweight += Σ g·x̂, and
// the input gradient's coefficients [mean(g) | mean(g·x̂)].
@compute @workgroup_size(64)
fn batchnorm_backward_final(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let c = thread_index(gid, nwg, 64u);
    if (c >= params.channels) {
        return;
    }
    var sg = 0.0;
    var sgx = 0.0;
    for (var j = 0u; j < params.chunks; j = j + 1u) {
        let p = 2u * (c * params.chunks + j);
        sg = sg + partials[p];
        sgx = sgx + partials[p + 1u];
    }
    if (params.has_dweight != 0u) {
        dweight_store(c, dweight_load(c) + sgx);
    }
    if (params.has_dbias != 0u) {
        dbias_store(c, dbias_load(c) + sg);
    }
    let m = f32(per_channel());
    stats_out_store(c, sg / m);
    stats_out_store(params.channels + c, sgx / m);
}

// dx = (g − mean(g) − x̂ · mean(g·x̂)) · invstd · weight, one thread per element pair.
fn bn_dx(i: u32) -> f32 {
    let c = channel_of(i);
    let st = saved_stats(c);
    var v = (bn_grad(i, c, st) - coefs_load(c) - x_hat(i, st) * coefs_load(params.channels + c)) * st.invstd;
    if (params.has_weight != 0u) {
        v = v * weight_load(c);
    }
    return v;
}

#map batchnorm_backward_dx: dx = bn_dx(i)
