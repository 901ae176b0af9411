// Fused causal attention, backward (FlashAttention-2's split, SIMT body). Nothing T x T is
// stored: every kernel recomputes the probabilities it needs from q, k and the forward's row
// log-sum-exp, P_ij = exp(scale * q_i·k_j - lse_i) for j <= i, with the forward's dropout
// mask (element (bh * T + i) * T + j, see flash_common).
//
//   flash_backward_delta: delta_i = Σ_d dy_i[d] * y_i[d] (= Σ_j P_ij dP_ij, dropout included)
//   flash_backward_dkv:   one thread per key j of a key/value head, over the query heads
//                         of its group (grouped-query attention):
//                         dv_j = Σ_h Σ_i Pd_ij dy_i,
//                         dk_j = Σ_h Σ_i dS_ij q_i, dS_ij = scale * P_ij (dP_ij - delta_i),
//                         dP_ij = dropout(dy_i·v_j)
//   flash_backward_dq:    one thread per query i: dq_i = Σ_j dS_ij k_j
//
// Each gradient element has one writer and sums in a fixed order (h, then i or j ascending):
// no atomics on floats, the same bits every run. dq, dk and dv land where q, k and v came
// from (flash_common), in their storage; where dk and dv are one tensor (nanoGPT's packed
// dqkv: SHARED_KV_GRADS) both are written through dk's binding, which WebGPU requires of
// one writable range. A NaN lse (a poisoned forward row) makes that row's contributions NaN,
// so overflow always reaches the GradScaler.

#tensor q 1 read
#tensor k 8 read
#tensor v 9 read
#tensor y 2 read
#tensor lse 3 read
#tensor dy 5 read
#tensor delta 6 read_write
#tensor dq 7 read_write
#tensor dk 10 read_write
#tensor dv 11 read_write
#include logit_class
#include flash_common
#include flash_tiles

// a_tile and b_tile (flash_tiles) hold rows of q and dy (dkv) or of k and v (dq); the dkv
// kernel's query rows come with their lse and delta.
var<workgroup> lse_tile: array<f32, TILE>;
var<workgroup> delta_tile: array<f32, TILE>;

// A gradient row at element `at` of dq, dk or dv: a word pair where store_width says.
fn store_dq(at: u32, g: ptr<function, array<f32, HS>>) {
    for (var d = 0u; d < HS; d += store_width(at + d, d)) {
        if (store_width(at + d, d) == 2u) {
            dq_store2(at + d, vec2<f32>((*g)[d], (*g)[d + 1u]));
        } else {
            dq_store(at + d, (*g)[d]);
        }
    }
}

fn store_dk(at: u32, g: ptr<function, array<f32, HS>>) {
    for (var d = 0u; d < HS; d += store_width(at + d, d)) {
        if (store_width(at + d, d) == 2u) {
            dk_store2(at + d, vec2<f32>((*g)[d], (*g)[d + 1u]));
        } else {
            dk_store(at + d, (*g)[d]);
        }
    }
}

fn store_dv(at: u32, g: ptr<function, array<f32, HS>>) {
#if SHARED_KV_GRADS
    store_dk(at, g);
#else
    for (var d = 0u; d < HS; d += store_width(at + d, d)) {
        if (store_width(at + d, d) == 2u) {
            dv_store2(at + d, vec2<f32>((*g)[d], (*g)[d + 1u]));
        } else {
            dv_store(at + d, (*g)[d]);
        }
    }
#end
}

// ---- delta ------------------------------------------------------------------------------------

@compute @workgroup_size(WG)
fn flash_backward_delta(#workgroup_builtins) {
    let p = place_of(wid, nwg);
    let i = p.first + lid;
    if (p.bh >= params.batch_heads || i >= params.t) {
        return;
    }
    let at = out_at(p, i);
    var acc = 0.0;
    for (var d = 0u; d < HS; d++) {
        acc += dy_load(at + d) * y_load(at + d);
    }
    delta_store(p.bh * params.t + i, acc);
}

// ---- dk, dv: one thread per key ------------------------------------------------------------------

