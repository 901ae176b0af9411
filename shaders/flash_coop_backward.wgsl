// Fused causal attention, backward, on cooperative matrices (tensor cores): the split of
// shaders/flash_backward.wgsl (its delta kernel runs first) with every product on f16
// fragments accumulated in f32 (shaders/include/flash_coop.wgsl), for native f16 storage
// where tensor cores are used. Per block of BQ query rows and BKV keys, both kernels
// recompute the scores S = Q·Kᵀ and dP = dO·Vᵀ, then in f32 per element
//
//   P_ij = exp(scale * S_ij - lse_i),  Pd_ij = dropout(P_ij),
//   dS_ij / scale = P_ij (dropout(dP_ij) - delta_i)        (j <= i < T; else 0)
//
// with the forward's dropout mask (flash_common), rounded to f16 for the next products:
//
//   flash_coop_dkv: one workgroup per key block, query blocks from its own on:
//                   dv += Pdᵀ·dy, dk += dSᵀ·q; dk is scaled by `scale` once at the end
//   flash_coop_dq:  one workgroup per query block, key blocks up to its last row:
//                   dq += dS·k, scaled at the end
//
// The accumulators are fragments (nothing rescales them) and leave through each subgroup's
// FRAG x FRAG scratch. Every gradient element has one writer and a fixed order: no atomics,
// the same bits every run. A NaN lse (a poisoned forward row) makes its terms NaN, as in the
// SIMT body.

enable wgpu_cooperative_matrix;

#tensor qkv 1 read
#tensor lse 3 read
#tensor dy 5 read
#tensor delta 6 read
#tensor dqkv 7 read_write
#include logit_class
#include flash_common
#include tile_staging
#include flash_coop

const PRODUCTS: u32 = 2u;
// h_tile: the query rows' q and dy (the score products' left operands), the keys' k and v,
// then dropout(P) and dS.
const Q_AT: u32 = 0u;
const DY_AT: u32 = BQ * HSP;
const K_AT: u32 = 2u * BQ * HSP;
const V_AT: u32 = K_AT + BKV * HSP;
const P_AT: u32 = V_AT + BKV * HSP;
const DS_AT: u32 = P_AT + BQ * BKV;
const H_TILE: u32 = DS_AT + BQ * BKV;
// f_tile: the score products' parts, then each subgroup's FRAG x FRAG scratch.
const F_TILE: u32 = max(SPLIT * PRODUCTS * BQ * BKV, SUBGROUPS * FRAG * FRAG);
// Fragments of dk (or dv) per key block and of dq per query block.
const KEY_FRAGS: u32 = (BKV / FRAG) * (HSP / FRAG);
const DQ_JOBS: u32 = (BQ / FRAG) * (HSP / FRAG);
// Score elements per thread: a run along a row (one Philox call per 4 keys).
const PER_THREAD: u32 = (BQ * BKV + THREADS - 1u) / THREADS;

fn coop_source(p: Place, which: u32, r: u32, d: u32) -> f32 {
    if (which == 3u) {
        return dy_load(out_at(p, r) + d);
    }
    return qkv_load(qkv_at(p, r, which) + d);
}

// Query rows [i0, i0 + BQ): q and dy.
fn stage_queries(p: Place, i0: u32, tid: u32) {
    stage_rows(p, 0u, i0, BQ, Q_AT, tid);
    stage_rows(p, 3u, i0, BQ, DY_AT, tid);
}

// Keys [j0, j0 + BKV): k and v.
fn stage_keys(p: Place, j0: u32, tid: u32) {
    stage_rows(p, 1u, j0, BKV, K_AT, tid);
    stage_rows(p, 2u, j0, BKV, V_AT, tid);
}

// dropout(P) and dS / scale of block (i0, j0) into h_tile, from the score products and the
// rows' lse and delta (read from the buffers: a thread's run mostly stays on one row).
fn score_gradients(p: Place, i0: u32, j0: u32, tid: u32, mask: ptr<function, Mask>) {
    for (var k = 0u; k < PER_THREAD; k++) {
        let x = tid * PER_THREAD + k;
        if (x >= BQ * BKV) {
            break;
        }
        let i = i0 + x / BKV;
        let j = j0 + x % BKV;
        var pd = 0.0;
        var ds = 0.0;
        if (i < params.t && j <= i) {
            let row = p.bh * params.t + i;
            let prob = exp(params.scale * score(0u, x) - lse_load(row));
            let e = row * params.t + j;
            pd = mask_apply(mask, e, prob);
            ds = prob * (mask_apply(mask, e, score(1u, x)) - delta_load(row));
        }
        h_tile[P_AT + x] = f16_from_f32(pd);
        h_tile[DS_AT + x] = f16_from_f32(ds);
    }
}

