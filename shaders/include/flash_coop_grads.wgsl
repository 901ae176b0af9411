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
// it binds only the gradients it writes.

fn coop_source(p: Place, which: u32, r: u32, d: u32) -> f16 {
    if (which == 3u) {
        return dy[out_at(p, r) + d];
    }
    let e = qkv_at(p, r, which) + d;
    if (which == 0u) {
        return q[e];
    }
    if (which == 1u) {
        return k[e];
    }
    return v[e];
}

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
fn write_grad(c: FragC, p: Place, part: u32, pos0: u32, d0: u32, factor: f32, scratch: u32, lane: u32) {
    coopStoreT(c, &f_tile[scratch], FRAG);
    sync_subgroup();
    for (var e = lane; e < FRAG * FRAG; e += SUBGROUP) {
        let pos = pos0 + e / FRAG;
        let d = d0 + e % FRAG;
        if (pos < params.t && d < HS) {
            grad_store(part, qkv_at(p, pos, part) + d, factor * f_tile[scratch + e]);
        }
    }
    sync_subgroup();
}

// ---- end the tensor-core attention's backward kernels -----------------------------------------
