// Causal softmax for attention, forward and backward, in f32 (autocast's fp32 list).
//
// Rows are the [B * nh * T] rows of S [B, nh, T, T]; row r is query i = r % T, and only
// keys j <= i take part (the causal mask). One workgroup per row, WG threads; the row max
// and sums are reduced in a fixed tree order through workgroup memory (no atomics), so the
// same inputs give the same bits every run.
//
// forward:  p[r, j] = exp(x_j - max) / Σ exp(x_j - max), x_j = scale * s[r, j], for j <= i;
//           p = 0 exactly for j > i; pd = dropout(p) (attention dropout, same mask function
//           as shaders/dropout.wgsl, element index r * T + j), stored in pd's storage.
// backward: dp = dropout(dpd) with the same mask; ds = scale * p * (dp - Σ_j p dp) for
//           j <= i, 0 exactly for j > i; stored in ds's storage.
//
// Non-finite inputs follow PyTorch's masked_fill(-inf) + softmax: an unmasked NaN or +inf
// logit, or a row whose logits are all -inf, makes the row's unmasked p NaN; a -inf logit
// alone gives p = 0. In the backward an inf or NaN of dpd anywhere in the row, masked
// entries included (PyTorch's row sum multiplies them by p = 0: 0 * inf = NaN), makes the
// row's unmasked ds NaN, so overflow always reaches the GradScaler.
//
// Two bodies of each kernel: softmax_forward/backward run one workgroup per row (GPUs);
// the *_rowwise bodies run one invocation per row with no barriers (CPU adapters, where a
// barrier is a context switch). A rowwise body keeps the workgroup body's 64 strided
// partial sums in an array and combines them in tree_sum's order, and computes every element
// the same way, so both give the same bits.
//
// Elements are visited as word pairs (e, e + 1), e even, of the flat index e = r * T + j, so
// packed 16-bit outputs are written a whole word at a time even when T is odd (a pair that
// straddles two rows writes only its own element, atomically).

#tensor s 1 read
#tensor p 2 read_write
#tensor pd 3 read_write
#tensor dpd 4 read
#tensor ds 5 read_write
// DropoutState: [seed_lo, seed_hi, counter_lo, counter_hi, training, 0, 0, 0]. Only read when
// FLAG_DROPOUT is set (otherwise another read-only tensor stands in for the binding).
@group(0) @binding(6) var<storage, read> dropout_state: array<u32>;
#include logit_class

#struct Params // src/ops/attention.rs
@group(0) @binding(0) var<uniform> params: Params;

const FLAG_DROPOUT: u32 = 1u;
const WG: u32 = 64u;
var<workgroup> red: array<f32, WG>;
var<workgroup> red_flags: array<u32, WG>;

// Fixed-order tree reductions over the workgroup; every thread gets the result.
fn tree_max(tid: u32, v: f32) -> f32 {
    workgroupBarrier();
    red[tid] = v;
    workgroupBarrier();
    for (var st = WG / 2u; st > 0u; st = st >> 1u) {
        if (tid < st) {
            red[tid] = max(red[tid], red[tid + st]);
        }
        workgroupBarrier();
    }
    return red[0];
}

fn tree_sum(tid: u32, v: f32) -> f32 {
    workgroupBarrier();
    red[tid] = v;
    workgroupBarrier();
    for (var st = WG / 2u; st > 0u; st = st >> 1u) {
        if (tid < st) {
            red[tid] = red[tid] + red[tid + st];
        }
        workgroupBarrier();
    }
    return red[0];
}

// tree_sum's combination, over the 64 partial sums of one invocation (rowwise bodies).
fn tree_sum_private(part: ptr<function, array<f32, WG>>) -> f32 {
    for (var st = WG / 2u; st > 0u; st = st >> 1u) {
        for (var l = 0u; l < st; l++) {
            (*part)[l] = (*part)[l] + (*part)[l + st];
        }
    }
    return (*part)[0];
}

fn tree_or(tid: u32, v: u32) -> u32 {
    workgroupBarrier();
    red_flags[tid] = v;
    workgroupBarrier();
    for (var st = WG / 2u; st > 0u; st = st >> 1u) {
        if (tid < st) {
            red_flags[tid] = red_flags[tid] | red_flags[tid + st];
        }
        workgroupBarrier();
    }
    return red_flags[0];
}

// Attention dropout of this dispatch: on when the flag is set and the training word is 1;
// then the state words (zeros otherwise: the buffer is then unread).
struct Dropout {
    enabled: bool,
    state: vec4<u32>,
}

fn dropout_of() -> Dropout {
    if ((params.flags & FLAG_DROPOUT) == 0u || params.threshold == 0u || dropout_state[4] == 0u) {
        return Dropout(false, vec4<u32>(0u));
    }
    return Dropout(true, vec4<u32>(dropout_state[0], dropout_state[1], dropout_state[2], dropout_state[3]));
}