// The staged tensors are keys, k (0) and v (1), or query rows, q (0) and dy (1).
fn tile_source(p: Place, keys: bool, which: u32, r: u32, d: u32) -> f32 {
    if (keys) {
        return qkv_load(p, r, 1u + which, d);
    }
    if (which == 0u) {
        return qkv_load(p, r, 0u, d);
    }
    return dy_load(out_at(p, r) + d);
}

// The two products of one (query row, key) pair, q·k and dy·v, in channel order: this
// thread holds x and y (k and v, or q and dy), the staged side row r0 + rr.
fn pair_dots(p: Place, keys: bool, x: ptr<function, array<f32, HS>>, y: ptr<function, array<f32, HS>>, r0: u32, rr: u32) -> vec2<f32> {
    var s = vec2<f32>(0.0, 0.0);
    for (var d = 0u; d < HS; d++) {
        s.x += (*x)[d] * staged(p, keys, 0u, r0, rr, d);
        s.y += (*y)[d] * staged(p, keys, 1u, r0, rr, d);
    }
    return s;
}

// The dk/dv kernel's two products, q·k and dy·v, of staged query row i0 + ii and this
// thread's key: pair_dots with k read from its buffer at `k_at` rather than held. Four
// head-sized rows live (k, v, dk, dv) fill RDNA3's 256 VGPRs and spill; three fit. The values
// and the order are pair_dots', so the bits are too.
fn key_dots(p: Place, k_at: u32, v: ptr<function, array<f32, HS>>, i0: u32, ii: u32) -> vec2<f32> {
    var s = vec2<f32>(0.0, 0.0);
    for (var d = 0u; d < HS; d++) {
        s.x += k_load(k_at + d) * staged(p, false, 0u, i0, ii, d);
        s.y += (*v)[d] * staged(p, false, 1u, i0, ii, d);
    }
    return s;
}

// acc += a · (staged tensor `which`, row r0 + rr), channel by channel.
fn add_scaled(acc: ptr<function, array<f32, HS>>, a: f32, p: Place, keys: bool, which: u32, r0: u32, rr: u32) {
    for (var d = 0u; d < HS; d++) {
        (*acc)[d] += a * staged(p, keys, which, r0, rr, d);
    }
}

fn row_lse(p: Place, i0: u32, ii: u32) -> f32 {
    if (TILED) {
        return lse_tile[ii];
    }
    return lse_load(p.bh * params.t + i0 + ii);
}

fn row_delta(p: Place, i0: u32, ii: u32) -> f32 {
    if (TILED) {
        return delta_tile[ii];
    }
    return delta_load(p.bh * params.t + i0 + ii);
}

// Query rows [i0, i0 + TILE): q and dy (load_tiles), then their lse and delta, into
// workgroup memory (zeros past T).
fn load_query_tile(p: Place, i0: u32, tid: u32) {
    load_tiles(p, false, i0, tid);
    for (var x = tid; x < TILE; x += WG) {
        var l = 0.0;
        var dl = 0.0;
        if (i0 + x < params.t) {
            l = lse_load(p.bh * params.t + i0 + x);
            dl = delta_load(p.bh * params.t + i0 + x);
        }
        lse_tile[x] = l;
        delta_tile[x] = dl;
    }
}

// Query rows i0 + ii, ii < n, for key j (every row here has i >= j).
fn dkv_tile(
    p: Place,
    k_at: u32,
    v: ptr<function, array<f32, HS>>,
    dk: ptr<function, array<f32, HS>>,
    dv: ptr<function, array<f32, HS>>,
    mask: ptr<function, Mask>,
    j: u32,
    i0: u32,
    first: u32,
    n: u32,
) {
    for (var ii = first; ii < n; ii++) {
        let s = key_dots(p, k_at, v, i0, ii);
        let prob = exp(params.scale * s.x - row_lse(p, i0, ii));
        let e = (p.bh * params.t + i0 + ii) * params.t + j;
        let pd = mask_apply(mask, e, prob);
        let dp = mask_apply(mask, e, s.y);
        let ds = params.scale * (prob * (dp - row_delta(p, i0, ii)));
        add_scaled(dv, pd, p, false, 1u, i0, ii);
        add_scaled(dk, ds, p, false, 0u, i0, ii);
    }
}

