// Fused losses in f32, forward and backward together: softmax cross-entropy (label smoothing
// as PyTorch's; the gradient seeded by the GradScaler's scale), mean squared error, and the
// accuracy count.
// Deterministic: per-row / per-workgroup partial losses are reduced in a fixed tree order by
// one workgroup (no float atomics), so the same inputs give bit-identical losses.

#tensor logits 1 read
#tensor grad 2 read_write
#tensor loss 3 read_write
#tensor pred 4 read
// The mse target is `wanted`: `target` is a WGSL reserved word.
#tensor wanted 5 read
// Raw buffers, what the kernels write first.
// correct[0] += rows whose argmax is the label.
@group(0) @binding(9) var<storage, read_write> correct: array<atomic<u32>>;
// Per-row (cross-entropy) or per-workgroup (mse) partial losses, reduced by mean_partials.
@group(0) @binding(8) var<storage, read_write> partials: array<f32>;
// Class index of each row (u32).
@group(0) @binding(6) var<storage, read> labels: array<u32>;
// seed[0]: the loss scale the gradient is multiplied by (the GradScaler's scale, or 1).
@group(0) @binding(7) var<storage, read> seed: array<f32>;

#struct Params // src/ops/loss.rs
@group(0) @binding(0) var<uniform> params: Params;

const WG: u32 = 256u;
const ROW_WG: u32 = 64u;
const F32_LOWEST: f32 = -3.4028234663852886e38;

// ---- workgroup reductions (fixed tree order) ----------------------------------------------
// Whole workgroups (WG threads: mean_partials, mse) reduce with workgroup_sum; a row's
// workgroup (ROW_WG threads: cross-entropy) with tree_sum / tree_max over ROW_WG.

#include workgroup_reduce

var<workgroup> row_has_nan: atomic<u32>;
var<workgroup> group_hits: atomic<u32>;

// ---- softmax cross-entropy ------------------------------------------------------------------

struct RowStats {
    max: f32,    // max logit of the row
    sum: f32,    // sum of exp(logit - max)
    label: u32,  // label clamped into [0, C)
    bad: bool,   // NaN logit or label out of range: the row's loss and gradient are NaN
    spread: f32, // with label smoothing: sum of (max - logit), so -sum log p = C log(sum) + spread
}

// Max-subtracted log-sum-exp statistics of one row, computed by the whole workgroup.
fn row_stats(row: u32, lid: u32) -> RowStats {
    let base = row * params.classes;
    var m = F32_LOWEST;
    var seen_nan = false;
    for (var j = lid; j < params.classes; j = j + ROW_WG) {
        let v = logits_load(base + j);
        seen_nan = seen_nan || is_nan(v);
        m = max(m, v);
    }
    if (seen_nan) {
        atomicOr(&row_has_nan, 1u);
    }
    // NaN is tracked apart (row_has_nan): max() of NaN is indeterminate in WGSL.
    let row_m = tree_max(lid, m, ROW_WG);
    var s = 0.0;
    for (var j = lid; j < params.classes; j = j + ROW_WG) {
        s = s + exp(logits_load(base + j) - row_m);
    }
    let row_s = tree_sum(lid, s, ROW_WG);
    var spread = 0.0;
    if (params.label_smoothing != 0.0) {
        // Every term >= 0: no cancellation.
        var d = 0.0;
        for (var j = lid; j < params.classes; j = j + ROW_WG) {
            d = d + (row_m - logits_load(base + j));
        }
        spread = tree_sum(lid, d, ROW_WG);
    }
    let raw_label = labels[row];
    let label = min(raw_label, params.classes - 1u);
    let bad = atomicLoad(&row_has_nan) != 0u || raw_label >= params.classes;
    return RowStats(row_m, row_s, label, bad, spread);
}

// -log softmax(x)[label] = log(sum) + (max - x[label]); log(sum) >= 0 since sum >= 1. With
// label smoothing e (PyTorch's CrossEntropyLoss(label_smoothing=e)):
// (1 - e) * nll + e / C * (-sum_j log softmax(x)[j]), the second term C log(sum) + spread.
fn row_loss(row: u32, st: RowStats) -> f32 {
    if (st.bad) {
        return quiet_nan();
    }
    let x_label = logits_load(row * params.classes + st.label);
    let nll = log(st.sum) + (st.max - x_label);
    if (params.label_smoothing == 0.0) {
        return nll;
    }
    let e = params.label_smoothing;
    let spread_nll = f32(params.classes) * log(st.sum) + st.spread;
    return (1.0 - e) * nll + (e / f32(params.classes)) * spread_nll;
}

// The row's statistics, with its loss written to partials[row] (thread 0).
fn row_forward(row: u32, lid: u32) -> RowStats {
    let st = row_stats(row, lid);
    if (lid == 0u) {
        partials[row] = row_loss(row, st);
    }
    return st;
}

@compute @workgroup_size(ROW_WG)
fn cross_entropy_rows(#workgroup_builtins) {
    let row = workgroup_index(wid, nwg);
    if (row >= params.rows) {
        return; // whole workgroup
    }
    row_forward(row, lid);
}

