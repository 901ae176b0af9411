// Fused causal attention, dk and dv, on cooperative matrices (tensor cores): the dk/dv kernel
// of shaders/flash_backward.wgsl's split (its delta kernel runs first, shaders/flash_coop_dq.wgsl
// after) with every product on f16 fragments accumulated in f32
// (shaders/include/flash_coop.wgsl, shaders/include/flash_coop_grads.wgsl), for native f16
// storage where tensor cores are used.
//
// One workgroup per (batch * key/value head, block of BKV = 4 * FRAG keys); subgroup sg owns
// keys [sg * FRAG, sg * FRAG + FRAG) of the block and holds their kᵀ and vᵀ in named
// fragments kb0..kb7, vb0..vb7 and their gradients in named accumulators dv0..dv7, dk0..dk7.
// For each query head of the key/value head's group in order (grouped-query attention: the
// group's gradients sum in the accumulators, one writer per element), per step of BQ query
// rows (from the block holding the first key on: earlier rows see none), every thread
// stages q, dy and the rows' lse and delta; each subgroup computes S and dP for the
// query fragments that see its keys into its own columns of the scores, the score gradients
// of its columns with LANES_PER_ROW lanes per row, then dv += dropout(P)ᵀ·dy and
// dk += dSᵀ·q. dk is scaled by `scale` once at the end.

enable wgpu_cooperative_matrix;

#tensor q 1 read
#tensor k 8 read
#tensor v 9 read
#tensor lse 3 read
#tensor dy 5 read
#tensor delta 6 read
#tensor dk 10 read_write
#tensor dv 11 read_write
#include flash_common
#include flash_coop
#include flash_coop_grads

// dk (part 1) or dv (2); one tensor (nanoGPT's packed dqkv: SHARED_KV_GRADS) is written
// through dk's binding, as WebGPU requires of one writable range.
fn grad_store(part: u32, e: u32, x: f32) {
#if SHARED_KV_GRADS
    dk_store(e, x);
#else
    if (part == 1u) {
        dk_store(e, x);
    } else {
        dv_store(e, x);
    }
#end
}

// h_tile: k, then v, of the block (staged once, then held in fragments); per step q, dy,
// dropout(P) and dS of the step's rows against the block's keys.
const SS: u32 = BKV + 4u;
const PS: u32 = BKV + 8u;
const Q_AT: u32 = 0u;
const DY_AT: u32 = BQ * QS;
const PD_AT: u32 = 2u * BQ * QS;
const DS_AT: u32 = PD_AT + BQ * PS;
// f_tile: S and dP of the step, the rows' lse and delta; at the end the subgroups' scratch.
const S_AT: u32 = 0u;
const DP_AT: u32 = BQ * SS;
const STATS_AT: u32 = 2u * BQ * SS;
const_assert H_TILE == max(BKV * QS, DS_AT + BQ * PS);
const_assert F_TILE == max(STATS_AT + 2u * BQ, SUBGROUPS * FRAG * FRAG);
const_assert BKV == SUBGROUPS * FRAG && BLOCK == BKV;
// Keys each lane takes in a row of the score gradients.
const COLS_PER_LANE: u32 = FRAG / LANES_PER_ROW;
const_assert BQ % ROWS_AT_ONCE == 0u;

// dropout(P) and dS / scale of the step's query rows [i0, i0 + BQ) against the subgroup's
// keys (block columns [col0, col0 + FRAG)), from the scores and the rows' lse and delta.
fn score_gradients(p: Place, i0: u32, col0: u32, lane: u32, mask: ptr<function, Mask>) {
    let c0 = col0 + (lane % LANES_PER_ROW) * COLS_PER_LANE;
    for (var it = 0u; it < BQ / ROWS_AT_ONCE; it++) {
        let r = it * ROWS_AT_ONCE + lane / LANES_PER_ROW;
        let i = i0 + r;
        let lse_i = f_tile[STATS_AT + r];
        let delta_i = f_tile[STATS_AT + BQ + r];
        let e_row = (p.bh * params.t + i) * params.t + p.first; // dropout element of (i, block)
        for (var k = 0u; k < COLS_PER_LANE; k++) {
            let jj = c0 + k;
            var pd = 0.0;
            var ds = 0.0;
            if (i < params.t && p.first + jj <= i) {
                let prob = exp(params.scale * f_tile[S_AT + r * SS + jj] - lse_i);
                pd = mask_apply(mask, e_row + jj, prob);
                ds = prob * (mask_apply(mask, e_row + jj, f_tile[DP_AT + r * SS + jj]) - delta_i);
            }
            h_tile[PD_AT + r * PS + jj] = f16_from_f32(pd);
            h_tile[DS_AT + r * PS + jj] = f16_from_f32(ds);
        }
    }
}

