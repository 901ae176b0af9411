// Fused causal attention, dq, on cooperative matrices (tensor cores): the dq kernel of
// shaders/flash_backward.wgsl's split (after shaders/flash_coop_backward.wgsl's dk and dv)
// with every product on f16 fragments accumulated in f32 (shaders/include/flash_coop.wgsl,
// shaders/include/flash_coop_grads.wgsl), for native f16 storage where tensor cores are used.
//
// One workgroup per (batch * head, block of BQ = 4 * FRAG query rows); subgroup sg owns rows
// [sg * FRAG, sg * FRAG + FRAG) of the block and holds their q and dy in named fragments
// qa0, da0, ... and their dq in named accumulators dq0, ... (one per channel fragment). Per step of BKV keys up to
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

// dS of score row r, column c at DS_AT + r * DS_ROW + c * DS_COL: row-major, its depth (keys)
// contiguous for dq += dS·k.
const DS_ROW: u32 = PS;
const DS_COL: u32 = 1u;

// h_tile: q, then dy, of the block (staged once, then held in fragments); per step k twice
// (rows for S = Q·Kᵀ, transposed for dq += dS·k: each load's depth contiguous), v and dS of
// the block's rows against the step's keys.
const K_AT: u32 = 0u;
const KT_AT: u32 = BKV * QS;
const V_AT: u32 = KT_AT + HSP * PS;
const DS_AT: u32 = V_AT + BKV * QS;
// f_tile: S, dP, lse and delta (flash_coop_grads).
const_assert H_TILE == max(BQ * QS, DS_AT + BQ * PS);
const_assert F_TILE == STATS_AT + 2u * BQ;
const_assert BQ == SUBGROUPS * FRAG && BLOCK == BQ;
const_assert FRAG % ROWS_AT_ONCE == 0u && BKV % LANES_PER_ROW == 0u;

@compute @workgroup_size(THREADS)
fn flash_coop_dq(inv: Invocation) {
    var mask = mask_new();
    let p = place_of(inv.wid, inv.nwg);
    if (p.bh >= params.batch_heads) {
        return;
    }
    let s = slab_of(inv);
    stage_row_stats(p, p.first, STATS_AT, inv.tid);
#for d in 0..D_FRAGS
    var qa{d} = FragA();
    var da{d} = FragA();
    var dq{d} = FragC();
#end
    hold_two_a(p, 0u, 3u, p.first, s, inv.tid,
#for d in 0..D_FRAGS
        &qa{d},
        &da{d},
#end
    );
    // Keys up to the block's last row (the causal mask), uniform across the group.
    let kend = min(params.t, p.first + BQ);
    for (var j0 = 0u; j0 < kend; j0 += BKV) {
        workgroupBarrier();
        stage_rows_and_columns(p, 1u, j0, BKV, K_AT, KT_AT, PS, inv.tid);
        stage_rows(p, 2u, j0, BKV, V_AT, inv.tid);
        workgroupBarrier();
        // S = Q·Kᵀ and dP = dO·Vᵀ for the key fragments the subgroup's rows see.
        let seen = select(0u, seen_fragments(j0, p.first + s.first, BKV), s.owns);
        for (var kf = 0u; kf < seen; kf++) {
            let kb = K_AT + kf * FRAG * QS;
            let vb = V_AT + kf * FRAG * QS;
            var sc = FragC();
            var dp = FragC();
#for d in 0..D_FRAGS
            sc = mma(qa{d}, rows_b(kb, {d}u), sc);
            dp = mma(da{d}, rows_b(vb, {d}u), dp);
#end
            store_scores(sc, S_AT + s.first * SS + kf * FRAG, SS);
            store_scores(dp, DP_AT + s.first * SS + kf * FRAG, SS);
        }
        sync_subgroup();
        // dS / scale of the subgroup's rows against the step's keys.
        if (s.owns) {
            score_gradients(p, Span(s.first, FRAG, p.first), Span(0u, BKV, j0), NO_PD, s, &mask);
        }
        sync_subgroup();
        // dq += dS·k over the key fragments the rows see.
        add_block_products(
            DS_AT + s.first * PS,
            KT_AT,
            seen,
#for d in 0..D_FRAGS
            &dq{d},
#end
        );
    }
    // The rows' scores are spent: their space is the subgroup's scratch.
    let scratch = S_AT + s.first * SS;
    let pos0 = p.first + s.first;
    let sc = params.scale;
#for d in 0..D_FRAGS
    write_grad(dq{d}, p, 0u, pos0, {d}u * FRAG, sc, scratch, s);
#end
}
