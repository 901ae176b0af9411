// Fused causal attention, forward, on cooperative matrices (tensor cores): the online softmax
// of shaders/flash_forward.wgsl with S = Q·Kᵀ and O += P·V on f16 fragments accumulated in
// f32 (shaders/include/flash_coop.wgsl), for native f16 storage where tensor cores are used.
//
// One workgroup per (batch * head, block of BQ = 4 * FRAG query rows); subgroup sg owns rows
// [sg * FRAG, sg * FRAG + FRAG) and holds their q in named fragments qa0..qa7 and their output
// in named accumulators o0..o7 (channel fragments; D_FRAGS of them in use). Per block of BKV
// keys: every thread stages k (and v beside it, or over it after the scores when
// KV_REGIONS is 1); each subgroup computes its rows' scores for the key fragments they see,
// runs their online softmax in f32 with LANES_PER_ROW lanes per row (running max, sum and the
// NaN/inf classes exactly as the SIMT body), writes P = dropout(exp(x - m)) in f16 and adds
// P·V to its accumulators. A fragment cannot scale its rows, so before that the accumulators
// pass through the subgroup's spent score rows and come back scaled by their rows' rescale
// factors (every block after the first). The outputs are the SIMT body's: y (f16) and the row log-sum-exp (f32), with the same
// poisoning rules; they differ from it by reassociation and by P's rounding to f16.

enable wgpu_cooperative_matrix;

#tensor q 1 read
#tensor k 8 read
#tensor v 9 read
#tensor y 2 read_write
#tensor lse 3 read_write
#include logit_class
#include flash_common
#include flash_coop

// h_tile: q (staged once, then held in fragments); per block k and v (v over k when
// KV_REGIONS is 1), and P.
const SS: u32 = BKV + 4u;
const PS: u32 = BKV + 8u;
const K_AT: u32 = 0u;
const V_AT: u32 = K_AT + (KV_REGIONS - 1u) * BKV * QS;
const P_AT: u32 = KV_REGIONS * BKV * QS;
// f_tile: the scores, then each row's running max, sum and this block's rescale factor.
const S_AT: u32 = 0u;
const M_AT: u32 = BQ * SS;
const L_AT: u32 = M_AT + BQ;
const C_AT: u32 = L_AT + BQ;
const_assert H_TILE == max(BQ * QS, P_AT + BQ * PS);
const_assert F_TILE == C_AT + BQ;
const_assert BQ == SUBGROUPS * FRAG && BLOCK == BQ;
// Keys each lane takes in a row of the softmax (contiguous: one Philox call per 4 keys).
const COLS_PER_LANE: u32 = BKV / LANES_PER_ROW;
const_assert FRAG % ROWS_AT_ONCE == 0u;

// Each query row's classes (flash_forward.wgsl's Row.seen): bit 0 a finite logit, bit 1 a
// NaN or +inf one.
var<workgroup> row_seen: array<u32, BQ>;

fn coop_source(p: Place, which: u32, r: u32, d: u32) -> f16 {
    let e = qkv_at(p, r, which) + d;
    if (which == 0u) {
        return q[e];
    }
    if (which == 1u) {
        return k[e];
    }
    return v[e];
}

// The online softmax of the subgroup's rows [r0, r0 + FRAG) against keys [j0, j0 + BKV): the
// scores' classes and maximum, one rescale of each row's running state, and the rows of P
// (zero where masked or dropped).
fn softmax_rows(p: Place, r0: u32, j0: u32, lane: u32, mask: ptr<function, Mask>) {
    let c0 = (lane % LANES_PER_ROW) * COLS_PER_LANE;
    for (var it = 0u; it < FRAG / ROWS_AT_ONCE; it++) {
        let r = r0 + it * ROWS_AT_ONCE + lane / LANES_PER_ROW;
        let i = p.first + r;
        var n = 0u; // keys the row sees: j0 <= j <= i < T
        if (i < params.t && j0 <= i) {
            n = min(BKV, i + 1u - j0);
        }
        var tile_max = -F32_MAX;
        var seen = 0u;
        for (var k = 0u; k < COLS_PER_LANE; k++) {
            if (c0 + k < n) {
                let x = params.scale * f_tile[S_AT + r * SS + c0 + k];
                let c = logit_class(x);
                if (c == 0u) {
                    tile_max = max(tile_max, x);
                    seen = seen | 1u;
                } else if (c == 2u) {
                    seen = seen | 2u;
                }
            }
        }
        tile_max = row_max(tile_max);
        seen = row_or(seen);
        let m_old = f_tile[M_AT + r];
        let l_old = f_tile[L_AT + r];
        let m_new = max(m_old, tile_max);
        let corr = exp(m_old - m_new);
        let e_row = (p.bh * params.t + i) * params.t + j0; // dropout element of (i, j0)
        var part = 0.0;
        for (var k = 0u; k < COLS_PER_LANE; k++) {
            let jj = c0 + k;
            var w = 0.0;
            if (jj < n) {
                let x = params.scale * f_tile[S_AT + r * SS + jj];
                if (logit_class(x) == 0u) {
                    let e = exp(x - m_new);
                    part += e;
                    w = mask_apply(mask, e_row + jj, e);
                }
            }
            h_tile[P_AT + r * PS + jj] = f16_from_f32(w);
        }
        let l_new = l_old * corr + row_sum(part);
        if (lane % LANES_PER_ROW == 0u) {
            f_tile[M_AT + r] = m_new;
            f_tile[L_AT + r] = l_new;
            f_tile[C_AT + r] = corr;
            row_seen[r] = row_seen[r] | seen;
        }
    }
}

