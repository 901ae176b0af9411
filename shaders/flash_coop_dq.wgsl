// Fused causal attention, dq, on cooperative matrices (tensor cores): the dq kernel of
// shaders/flash_backward.wgsl's split (after shaders/flash_coop_backward.wgsl's dk and dv)
// with every product on f16 fragments accumulated in f32 (shaders/include/flash_coop.wgsl,
// shaders/include/flash_coop_grads.wgsl), for native f16 storage where tensor cores are used.
//
// One workgroup per (batch * head, block of BQ = 4 * FRAG query rows); subgroup sg owns rows
// [sg * FRAG, sg * FRAG + FRAG) of the block and holds their q and dy in named fragments
// qa0..qa7, da0..da7 and their dq in named accumulators dq0..dq7. Per step of BKV keys up to
// the block's last row, every thread stages k and v; each subgroup computes S and dP for the
// key fragments its rows see, dS of its rows with LANES_PER_ROW lanes per row, then
// dq += dS·k, scaled by `scale` once at the end.

enable wgpu_cooperative_matrix;

#tensor q 1 read
#tensor k 8 read
#tensor v 9 read
#tensor lse 3 read
#tensor dy 5 read
#tensor delta 6 read
#tensor dq 7 read_write
#include flash_common
#include flash_coop
#include flash_coop_grads

// Only dq is written here.
fn grad_store(part: u32, e: u32, x: f32) {
    dq_store(e, x);
}

// h_tile: q, then dy, of the block (staged once, then held in fragments); per step k, v and
// dS of the block's rows against the step's keys.
const SS: u32 = BKV + 4u;
const PS: u32 = BKV + 8u;
const K_AT: u32 = 0u;
const V_AT: u32 = BKV * QS;
const DS_AT: u32 = 2u * BKV * QS;
// f_tile: S and dP of the step, the rows' lse and delta.
const S_AT: u32 = 0u;
const DP_AT: u32 = BQ * SS;
const STATS_AT: u32 = 2u * BQ * SS;
const_assert H_TILE == max(BQ * QS, DS_AT + BQ * PS);
const_assert F_TILE == STATS_AT + 2u * BQ;
const_assert BQ == SUBGROUPS * FRAG && BLOCK == BQ;
// Keys each lane takes in a row of the score gradients.
const COLS_PER_LANE: u32 = BKV / LANES_PER_ROW;
const_assert FRAG % ROWS_AT_ONCE == 0u;

// dS / scale of the subgroup's rows [r0, r0 + FRAG) against keys [j0, j0 + BKV), from the
// scores and the rows' lse and delta.
fn score_gradients(p: Place, r0: u32, j0: u32, lane: u32, mask: ptr<function, Mask>) {
    let c0 = (lane % LANES_PER_ROW) * COLS_PER_LANE;
    for (var it = 0u; it < FRAG / ROWS_AT_ONCE; it++) {
        let r = r0 + it * ROWS_AT_ONCE + lane / LANES_PER_ROW;
        let i = p.first + r;
        let lse_i = f_tile[STATS_AT + r];
        let delta_i = f_tile[STATS_AT + BQ + r];
        let e_row = (p.bh * params.t + i) * params.t + j0; // dropout element of (i, j0)
        for (var k = 0u; k < COLS_PER_LANE; k++) {
            let jj = c0 + k;
            var ds = 0.0;
            if (i < params.t && j0 + jj <= i) {
                let prob = exp(params.scale * f_tile[S_AT + r * SS + jj] - lse_i);
                ds = prob * (mask_apply(mask, e_row + jj, f_tile[DP_AT + r * SS + jj]) - delta_i);
            }
            h_tile[DS_AT + r * PS + jj] = f16_from_f32(ds);
        }
    }
}