// Keep decisions of the pair (e, e + 1), e even; all kept when dropout is off.
fn keep_pair(dr: Dropout, e: u32) -> vec2<bool> {
    if (!dr.enabled) {
        return vec2<bool>(true, true);
    }
    return dropout_keep2(dr.state, params.layer, e, params.threshold);
}

fn drop(dr: Dropout, v: f32, keep: bool) -> f32 {
    if (!dr.enabled) {
        return v;
    }
    return dropout_apply(v, keep, params.drop_scale);
}

// Row r's elements [base, end) of the flat [B * nh * T, T] scores, and its last unmasked one.
struct CausalRow {
    base: u32,
    last: u32,
    end: u32,
}

fn causal_row(r: u32) -> CausalRow {
    let base = r * params.t;
    return CausalRow(base, base + r % params.t, base + params.t);
}

// Row of this workgroup (rows past 65535 fold into y); rows >= params.rows are padding.
fn row_of(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.x + wid.y * nwg.x;
}

// ---- forward ------------------------------------------------------------------------------

// p of element j <= i given the row max and sum (finite rows), before dropout.
fn prob(x: f32, mx: f32, sum: f32) -> f32 {
    if (logit_class(x) == 1u) {
        return 0.0;
    }
    return exp(x - mx) / sum;
}

// p of element el of `row` (0 past its causal end or outside it).
fn p_of(el: u32, row: CausalRow, poisoned: bool, mx: f32, sum: f32) -> f32 {
    var v = 0.0;
    if (el >= row.base && el <= row.last) {
        if (poisoned) {
            v = nan_of(0u);
        } else {
            v = prob(params.scale * s_load(el), mx, sum);
        }
    }
    return v;
}

// p and pd of the word pair (e, e + 1) of `row`, given the row's max and sum; a pair that
// straddles rows writes only its own element. The pair is built whole, not written a
// component at a time in a loop: FXC (DX12's default compiler) must unroll every loop
// around a dynamically indexed write, and cannot unroll the caller's loop over the row.
fn write_p_pair(e: u32, row: CausalRow, poisoned: bool, mx: f32, sum: f32, dr: Dropout) {
    let pv = vec2<f32>(p_of(e, row, poisoned, mx, sum), p_of(e + 1u, row, poisoned, mx, sum));
    let keep = keep_pair(dr, e);
    let dv = vec2<f32>(drop(dr, pv.x, keep.x), drop(dr, pv.y, keep.y));
    if (e >= row.base && e + 1u < row.end) {
        p_store2(e, pv);
        pd_store2(e, dv);
    } else if (e >= row.base) {
        p_store(e, pv.x);
        pd_store(e, dv.x);
    } else {
        p_store(e + 1u, pv.y);
        pd_store(e + 1u, dv.y);
    }
}

// One thread's share of the forward's passes 1 and 2: the elements first, first + WG, ...,
// up to `last` (the workgroup body's thread l has first = base + l).

// Max over the finite scaled logits, and the classes seen (bit 0: some finite logit, bit 1:
// some NaN or +inf).
struct RowMax {
    mx: f32,
    seen: u32,
}

fn thread_max(first: u32, last: u32) -> RowMax {
    var m = RowMax(-F32_MAX, 0u);
    for (var e = first; e <= last; e += WG) {
        let x = params.scale * s_load(e);
        let c = logit_class(x);
        if (c == 0u) {
            m.mx = max(m.mx, x);
            m.seen = m.seen | 1u;
        } else if (c == 2u) {
            m.seen = m.seen | 2u;
        }
    }
    return m;
}

// Σ exp(x - mx) over the finite scaled logits, in element order.
fn thread_exp_sum(first: u32, last: u32, mx: f32) -> f32 {
    var acc = 0.0;
    for (var e = first; e <= last; e += WG) {
        let x = params.scale * s_load(e);
        if (logit_class(x) == 0u) {
            acc += exp(x - mx);
        }
    }
    return acc;
}

@compute @workgroup_size(WG)
fn softmax_forward(#workgroup_builtins) {
    let r = row_of(wid, nwg);
    if (r >= params.rows) {
        return;
    }
    let row = causal_row(r);

    // Pass 1: the row's max and classes.
    let m = thread_max(row.base + lid, row.last);
    let mx = tree_max(lid, m.mx);
    let poisoned = tree_or(lid, m.seen) != 1u; // a NaN/+inf logit, or no finite one (all -inf)

    // Pass 2: the sum of exponentials, each thread over its own elements in order.
    let sum = tree_sum(lid, thread_exp_sum(row.base + lid, row.last, mx));

    // Pass 3: write p and pd over the word pairs of the whole row.
    let dr = dropout_of();
    for (var e = (row.base & ~1u) + 2u * lid; e < row.end; e += 2u * WG) {
        write_p_pair(e, row, poisoned, mx, sum, dr);
    }
}

// ---- backward -----------------------------------------------------------------------------

// A partial row sum Σ p·dp, and 1 once a masked dpd is inf or NaN.
struct PartialDot {
    acc: f32,
    bad: u32,
}

