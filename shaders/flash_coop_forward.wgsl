// Fused causal attention, forward, on cooperative matrices (tensor cores): the online softmax
// of shaders/flash_forward.wgsl with S = Q·Kᵀ and O += P·V on f16 fragments accumulated in
// f32 (shaders/include/flash_coop.wgsl), for native f16 storage where tensor cores are used.
//
// One workgroup per (batch * head, block of BQ = 4 * FRAG query rows); subgroup sg owns rows
// [sg * FRAG, sg * FRAG + FRAG) and holds their q in named fragments qa0, qa1, ... and their
// output in named accumulators o0, o1, ... (one per channel fragment: D_FRAGS). Per block of BKV
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

// h_tile: q (staged once, then held in fragments); per block k, vᵀ (keys contiguous: the
// depth of P·V; over k when KV_REGIONS is 1), and P.
const K_AT: u32 = 0u;
const V_AT: u32 = K_AT + (KV_REGIONS - 1u) * BKV * QS;
const P_AT: u32 = max(V_AT + HSP * PS, BKV * QS);
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
    return qkv_half(p, which, r, d);
}

// The online softmax of the subgroup's rows [s.first, s.first + FRAG) against keys
// [j0, j0 + BKV): the scores' classes and maximum, one rescale of each row's running state,
// and the rows of P (zero where masked or dropped). Only a subgroup that owns rows calls it.
fn softmax_rows(p: Place, s: Slab, j0: u32, mask: ptr<function, Mask>) {
    let c0 = (s.lane % LANES_PER_ROW) * COLS_PER_LANE;
    for (var it = 0u; it < FRAG / s.rows_at_once; it++) {
        let r = s.first + it * s.rows_at_once + s.lane / LANES_PER_ROW;
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
        if (s.lane % LANES_PER_ROW == 0u) {
            f_tile[M_AT + r] = m_new;
            f_tile[L_AT + r] = l_new;
            f_tile[C_AT + r] = corr;
            row_seen[r] = row_seen[r] | seen;
        }
    }
}

// Accumulator c of the subgroup's rows [s.first, s.first + FRAG) with each row scaled by its
// rescale factor, through the scratch at f_tile[scratch] (c itself where it owns no rows).
fn rescaled(c: FragC, s: Slab, scratch: u32) -> FragC {
    var out = c;
    if (s.owns) {
        store_scores(c, scratch, FRAG);
    }
    sync_subgroup();
    if (s.owns) {
        for (var e = s.lane; e < FRAG * FRAG; e += s.lanes) {
            f_tile[scratch + e] *= f_tile[C_AT + s.first + e / FRAG];
        }
    }
    sync_subgroup();
    if (s.owns) {
        out = load_scores(scratch, FRAG);
    }
    sync_subgroup();
    return out;
}

// y = O / l for channel fragment fc of the subgroup's rows, through the scratch; a NaN/+inf
// logit, or no finite one (all -inf), poisons the row.
fn write_rows(c: FragC, fc: u32, p: Place, s: Slab, scratch: u32) {
    if (s.owns) {
        store_scores(c, scratch, FRAG);
    }
    sync_subgroup();
    for (var e = s.lane; s.owns && e < FRAG * FRAG; e += s.lanes) {
        let r = s.first + e / FRAG;
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
fn flash_coop_forward(inv: Invocation) {
    var mask = mask_new();
    let p = place_of(inv.wid, inv.nwg);
    if (p.bh >= params.batch_heads) {
        return;
    }
    let s = slab_of(inv);
    for (var r = inv.tid; r < BQ; r += THREADS) {
        f_tile[M_AT + r] = -F32_MAX;
        f_tile[L_AT + r] = 0.0;
        row_seen[r] = 0u;
    }
#for d in 0..D_FRAGS
    var qa{d} = FragA();
    var o{d} = FragC();
#end
    hold_a(p, 0u, p.first, s, inv.tid,
#for d in 0..D_FRAGS
        &qa{d},
#end
    );
    // Keys up to the block's last row (the causal mask), uniform across the group.
    let kend = min(params.t, p.first + BQ);
    for (var j0 = 0u; j0 < kend; j0 += BKV) {
        workgroupBarrier();
        stage_rows(p, 1u, j0, BKV, K_AT, inv.tid);
        if (KV_REGIONS == 2u) {
            stage_columns(p, 2u, j0, BKV, V_AT, PS, inv.tid);
        }
        workgroupBarrier();
        // The key fragments the subgroup's rows see: S = Q·Kᵀ into the rows' scores.
        let seen = select(0u, seen_fragments(j0, p.first + s.first, BKV), s.owns);
        for (var kf = 0u; kf < seen; kf++) {
            let kb = K_AT + kf * FRAG * QS;
            var sc = FragC();
#for d in 0..D_FRAGS
            sc = mma(qa{d}, rows_b(kb, {d}u), sc);
#end
            store_scores(sc, S_AT + s.first * SS + kf * FRAG, SS);
        }
        sync_subgroup();
        if (s.owns) {
            softmax_rows(p, s, j0, &mask);
        }
        sync_subgroup();
        // Rescale the accumulators by their rows' factors (the first block finds them zero).
        // Every subgroup does it on every later block: barriers, subgroup ones included, stay
        // in workgroup-uniform control flow (a rescale only where a row's maximum rose would
        // put them in subgroup-dependent branches). The rows' scores are spent: their space
        // is the scratch.
        if (j0 > 0u) {
            let scratch = S_AT + s.first * SS;
#for d in 0..D_FRAGS
            o{d} = rescaled(o{d}, s, scratch);
#end
        }
        if (KV_REGIONS == 1u) {
            workgroupBarrier(); // every subgroup is done with k
            stage_columns(p, 2u, j0, BKV, V_AT, PS, inv.tid);
            workgroupBarrier();
        }
        // O += P·V over the key fragments the rows see.
        add_block_products(
            P_AT + s.first * PS,
            V_AT,
            seen,
#for d in 0..D_FRAGS
            &o{d},
#end
        );
    }
    let scratch = S_AT + s.first * SS;
#for d in 0..D_FRAGS
    write_rows(o{d}, {d}u, p, s, scratch);
#end
    for (var rr = s.lane; s.owns && rr < FRAG; rr += s.lanes) {
        let r = s.first + rr;
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