@compute @workgroup_size(THREADS)
fn flash_coop_dkv(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
    @builtin(subgroup_id) sg: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    var mask = mask_new();
    let kv = kv_place_of(wid, nwg);
    if (kv.bh >= params.batch_heads) {
        return;
    }
    let col0 = sg * FRAG; // the subgroup's keys in the block
    let k0 = kv.first + col0;
    // kᵀ and vᵀ of the subgroup's keys: B(k = channel, n = key).
    stage_rows(kv, 1u, kv.first, BKV, 0u, tid);
    workgroupBarrier();
    let kb0 = held_bt(col0 * QS, 0u);
    let kb1 = held_bt(col0 * QS, 1u);
    let kb2 = held_bt(col0 * QS, 2u);
    let kb3 = held_bt(col0 * QS, 3u);
    let kb4 = held_bt(col0 * QS, 4u);
    let kb5 = held_bt(col0 * QS, 5u);
    let kb6 = held_bt(col0 * QS, 6u);
    let kb7 = held_bt(col0 * QS, 7u);
    workgroupBarrier();
    stage_rows(kv, 2u, kv.first, BKV, 0u, tid);
    workgroupBarrier();
    let vb0 = held_bt(col0 * QS, 0u);
    let vb1 = held_bt(col0 * QS, 1u);
    let vb2 = held_bt(col0 * QS, 2u);
    let vb3 = held_bt(col0 * QS, 3u);
    let vb4 = held_bt(col0 * QS, 4u);
    let vb5 = held_bt(col0 * QS, 5u);
    let vb6 = held_bt(col0 * QS, 6u);
    let vb7 = held_bt(col0 * QS, 7u);
    var dv0 = FragC();
    var dv1 = FragC();
    var dv2 = FragC();
    var dv3 = FragC();
    var dv4 = FragC();
    var dv5 = FragC();
    var dv6 = FragC();
    var dv7 = FragC();
    var dk0 = FragC();
    var dk1 = FragC();
    var dk2 = FragC();
    var dk3 = FragC();
    var dk4 = FragC();
    var dk5 = FragC();
    var dk6 = FragC();
    var dk7 = FragC();
    // The query heads of the key/value head's group, in order.
    for (var g = 0u; g < params.group; g++) {
        let p = group_head(kv, g);
        // Query steps from the one holding the block's first key on (rows before it see none of
        // its keys), aligned to BQ from 0: uniform across the group.
        for (var i0 = (p.first / BQ) * BQ; i0 < params.t; i0 += BQ) {
            workgroupBarrier();
            stage_rows(p, 0u, i0, BQ, Q_AT, tid);
            stage_rows(p, 3u, i0, BQ, DY_AT, tid);
            stage_row_stats(p, i0, STATS_AT, tid);
            workgroupBarrier();
            // S = Q·Kᵀ and dP = dO·Vᵀ for the query fragments that see the subgroup's keys.
            for (var qf = 0u; qf < BQ / FRAG; qf++) {
                if (!rows_see(i0 + qf * FRAG, k0)) {
                    continue;
                }
                let qb = Q_AT + qf * FRAG * QS;
                let db = DY_AT + qf * FRAG * QS;
                var s = mma(rows_a(qb, 0u), kb0, FragC());
                var dp = mma(rows_a(db, 0u), vb0, FragC());
                if (D_FRAGS > 1u) { s = mma(rows_a(qb, 1u), kb1, s); dp = mma(rows_a(db, 1u), vb1, dp); }
                if (D_FRAGS > 2u) { s = mma(rows_a(qb, 2u), kb2, s); dp = mma(rows_a(db, 2u), vb2, dp); }
                if (D_FRAGS > 3u) { s = mma(rows_a(qb, 3u), kb3, s); dp = mma(rows_a(db, 3u), vb3, dp); }
                if (D_FRAGS > 4u) { s = mma(rows_a(qb, 4u), kb4, s); dp = mma(rows_a(db, 4u), vb4, dp); }
                if (D_FRAGS > 5u) { s = mma(rows_a(qb, 5u), kb5, s); dp = mma(rows_a(db, 5u), vb5, dp); }
                if (D_FRAGS > 6u) { s = mma(rows_a(qb, 6u), kb6, s); dp = mma(rows_a(db, 6u), vb6, dp); }
                if (D_FRAGS > 7u) { s = mma(rows_a(qb, 7u), kb7, s); dp = mma(rows_a(db, 7u), vb7, dp); }
                store_scores(s, S_AT + qf * FRAG * SS + col0, SS);
                store_scores(dp, DP_AT + qf * FRAG * SS + col0, SS);
            }
            sync_subgroup();
            score_gradients(p, i0, col0, lane, &mask);
            sync_subgroup();
            // dv += dropout(P)ᵀ·dy, dk += dSᵀ·q: A(m = key, k = query) loads column-major.
            for (var qf = 0u; qf < BQ / FRAG; qf++) {
                if (!rows_see(i0 + qf * FRAG, k0)) {
                    continue;
                }
                let pd = block_at(PD_AT + qf * FRAG * PS + col0, PS);
                let ds = block_at(DS_AT + qf * FRAG * PS + col0, PS);
                let qb = Q_AT + qf * FRAG * QS;
                let db = DY_AT + qf * FRAG * QS;
                dv0 = mma(pd, rows_b(db, 0u), dv0);
                dk0 = mma(ds, rows_b(qb, 0u), dk0);
                if (D_FRAGS > 1u) { dv1 = mma(pd, rows_b(db, 1u), dv1); dk1 = mma(ds, rows_b(qb, 1u), dk1); }
                if (D_FRAGS > 2u) { dv2 = mma(pd, rows_b(db, 2u), dv2); dk2 = mma(ds, rows_b(qb, 2u), dk2); }
                if (D_FRAGS > 3u) { dv3 = mma(pd, rows_b(db, 3u), dv3); dk3 = mma(ds, rows_b(qb, 3u), dk3); }
                if (D_FRAGS > 4u) { dv4 = mma(pd, rows_b(db, 4u), dv4); dk4 = mma(ds, rows_b(qb, 4u), dk4); }
                if (D_FRAGS > 5u) { dv5 = mma(pd, rows_b(db, 5u), dv5); dk5 = mma(ds, rows_b(qb, 5u), dk5); }
                if (D_FRAGS > 6u) { dv6 = mma(pd, rows_b(db, 6u), dv6); dk6 = mma(ds, rows_b(qb, 6u), dk6); }
                if (D_FRAGS > 7u) { dv7 = mma(pd, rows_b(db, 7u), dv7); dk7 = mma(ds, rows_b(qb, 7u), dk7); }
            }
        }
    }
    // The scores are spent: each subgroup's scratch is a fragment of f_tile.
    workgroupBarrier();
    let scratch = sg * FRAG * FRAG;
    let sc = params.scale;
    write_grad(dv0, kv, 2u, k0, 0u, 1.0, scratch, lane);
    write_grad(dk0, kv, 1u, k0, 0u, sc, scratch, lane);
    if (D_FRAGS > 1u) { write_grad(dv1, kv, 2u, k0, FRAG, 1.0, scratch, lane); write_grad(dk1, kv, 1u, k0, FRAG, sc, scratch, lane); }
    if (D_FRAGS > 2u) { write_grad(dv2, kv, 2u, k0, 2u * FRAG, 1.0, scratch, lane); write_grad(dk2, kv, 1u, k0, 2u * FRAG, sc, scratch, lane); }
    if (D_FRAGS > 3u) { write_grad(dv3, kv, 2u, k0, 3u * FRAG, 1.0, scratch, lane); write_grad(dk3, kv, 1u, k0, 3u * FRAG, sc, scratch, lane); }
    if (D_FRAGS > 4u) { write_grad(dv4, kv, 2u, k0, 4u * FRAG, 1.0, scratch, lane); write_grad(dk4, kv, 1u, k0, 4u * FRAG, sc, scratch, lane); }
    if (D_FRAGS > 5u) { write_grad(dv5, kv, 2u, k0, 5u * FRAG, 1.0, scratch, lane); write_grad(dk5, kv, 1u, k0, 5u * FRAG, sc, scratch, lane); }
    if (D_FRAGS > 6u) { write_grad(dv6, kv, 2u, k0, 6u * FRAG, 1.0, scratch, lane); write_grad(dk6, kv, 1u, k0, 6u * FRAG, sc, scratch, lane); }
    if (D_FRAGS > 7u) { write_grad(dv7, kv, 2u, k0, 7u * FRAG, 1.0, scratch, lane); write_grad(dk7, kv, 1u, k0, 7u * FRAG, sc, scratch, lane); }
}