// `d` with the word pair (e, e + 1) added, element by element in order.
fn dot_pair(d: PartialDot, e: u32, row: CausalRow, dr: Dropout) -> PartialDot {
    let keep = keep_pair(dr, e);
    var acc = d.acc;
    var bad = d.bad;
    for (var h = 0u; h < 2u; h++) {
        let el = e + h;
        if (el >= row.base && el < row.end) {
            let g = dpd_load(el);
            if (el <= row.last) {
                acc += p_load(el) * drop(dr, g, keep[h]);
            } else if (is_nonfinite(g)) {
                bad = 1u;
            }
        }
    }
    return PartialDot(acc, bad);
}

// ds of element el of `row` (0 outside its causal part), given the row sum.
fn ds_of(el: u32, row: CausalRow, row_dot: f32, dr: Dropout, keep: bool) -> f32 {
    var v = 0.0;
    if (el >= row.base && el <= row.last) {
        let dp = drop(dr, dpd_load(el), keep);
        v = params.scale * (p_load(el) * (dp - row_dot));
    }
    return v;
}

// ds of the word pair (e, e + 1) given the row sum (built whole for FXC: write_p_pair).
fn write_ds_pair(e: u32, row: CausalRow, row_dot: f32, dr: Dropout) {
    let keep = keep_pair(dr, e);
    let dv = vec2<f32>(ds_of(e, row, row_dot, dr, keep.x), ds_of(e + 1u, row, row_dot, dr, keep.y));
    if (e >= row.base && e + 1u < row.end) {
        ds_store2(e, dv);
    } else if (e >= row.base) {
        ds_store(e, dv.x);
    } else {
        ds_store(e + 1u, dv.y);
    }
}

// One thread's share of the backward's pass 1: the word pairs first, first + 2·WG, ...
// (the workgroup body's thread l has first = (base & ~1) + 2l).
fn thread_dot(first: u32, row: CausalRow, dr: Dropout) -> PartialDot {
    var d = PartialDot(0.0, 0u);
    for (var e = first; e < row.end; e += 2u * WG) {
        d = dot_pair(d, e, row, dr);
    }
    return d;
}

@compute @workgroup_size(WG)
fn softmax_backward(#workgroup_builtins) {
    let dr = dropout_of();
    let r = row_of(wid, nwg);
    if (r >= params.rows) {
        return;
    }
    let row = causal_row(r);

    // Pass 1: Σ_{j<=i} p_j dp_j over word pairs, and whether any masked dpd is inf or NaN.
    let d = thread_dot((row.base & ~1u) + 2u * lid, row, dr);
    var row_dot = tree_sum(lid, d.acc);
    if (tree_or(lid, d.bad) != 0u) {
        row_dot = nan_of(0u);
    }

    // Pass 2: ds over the word pairs of the whole row.
    for (var e = (row.base & ~1u) + 2u * lid; e < row.end; e += 2u * WG) {
        write_ds_pair(e, row, row_dot, dr);
    }
}

// ---- rowwise bodies (CPU adapters) --------------------------------------------------------

// Row of this invocation: one per invocation, WG per workgroup (workgroups past 65535 fold
// into y).
fn row_of_invocation(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.x + gid.y * nwg.x * WG;
}

@compute @workgroup_size(WG)
fn softmax_forward_rowwise(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let r = row_of_invocation(gid, nwg);
    if (r >= params.rows) {
        return;
    }
    let row = causal_row(r);

    // The workgroup body's threads in turn: the same partial results, combined in the same
    // order.
    var mx = -F32_MAX;
    var seen = 0u;
    for (var l = 0u; l < WG; l++) {
        let m = thread_max(row.base + l, row.last);
        mx = max(mx, m.mx);
        seen = seen | m.seen;
    }
    let poisoned = seen != 1u;
    var part: array<f32, WG>;
    for (var l = 0u; l < WG; l++) {
        part[l] = thread_exp_sum(row.base + l, row.last, mx);
    }
    let sum = tree_sum_private(&part);

    let dr = dropout_of();
    for (var e = row.base & ~1u; e < row.end; e += 2u) {
        write_p_pair(e, row, poisoned, mx, sum, dr);
    }
}

@compute @workgroup_size(WG)
fn softmax_backward_rowwise(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let dr = dropout_of();
    let r = row_of_invocation(gid, nwg);
    if (r >= params.rows) {
        return;
    }
    let row = causal_row(r);

    // The workgroup body's threads in turn.
    var sums: array<f32, WG>;
    var bad = 0u;
    for (var l = 0u; l < WG; l++) {
        let d = thread_dot((row.base & ~1u) + 2u * l, row, dr);
        sums[l] = d.acc;
        bad = bad | d.bad;
    }
    var row_dot = tree_sum_private(&sums);
    if (bad != 0u) {
        row_dot = nan_of(0u);
    }

    for (var e = row.base & ~1u; e < row.end; e += 2u) {
        write_ds_pair(e, row, row_dot, dr);
    }
}