@compute @workgroup_size(THREADS)
fn flash_coop_dq(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
    @builtin(subgroup_id) sg: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    var mask = mask_new();
    let p = place_of(wid, nwg);
    if (p.bh >= params.batch_heads) {
        return;
    }
    let r0 = sg * FRAG; // the subgroup's first row in the block
    stage_rows(p, 0u, p.first, BQ, 0u, tid);
    stage_row_stats(p, p.first, STATS_AT, tid);
    workgroupBarrier();
    let qa0 = held_a(r0 * QS, 0u);
    let qa1 = held_a(r0 * QS, 1u);
    let qa2 = held_a(r0 * QS, 2u);
    let qa3 = held_a(r0 * QS, 3u);
    let qa4 = held_a(r0 * QS, 4u);
    let qa5 = held_a(r0 * QS, 5u);
    let qa6 = held_a(r0 * QS, 6u);
    let qa7 = held_a(r0 * QS, 7u);
    workgroupBarrier();
    stage_rows(p, 3u, p.first, BQ, 0u, tid);
    workgroupBarrier();
    let da0 = held_a(r0 * QS, 0u);
    let da1 = held_a(r0 * QS, 1u);
    let da2 = held_a(r0 * QS, 2u);
    let da3 = held_a(r0 * QS, 3u);
    let da4 = held_a(r0 * QS, 4u);
    let da5 = held_a(r0 * QS, 5u);
    let da6 = held_a(r0 * QS, 6u);
    let da7 = held_a(r0 * QS, 7u);
    var dq0 = FragC();
    var dq1 = FragC();
    var dq2 = FragC();
    var dq3 = FragC();
    var dq4 = FragC();
    var dq5 = FragC();
    var dq6 = FragC();
    var dq7 = FragC();
    // Keys up to the block's last row (the causal mask), uniform across the group.
    let kend = min(params.t, p.first + BQ);
    for (var j0 = 0u; j0 < kend; j0 += BKV) {
        workgroupBarrier();
        stage_rows(p, 1u, j0, BKV, K_AT, tid);
        stage_rows(p, 2u, j0, BKV, V_AT, tid);
        workgroupBarrier();
        // S = Q·Kᵀ and dP = dO·Vᵀ for the key fragments the subgroup's rows see.
        let seen = seen_fragments(j0, p.first + r0, BKV);
        for (var kf = 0u; kf < seen; kf++) {
            let kb = K_AT + kf * FRAG * QS;
            let vb = V_AT + kf * FRAG * QS;
            var s = mma(qa0, rows_bt(kb, 0u), FragC());
            var dp = mma(da0, rows_bt(vb, 0u), FragC());
            if (D_FRAGS > 1u) { s = mma(qa1, rows_bt(kb, 1u), s); dp = mma(da1, rows_bt(vb, 1u), dp); }
            if (D_FRAGS > 2u) { s = mma(qa2, rows_bt(kb, 2u), s); dp = mma(da2, rows_bt(vb, 2u), dp); }
            if (D_FRAGS > 3u) { s = mma(qa3, rows_bt(kb, 3u), s); dp = mma(da3, rows_bt(vb, 3u), dp); }
            if (D_FRAGS > 4u) { s = mma(qa4, rows_bt(kb, 4u), s); dp = mma(da4, rows_bt(vb, 4u), dp); }
            if (D_FRAGS > 5u) { s = mma(qa5, rows_bt(kb, 5u), s); dp = mma(da5, rows_bt(vb, 5u), dp); }
            if (D_FRAGS > 6u) { s = mma(qa6, rows_bt(kb, 6u), s); dp = mma(da6, rows_bt(vb, 6u), dp); }
            if (D_FRAGS > 7u) { s = mma(qa7, rows_bt(kb, 7u), s); dp = mma(da7, rows_bt(vb, 7u), dp); }
            store_scores(s, S_AT + r0 * SS + kf * FRAG, SS);
            store_scores(dp, DP_AT + r0 * SS + kf * FRAG, SS);
        }
        sync_subgroup();
        score_gradients(p, r0, j0, lane, &mask);
        sync_subgroup();
        // dq += dS·k over the key fragments the rows see.
        for (var kf = 0u; kf < seen; kf++) {
            let a = block_a(DS_AT + r0 * PS + kf * FRAG, PS);
            let kb = K_AT + kf * FRAG * QS;
            dq0 = mma(a, rows_b(kb, 0u), dq0);
            if (D_FRAGS > 1u) { dq1 = mma(a, rows_b(kb, 1u), dq1); }
            if (D_FRAGS > 2u) { dq2 = mma(a, rows_b(kb, 2u), dq2); }
            if (D_FRAGS > 3u) { dq3 = mma(a, rows_b(kb, 3u), dq3); }
            if (D_FRAGS > 4u) { dq4 = mma(a, rows_b(kb, 4u), dq4); }
            if (D_FRAGS > 5u) { dq5 = mma(a, rows_b(kb, 5u), dq5); }
            if (D_FRAGS > 6u) { dq6 = mma(a, rows_b(kb, 6u), dq6); }
            if (D_FRAGS > 7u) { dq7 = mma(a, rows_b(kb, 7u), dq7); }
        }
    }
    // The rows' scores are spent: their space is the subgroup's scratch.
    let scratch = S_AT + r0 * SS;
    let pos0 = p.first + r0;
    let sc = params.scale;
    write_grad(dq0, p, 0u, pos0, 0u, sc, scratch, lane);
    if (D_FRAGS > 1u) { write_grad(dq1, p, 0u, pos0, FRAG, sc, scratch, lane); }
    if (D_FRAGS > 2u) { write_grad(dq2, p, 0u, pos0, 2u * FRAG, sc, scratch, lane); }
    if (D_FRAGS > 3u) { write_grad(dq3, p, 0u, pos0, 3u * FRAG, sc, scratch, lane); }
    if (D_FRAGS > 4u) { write_grad(dq4, p, 0u, pos0, 4u * FRAG, sc, scratch, lane); }
    if (D_FRAGS > 5u) { write_grad(dq5, p, 0u, pos0, 5u * FRAG, sc, scratch, lane); }
    if (D_FRAGS > 6u) { write_grad(dq6, p, 0u, pos0, 6u * FRAG, sc, scratch, lane); }
    if (D_FRAGS > 7u) { write_grad(dq7, p, 0u, pos0, 7u * FRAG, sc, scratch, lane); }
}