// Accumulator c of the subgroup's rows [r0, r0 + FRAG) with each row scaled by its rescale
// factor, through the scratch at f_tile[scratch].
fn rescaled(c: FragC, r0: u32, scratch: u32, lane: u32) -> FragC {
    coopStoreT(c, &f_tile[scratch], FRAG);
    sync_subgroup();
    for (var e = lane; e < FRAG * FRAG; e += SUBGROUP) {
        f_tile[scratch + e] *= f_tile[C_AT + r0 + e / FRAG];
    }
    sync_subgroup();
    let out = coopLoadT<FragC>(&f_tile[scratch], FRAG);
    sync_subgroup();
    return out;
}

// y = O / l for channel fragment fc of the subgroup's rows, through the scratch; a NaN/+inf
// logit, or no finite one (all -inf), poisons the row.
fn write_rows(c: FragC, fc: u32, p: Place, r0: u32, scratch: u32, lane: u32) {
    coopStoreT(c, &f_tile[scratch], FRAG);
    sync_subgroup();
    for (var e = lane; e < FRAG * FRAG; e += SUBGROUP) {
        let r = r0 + e / FRAG;
        let d = fc * FRAG + e % FRAG;
        let i = p.first + r;
        if (i < params.t && d < HS) {
            var v = f_tile[scratch + e] * (1.0 / f_tile[L_AT + r]);
            if (row_seen[r] != 1u) {
                v = nan_of(0u);
            }
            y_store(out_at(p, i) + d, v);
        }
    }
    sync_subgroup();
}