// dk and dv of key kv.first + tid of a key/value head: for each query head of its group in
// order, query rows from its own on, a tile at a time.
@compute @workgroup_size(WG)
fn flash_backward_dkv(#workgroup_builtins) {
    // This thread's key: v and the gradients' accumulators (zeros); k stays in its buffer.
    var v: array<f32, HS>;
    var dk: array<f32, HS>;
    var dv: array<f32, HS>;
    var mask = mask_new();
    let kv = kv_place_of(wid, nwg);
    if (kv.bh >= params.batch_heads) {
        return;
    }
    let j = kv.first + lid;
    let valid = j < params.t;
    let k_at = qkv_at(kv, j, 1u);
    if (valid) {
        v = qkv_row(kv, j, 2u);
    }
    for (var g = 0u; g < params.group; g++) {
        let p = group_head(kv, g);
        // Query rows from the tile holding this block's first key (rows before it see no
        // key here), tiles aligned to TILE from 0: uniform across the group.
        for (var i0 = (p.first / TILE) * TILE; i0 < params.t; i0 += TILE) {
            if (TILED) {
                workgroupBarrier();
                load_query_tile(p, i0, lid);
                workgroupBarrier();
            }
            if (valid && i0 + TILE > j) {
                // Rows i >= j of this tile, and below T.
                let first = max(j, i0) - i0;
                let n = min(TILE, params.t - i0);
                dkv_tile(p, k_at, &v, &dk, &dv, &mask, j, i0, first, n);
            }
        }
    }
    if (!valid) {
        return;
    }
    store_dk(k_at, &dk);
    store_dv(qkv_at(kv, j, 2u), &dv);
}

// ---- dq: one thread per query row ----------------------------------------------------------------

// dq of query row p.first + tid: keys up to it, a tile at a time.
@compute @workgroup_size(WG)
fn flash_backward_dq(#workgroup_builtins) {
    // This thread's query row: q, dy, its lse and delta, and dq's accumulator (zeros).
    var lse_i = 0.0;
    var delta_i = 0.0;
    var q: array<f32, HS>;
    var g: array<f32, HS>;
    var dq: array<f32, HS>;
    let p = place_of(wid, nwg);
    if (p.bh >= params.batch_heads) {
        return;
    }
    let i = p.first + lid;
    let valid = i < params.t;
    let kend = min(params.t, p.first + WG);
    if (valid) {
        q = qkv_row(p, i, 0u);
        let gat = out_at(p, i);
        for (var d = 0u; d < HS; d++) {
            g[d] = dy_load(gat + d);
        }
        lse_i = lse_load(p.bh * params.t + i);
        delta_i = delta_load(p.bh * params.t + i);
    }
    var mask = mask_new();
    for (var j0 = 0u; j0 < kend; j0 += TILE) {
        stage_tiles(p, true, j0, lid);
        if (valid && j0 <= i) {
            dq_tile(p, &q, &g, &dq, &mask, i, lse_i, delta_i, j0, min(TILE, i + 1u - j0));
        }
    }
    if (valid) {
        store_dq(qkv_at(p, i, 0u), &dq);
    }
}

// Keys j0 + jj, jj < n (all <= i), for query row i.
fn dq_tile(
    p: Place,
    q: ptr<function, array<f32, HS>>,
    g: ptr<function, array<f32, HS>>,
    dq: ptr<function, array<f32, HS>>,
    mask: ptr<function, Mask>,
    i: u32,
    lse_i: f32,
    delta_i: f32,
    j0: u32,
    n: u32,
) {
    let e_row = (p.bh * params.t + i) * params.t + j0;
    for (var jj = 0u; jj < n; jj++) {
        let s = pair_dots(p, true, q, g, j0, jj);
        let prob = exp(params.scale * s.x - lse_i);
        let dp = mask_apply(mask, e_row + jj, s.y);
        let ds = params.scale * (prob * (dp - delta_i));
        add_scaled(dq, ds, p, true, 0u, j0, jj);
    }
}
