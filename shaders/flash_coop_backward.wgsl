// Fused causal attention, dk and dv, on cooperative matrices (tensor cores): the dk/dv kernel
// of shaders/flash_backward.wgsl's split (its delta kernel runs first, shaders/flash_coop_dq.wgsl
// after) with every product on f16 fragments accumulated in f32
// (shaders/include/flash_coop.wgsl, shaders/include/flash_coop_grads.wgsl), for native f16
// storage where tensor cores are used.
//
// One workgroup per (batch * key/value head, block of BKV = 4 * FRAG keys); subgroup sg owns
// keys [sg * FRAG, sg * FRAG + FRAG) of the block and holds their kᵀ and vᵀ in named
// fragments kb0, vb0, ... and their gradients in named accumulators dv0, dk0, ... (one per
// channel fragment).
// For each query head of the key/value head's group in order (grouped-query attention: the
// group's gradients sum in the accumulators, one writer per element), per step of BQ query
// rows (from the block holding the first key on: earlier rows see none), every thread
// stages q and dy (as rows and transposed) and the rows' lse and delta; each subgroup computes S and dP for the
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

// h_tile: k, then v, of the block (staged once, then held in fragments); per step q and dy
// twice (rows for S = Q·Kᵀ and dP = dO·Vᵀ, transposed for dk += dSᵀ·q and dv += Pᵀ·dy: each
// load's depth contiguous), and dropout(P)ᵀ and dSᵀ of the block's keys against the step's
// rows (written transposed: the queries, their depth, contiguous), beside the rows or, where
// PD_OVER is 1, over them (S and dP have spent them). Rows of the transposed blocks take
// PTS = BQ + 8 halves.
const PTS: u32 = BQ + 8u;
const Q_AT: u32 = 0u;
const DY_AT: u32 = BQ * QS;
const QT_AT: u32 = max(2u * BQ * QS, PD_OVER * 2u * BKV * PTS);
const DYT_AT: u32 = QT_AT + HSP * PTS;
const PD_AT: u32 = (1u - PD_OVER) * (DYT_AT + HSP * PTS);
const DS_AT: u32 = PD_AT + BKV * PTS;
// dropout(P) and dS of score row r (query), column c (key) at r * DS_ROW + c * DS_COL.
const DS_ROW: u32 = 1u;
const DS_COL: u32 = PTS;
// f_tile: S, dP, lse and delta (flash_coop_grads); at the end the subgroups' scratch.
const_assert H_TILE == max(BKV * QS, max(DYT_AT + HSP * PTS, DS_AT + BKV * PTS));
const_assert F_TILE == max(STATS_AT + 2u * BQ, SUBGROUPS * FRAG * FRAG);
const_assert BKV == SUBGROUPS * FRAG && BLOCK == BKV;
const_assert BQ % ROWS_AT_ONCE == 0u && FRAG % LANES_PER_ROW == 0u;

@compute @workgroup_size(THREADS)
fn flash_coop_dkv(inv: Invocation) {
    var mask = mask_new();
    let kv = kv_place_of(inv.wid, inv.nwg);
    if (kv.bh >= params.batch_heads) {
        return;
    }
    let s = slab_of(inv); // the subgroup's keys in the block
    let col0 = s.first;
    let k0 = kv.first + col0;
    // kᵀ and vᵀ of the subgroup's keys: B(k = channel, n = key).
#for d in 0..D_FRAGS
    var kb{d} = FragB();
    var vb{d} = FragB();
    var dv{d} = FragC();
    var dk{d} = FragC();
#end
    hold_two_b(kv, 1u, 2u, kv.first, s, inv.tid,
#for d in 0..D_FRAGS
        &kb{d},
        &vb{d},
#end
    );
    // The query heads of the key/value head's group, in order.
    for (var g = 0u; g < params.group; g++) {
        let p = group_head(kv, g);
        // Query steps from the one holding the block's first key on (rows before it see none of
        // its keys), aligned to BQ from 0: uniform across the group.
        for (var i0 = (p.first / BQ) * BQ; i0 < params.t; i0 += BQ) {
            workgroupBarrier();
            stage_rows_and_columns(p, 0u, i0, BQ, Q_AT, QT_AT, PTS, inv.tid);
            stage_rows_and_columns(p, 3u, i0, BQ, DY_AT, DYT_AT, PTS, inv.tid);
            stage_row_stats(p, i0, STATS_AT, inv.tid);
            workgroupBarrier();
            // S = Q·Kᵀ and dP = dO·Vᵀ for the query fragments that see the subgroup's keys.
            for (var qf = 0u; qf < BQ / FRAG; qf++) {
                if (!s.owns || !rows_see(i0 + qf * FRAG, k0)) {
                    continue;
                }
                let qb = Q_AT + qf * FRAG * QS;
                let db = DY_AT + qf * FRAG * QS;
                var sc = FragC();
                var dp = FragC();
#for d in 0..D_FRAGS
                sc = mma(rows_a(qb, {d}u), kb{d}, sc);
                dp = mma(rows_a(db, {d}u), vb{d}, dp);
#end
                store_scores(sc, S_AT + qf * FRAG * SS + col0, SS);
                store_scores(dp, DP_AT + qf * FRAG * SS + col0, SS);
            }
            if (PD_OVER == 1u) {
                workgroupBarrier(); // every subgroup is done with q's and dy's rows
            } else {
                sync_subgroup();
            }
            // dropout(P) and dS / scale of the step's rows against the subgroup's keys.
            if (s.owns) {
                score_gradients(p, Span(0u, BQ, i0), Span(col0, FRAG, p.first), PD_AT, s, &mask);
            }
            sync_subgroup();
            // dv += dropout(P)ᵀ·dy, dk += dSᵀ·q: A(m = key, k = query) and B(k = query,
            // n = channel) from the transposed blocks, each with its depth contiguous.
            for (var qf = 0u; qf < BQ / FRAG; qf++) {
                if (!s.owns || !rows_see(i0 + qf * FRAG, k0)) {
                    continue;
                }
                let pd = block_a(PD_AT + col0 * PTS + qf * FRAG, PTS);
                let ds = block_a(DS_AT + col0 * PTS + qf * FRAG, PTS);
                let qt = QT_AT + qf * FRAG;
                let dyt = DYT_AT + qf * FRAG;
#for d in 0..D_FRAGS
                dv{d} = mma(pd, depth_b(dyt, PTS, {d}u), dv{d});
                dk{d} = mma(ds, depth_b(qt, PTS, {d}u), dk{d});
#end
            }
        }
    }
    // The scores are spent: each subgroup's scratch is a fragment of f_tile.
    workgroupBarrier();
    let scratch = col0 * FRAG;
    let sc = params.scale;
#for d in 0..D_FRAGS
    write_grad(dv{d}, kv, 2u, k0, {d}u * FRAG, 1.0, scratch, s);
    write_grad(dk{d}, kv, 1u, k0, {d}u * FRAG, sc, scratch, s);
#end
}