// d loss / d logit_j = (softmax_j - target_j) * grad_scale * seed[0], the target the one-hot
// label, or with label smoothing e: (1 - e) [j == label] + e / C.
fn ce_grad(row: u32, j: u32, st: RowStats, seed_scale: f32) -> f32 {
    if (st.bad) {
        return quiet_nan();
    }
    let p = exp(logits_load(row * params.classes + j) - st.max) / st.sum;
    var wanted_p = select(0.0, 1.0, j == st.label);
    if (params.label_smoothing != 0.0) {
        let e = params.label_smoothing;
        wanted_p = select(0.0, 1.0 - e, j == st.label) + e / f32(params.classes);
    }
    return ((p - wanted_p) * params.grad_scale) * seed_scale;
}

// Forward and backward of a row; the gradient is stored by row slots (prelude's `row_slot`:
// whole words of a packed gradient; a lone slot's second value is its first again, unstored).
@compute @workgroup_size(ROW_WG)
fn cross_entropy_rows_grad(#workgroup_builtins) {
    let row = workgroup_index(wid, nwg);
    if (row >= params.rows) {
        return; // whole workgroup
    }
    let st = row_forward(row, lid);
    let seed_scale = seed[0];
    let start = row * params.classes;
    for (var k = lid; k < row_slots(start, params.classes); k = k + ROW_WG) {
        let slot = row_slot(start, params.classes, k);
        let g = ce_grad(row, slot.x - start, st, seed_scale);
        grad_store_slot(slot, vec2<f32>(g, ce_grad(row, slot.x + slot.y - 1u - start, st, seed_scale)));
    }
}

// One workgroup: loss[0] = loss_scale * sum of partials[0..n], in a fixed order.
@compute @workgroup_size(WG)
fn mean_partials(@builtin(local_invocation_index) lid: u32) {
    let total = sum_of_partials(lid, params.n);
    if (lid == 0u) {
        loss_store(0u, total * params.loss_scale);
    }
}

// ---- mean squared error ---------------------------------------------------------------------

fn mse_partial_out(lid: u32, g: u32, acc: f32) {
    let total = workgroup_sum(lid, acc);
    if (lid == 0u) {
        if (params.groups == 1u) {
            loss_store(0u, total * params.loss_scale);
        } else {
            partials[g] = total;
        }
    }
}

// pred - target at element pair (i, i + 1), or at i alone (y = 0) when i is the last element.
fn mse_diff(i: u32) -> vec2<f32> {
    if (i + 1u < params.n) {
        return pred_load2(i) - wanted_load2(i);
    }
    return vec2<f32>(pred_load(i) - wanted_load(i), 0.0);
}

// acc plus the squares of mse_diff(i), in the same order for pairs and for a last element.
fn mse_add_squares(acc: f32, d: vec2<f32>, i: u32) -> f32 {
    if (i + 1u < params.n) {
        return acc + (d.x * d.x + d.y * d.y);
    }
    return acc + d.x * d.x;
}

// First pass: workgroup g sums (pred - target)^2 over element pairs g*WG + lid, + groups*WG, ...
@compute @workgroup_size(WG)
fn mse_partials(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let lid = lid3.x;
    let pairs = params.n / 2u + (params.n & 1u);
    var acc = 0.0;
    for (var p = wid.x * WG + lid; p < pairs; p = p + params.groups * WG) {
        acc = mse_add_squares(acc, mse_diff(2u * p), 2u * p);
    }
    mse_partial_out(lid, wid.x, acc);
}

// Same, also writing grad = 2 (pred - target) / n * multiplier * seed[0].
@compute @workgroup_size(WG)
fn mse_partials_grad(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let seed_scale = seed[0];
    let lid = lid3.x;
    let pairs = params.n / 2u + (params.n & 1u);
    var acc = 0.0;
    for (var p = wid.x * WG + lid; p < pairs; p = p + params.groups * WG) {
        let i = 2u * p;
        let d = mse_diff(i);
        acc = mse_add_squares(acc, d, i);
        if (i + 1u < params.n) {
            grad_store2(i, (d * params.grad_scale) * seed_scale);
        } else {
            grad_store(i, (d.x * params.grad_scale) * seed_scale);
        }
    }
    mse_partial_out(lid, wid.x, acc);
}

// ---- accuracy -------------------------------------------------------------------------------

// One thread per row: argmax with ties to the first maximum and NaN as the largest value
// (torch.argmax), compared with the label; one atomic add per workgroup.
@compute @workgroup_size(WG)
fn count_correct(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(local_invocation_id) lid3: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let row = thread_index(gid, nwg, WG);
    if (row < params.rows) {
        let base = row * params.classes;
        var best = logits_load(base);
        var best_j = 0u;
        var best_is_nan = is_nan(best);
        for (var j = 1u; j < params.classes && !best_is_nan; j = j + 1u) {
            let v = logits_load(base + j);
            if (is_nan(v)) {
                best_j = j;
                best_is_nan = true;
            } else if (v > best) {
                best = v;
                best_j = j;
            }
        }
        if (best_j == labels[row]) {
            atomicAdd(&group_hits, 1u);
        }
    }
    workgroupBarrier();
    if (lid3.x == 0u) {
        let hits = atomicLoad(&group_hits);
        if (hits > 0u) {
            atomicAdd(&correct[0], hits);
        }
    }
}