@compute @workgroup_size(THREADS)
fn flash_coop_forward(
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
    for (var r = tid; r < BQ; r += THREADS) {
        f_tile[M_AT + r] = -F32_MAX;
        f_tile[L_AT + r] = 0.0;
        row_seen[r] = 0u;
    }
    workgroupBarrier();
    let qa0 = held_a(r0 * QS, 0u);
    let qa1 = held_a(r0 * QS, 1u);
    let qa2 = held_a(r0 * QS, 2u);
    let qa3 = held_a(r0 * QS, 3u);
    let qa4 = held_a(r0 * QS, 4u);
    let qa5 = held_a(r0 * QS, 5u);
    let qa6 = held_a(r0 * QS, 6u);
    let qa7 = held_a(r0 * QS, 7u);
    var o0 = FragC();
    var o1 = FragC();
    var o2 = FragC();
    var o3 = FragC();
    var o4 = FragC();
    var o5 = FragC();
    var o6 = FragC();
    var o7 = FragC();
    // Keys up to the block's last row (the causal mask), uniform across the group.
    let kend = min(params.t, p.first + BQ);
    for (var j0 = 0u; j0 < kend; j0 += BKV) {
        workgroupBarrier();
        stage_rows(p, 1u, j0, BKV, K_AT, tid);
        if (KV_REGIONS == 2u) {
            stage_rows(p, 2u, j0, BKV, V_AT, tid);
        }
        workgroupBarrier();
        // The key fragments the subgroup's rows see: S = Q·Kᵀ into the rows' scores.
        let seen = seen_fragments(j0, p.first + r0, BKV);
        for (var kf = 0u; kf < seen; kf++) {
            let kb = K_AT + kf * FRAG * QS;
            var s = mma(qa0, rows_bt(kb, 0u), FragC());
            if (D_FRAGS > 1u) { s = mma(qa1, rows_bt(kb, 1u), s); }
            if (D_FRAGS > 2u) { s = mma(qa2, rows_bt(kb, 2u), s); }
            if (D_FRAGS > 3u) { s = mma(qa3, rows_bt(kb, 3u), s); }
            if (D_FRAGS > 4u) { s = mma(qa4, rows_bt(kb, 4u), s); }
            if (D_FRAGS > 5u) { s = mma(qa5, rows_bt(kb, 5u), s); }
            if (D_FRAGS > 6u) { s = mma(qa6, rows_bt(kb, 6u), s); }
            if (D_FRAGS > 7u) { s = mma(qa7, rows_bt(kb, 7u), s); }
            store_scores(s, S_AT + r0 * SS + kf * FRAG, SS);
        }
        sync_subgroup();
        softmax_rows(p, r0, j0, lane, &mask);
        sync_subgroup();
        // Rescale the accumulators by their rows' factors (the first block finds them zero).
        // Every subgroup does it on every later block: barriers, subgroup ones included, stay
        // in workgroup-uniform control flow (a rescale only where a row's maximum rose would
        // put them in subgroup-dependent branches). The rows' scores are spent: their space
        // is the scratch.
        if (j0 > 0u) {
            let scratch = S_AT + r0 * SS;
            o0 = rescaled(o0, r0, scratch, lane);
            if (D_FRAGS > 1u) { o1 = rescaled(o1, r0, scratch, lane); }
            if (D_FRAGS > 2u) { o2 = rescaled(o2, r0, scratch, lane); }
            if (D_FRAGS > 3u) { o3 = rescaled(o3, r0, scratch, lane); }
            if (D_FRAGS > 4u) { o4 = rescaled(o4, r0, scratch, lane); }
            if (D_FRAGS > 5u) { o5 = rescaled(o5, r0, scratch, lane); }
            if (D_FRAGS > 6u) { o6 = rescaled(o6, r0, scratch, lane); }
            if (D_FRAGS > 7u) { o7 = rescaled(o7, r0, scratch, lane); }
        }
        if (KV_REGIONS == 1u) {
            workgroupBarrier(); // every subgroup is done with k
            stage_rows(p, 2u, j0, BKV, V_AT, tid);
            workgroupBarrier();
        }
        // O += P·V over the key fragments the rows see.
        for (var kf = 0u; kf < seen; kf++) {
            let a = block_a(P_AT + r0 * PS + kf * FRAG, PS);
            let vb = V_AT + kf * FRAG * QS;
            o0 = mma(a, rows_b(vb, 0u), o0);
            if (D_FRAGS > 1u) { o1 = mma(a, rows_b(vb, 1u), o1); }
            if (D_FRAGS > 2u) { o2 = mma(a, rows_b(vb, 2u), o2); }
            if (D_FRAGS > 3u) { o3 = mma(a, rows_b(vb, 3u), o3); }
            if (D_FRAGS > 4u) { o4 = mma(a, rows_b(vb, 4u), o4); }
            if (D_FRAGS > 5u) { o5 = mma(a, rows_b(vb, 5u), o5); }
            if (D_FRAGS > 6u) { o6 = mma(a, rows_b(vb, 6u), o6); }
            if (D_FRAGS > 7u) { o7 = mma(a, rows_b(vb, 7u), o7); }
        }
    }
    let scratch = S_AT + r0 * SS;
    write_rows(o0, 0u, p, r0, scratch, lane);
    if (D_FRAGS > 1u) { write_rows(o1, 1u, p, r0, scratch, lane); }
    if (D_FRAGS > 2u) { write_rows(o2, 2u, p, r0, scratch, lane); }
    if (D_FRAGS > 3u) { write_rows(o3, 3u, p, r0, scratch, lane); }
    if (D_FRAGS > 4u) { write_rows(o4, 4u, p, r0, scratch, lane); }
    if (D_FRAGS > 5u) { write_rows(o5, 5u, p, r0, scratch, lane); }
    if (D_FRAGS > 6u) { write_rows(o6, 6u, p, r0, scratch, lane); }
    if (D_FRAGS > 7u) { write_rows(o7, 7u, p, r0, scratch, lane); }
    for (var rr = lane; rr < FRAG; rr += SUBGROUP) {
        let r = r0 + rr;
        let i = p.first + r;
        if (i < params.t) {
            var l = f_tile[M_AT + r] + log(f_tile[L_AT + r]);
            if (row_seen[r] != 1u) {
                l = nan_of(0u);
            }
            lse_store(p.bh * params.t + i, l);
        }
    }
}