// One accumulator fragment out through subgroup sg's scratch: factor * element (row, d) to
// part `part` (0 q, 1 k, 2 v) of dqkv at position pos0 + row, channel d0 + d.
fn store_fragment(c: FragC, sg: u32, lane: u32, p: Place, part: u32, pos0: u32, d0: u32, factor: f32) {
    let scratch = sg * FRAG * FRAG;
    let out = &f_tile[scratch];
    coopStoreT(c, out, FRAG);
    workgroupBarrier();
    for (var e = lane; e < FRAG * FRAG; e += SUBGROUP) {
        let pos = pos0 + e / FRAG;
        let d = d0 + e % FRAG;
        if (pos < params.t && d < HS) {
            dqkv_store(qkv_at(p, pos, part) + d, factor * f_tile[scratch + e]);
        }
    }
    workgroupBarrier();
}

// dk and dv of the keys [p.first, p.first + BKV). Job u < KEY_FRAGS is a fragment of dv, the
// rest of dk.
@compute @workgroup_size(THREADS)
fn flash_coop_dkv(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
    @builtin(subgroup_id) sg: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    var acc: array<FragC, 2u * KEY_FRAGS / SUBGROUPS>;
    for (var t = 0u; t < 2u * KEY_FRAGS / SUBGROUPS; t++) {
        acc[t] = FragC();
    }
    var mask = mask_new();
    let p = place_of(wid, nwg);
    if (p.bh >= params.batch_heads) {
        return;
    }
    stage_keys(p, p.first, tid);
    // Query blocks from the one holding this block's first key (rows before it see none of
    // its keys), aligned to BQ from 0: uniform across the group.
    for (var i0 = (p.first / BQ) * BQ; i0 < params.t; i0 += BQ) {
        workgroupBarrier();
        stage_queries(p, i0, tid);
        workgroupBarrier();
        score_products(Q_AT, K_AT, sg);
        workgroupBarrier();
        score_gradients(p, i0, p.first, tid, &mask);
        workgroupBarrier();
        for (var t = 0u; t < 2u * KEY_FRAGS / SUBGROUPS; t++) {
            let u = sg + SUBGROUPS * t;
            let g = u / KEY_FRAGS; // 0: dv += Pdᵀ·dy; 1: dk += dSᵀ·q
            let fr = (u % KEY_FRAGS) / (HSP / FRAG);
            let fc = (u % KEY_FRAGS) % (HSP / FRAG);
            let a = P_AT + g * BQ * BKV + fr * FRAG;
            let b = select(Q_AT, DY_AT, g == 0u) + fc * FRAG;
            acc[t] = product_atb(acc[t], a, BKV, b, HSP, BQ / FRAG);
        }
    }
    for (var t = 0u; t < 2u * KEY_FRAGS / SUBGROUPS; t++) {
        let u = sg + SUBGROUPS * t;
        let g = u / KEY_FRAGS;
        let pos0 = p.first + ((u % KEY_FRAGS) / (HSP / FRAG)) * FRAG;
        let d0 = ((u % KEY_FRAGS) % (HSP / FRAG)) * FRAG;
        let c = acc[t];
        store_fragment(c, sg, lane, p, 2u - g, pos0, d0, select(params.scale, 1.0, g == 0u));
    }
}

// dq of the query rows [p.first, p.first + BQ).
@compute @workgroup_size(THREADS)
fn flash_coop_dq(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
    @builtin(subgroup_id) sg: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    var acc: array<FragC, DQ_JOBS / SUBGROUPS>;
    for (var t = 0u; t < DQ_JOBS / SUBGROUPS; t++) {
        acc[t] = FragC();
    }
    var mask = mask_new();
    let p = place_of(wid, nwg);
    if (p.bh >= params.batch_heads) {
        return;
    }
    stage_queries(p, p.first, tid);
    // Keys up to the block's last row (the causal mask), uniform across the group.
    let kend = min(params.t, p.first + BQ);
    for (var j0 = 0u; j0 < kend; j0 += BKV) {
        workgroupBarrier();
        stage_keys(p, j0, tid);
        workgroupBarrier();
        score_products(Q_AT, K_AT, sg);
        workgroupBarrier();
        score_gradients(p, p.first, j0, tid, &mask);
        workgroupBarrier();
        for (var t = 0u; t < DQ_JOBS / SUBGROUPS; t++) {
            let u = sg + SUBGROUPS * t;
            let a = DS_AT + (u / (HSP / FRAG)) * FRAG * BKV;
            let b = K_AT + (u % (HSP / FRAG)) * FRAG;
            acc[t] = product_ab(acc[t], a, BKV, b, HSP, BKV / FRAG);
        }
    }
    for (var t = 0u; t < DQ_JOBS / SUBGROUPS; t++) {
        let u = sg + SUBGROUPS * t;
        let pos0 = p.first + (u / (HSP / FRAG)) * FRAG;
        let d0 = (u % (HSP / FRAG)) * FRAG;
        let c = acc[t];
        store_fragment(c, sg, lane, p, 0u, pos0, d0, params.scale);
    }
}
