// ---- the tensor-core attention's backward kernels (shaders/flash_coop_backward.wgsl: dk and
// dv, shaders/flash_coop_dq.wgsl: dq): their sources and their gradient stores -------------
// Both recompute, per block of query rows and keys, the scores S = Q·Kᵀ and dP = dO·Vᵀ, then
// in f32 per element
//
//   P_ij = exp(scale * S_ij - lse_i),  Pd_ij = dropout(P_ij),
//   dS_ij / scale = P_ij (dropout(dP_ij) - delta_i)        (j <= i < T; else 0)
//
// with the forward's dropout mask (flash_common), rounded to f16 for the next products. The
// accumulators are named fragments (nothing rescales them), scaled once on their way out.
// Every gradient element has one writer and a fixed order: no atomics, the same bits every
// run. A NaN lse (a poisoned forward row) makes its terms NaN, as in the SIMT body. Each
// shader defines grad_store(part, e, x): element e of dq (part 0), dk (1) or dv (2), so that
// it binds only the gradients it writes, and DS_ROW and DS_COL (score_gradients' layout).

// f_tile, the same in both: S and dP of the step (BQ rows of SS floats), then the rows' lse
// and delta.
const S_AT: u32 = 0u;
const DP_AT: u32 = BQ * SS;
const STATS_AT: u32 = 2u * BQ * SS;

fn coop_source(p: Place, which: u32, r: u32, d: u32) -> f16 {
    if (which == 3u) {
        return dy[out_at(p, r) + d];
    }
    return qkv_half(p, which, r, d);
}

// The score gradients of the step's score rows [row0, row0 + n_rows) (query row i0 + r)
// against columns [col0, col0 + n_cols) (key j0 + c): dS / scale into h_tile[DS_AT] and,
// unless pd_at is NO_PD, dropout(P) into h_tile[pd_at] (element (r, c) at
// r * DS_ROW + c * DS_COL: each shader writes them in the layout its products load), from S and dP
// (f_tile[S_AT], f_tile[DP_AT], SS floats a row) and the rows' lse and delta
// (f_tile[STATS_AT + r], f_tile[STATS_AT + BQ + r]). The lanes take rows ROWS_AT_ONCE at a
// time, LANES_PER_ROW lanes a row with contiguous columns each (one Philox call per 4 keys).
// Only a subgroup that owns rows calls it.
fn score_gradients(
    p: Place,
    rows: Span,
    cols: Span,
    pd_at: u32,
    s: Slab,
    mask: ptr<function, Mask>,
) {
    let per_lane = cols.n / LANES_PER_ROW;
    let c0 = cols.first + (s.lane % LANES_PER_ROW) * per_lane;
    for (var it = 0u; it < rows.n / s.rows_at_once; it++) {
        let r = rows.first + it * s.rows_at_once + s.lane / LANES_PER_ROW;
        let i = rows.pos + r;
        let lse_i = f_tile[STATS_AT + r];
        let delta_i = f_tile[STATS_AT + BQ + r];
        let e_row = (p.bh * params.t + i) * params.t + cols.pos; // dropout element of (i, cols.pos)
        for (var k = 0u; k < per_lane; k++) {
            let jj = c0 + k;
            var pd = 0.0;
            var ds = 0.0;
            if (i < params.t && cols.pos + jj <= i) {
                let prob = exp(params.scale * f_tile[S_AT + r * SS + jj] - lse_i);
                if (pd_at != NO_PD) {
                    pd = mask_apply(mask, e_row + jj, prob);
                }
                ds = prob * (mask_apply(mask, e_row + jj, f_tile[DP_AT + r * SS + jj]) - delta_i);
            }
            if (pd_at != NO_PD) {
                h_tile[pd_at + r * DS_ROW + jj * DS_COL] = f16_from_f32(pd);
            }
            h_tile[DS_AT + r * DS_ROW + jj * DS_COL] = f16_from_f32(ds);
        }
    }
}

// A span of score rows or columns: `n` from `first`, where index 0 is position `pos` (a query
// row or a key).
struct Span {
    first: u32,
    n: u32,
    pos: u32,
}

const NO_PD: u32 = 0xffffffffu;

// The rows' lse and delta, f32, at f_tile[at] and f_tile[at + BQ] (0 past T).
fn stage_row_stats(p: Place, i0: u32, at: u32, tid: u32) {
    for (var r = tid; r < BQ; r += THREADS) {
        let i = i0 + r;
        var l = 0.0;
        var d = 0.0;
        if (i < params.t) {
            l = lse_load(p.bh * params.t + i);
            d = delta_load(p.bh * params.t + i);
        }
        f_tile[at + r] = l;
        f_tile[at + BQ + r] = d;
    }
}

// factor * accumulator c into dq (part 0), dk (1) or dv (2): rows [pos0, pos0 + FRAG),
// channels [d0, d0 + FRAG), through the subgroup's scratch at f_tile[scratch].
fn write_grad(c: FragC, p: Place, part: u32, pos0: u32, d0: u32, factor: f32, scratch: u32, s: Slab) {
    if (s.owns) {
        store_scores(c, scratch, FRAG);
    }
    sync_subgroup();
    for (var e = s.lane; s.owns && e < FRAG * FRAG; e += s.lanes) {
        let pos = pos0 + e / FRAG;
        let d = d0 + e % FRAG;
        if (pos < params.t && d < HS) {
            grad_store(part, qkv_at(p, pos, part) + d, factor * f_tile[scratch + e]);
        }
    }
    sync_subgroup();
}

// ---- end the tensor-core attention's backward kernels -----------------------------------------
