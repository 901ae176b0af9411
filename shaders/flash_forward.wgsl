// Fused causal attention, forward (FlashAttention-2's shape, SIMT body): for each head,
// y = dropout(softmax(scale * q kᵀ, causal)) v without ever storing the T x T scores.
//
// One workgroup per (batch * head, block of WG query rows), one thread per query row. Keys
// and values stream by in tiles of TILE rows (through workgroup memory when TILED); each
// thread keeps its row's running max m, running sum l and output accumulator in f32 (online
// softmax), rescaling once per tile. It writes y (the compute dtype) and the row log-sum-exp
// lse = m + log(l) (f32), which is all the backward needs to recompute the probabilities.
//
// Numerics: scores and probabilities are f32, never rounded to the low dtype (the unfused
// path stores S in the low dtype and rounds the dropped-out P before P·V); the softmax is the
// unfused path's up to reassociation. Non-finite logits follow PyTorch's masked_fill(-inf) +
// softmax: a NaN or +inf logit, or a row of -inf only, makes the row's output and lse NaN; a
// -inf logit alone has p = 0.

#tensor q 1 read
#tensor k 8 read
#tensor v 9 read
#tensor y 2 read_write
#tensor lse 3 read_write
#include logit_class
#include flash_common
#include flash_tiles

// The staged tensors are keys: k (0) and v (1).
fn tile_source(p: Place, keys: bool, which: u32, r: u32, d: u32) -> f32 {
    return qkv_load(p, r, 1u + which, d);
}

// One query row's online-softmax state.
struct Row {
    m: f32,    // running max of the finite scaled logits (-F32_MAX before any)
    l: f32,    // running Σ exp(x - m) over the finite logits
    seen: u32, // bit 0: some finite logit; bit 1: some NaN or +inf
}

fn store_y(at: u32, v: ptr<function, array<f32, HS>>) {
    for (var d = 0u; d < HS; d += store_width(at + d, d)) {
        if (store_width(at + d, d) == 2u) {
            y_store2(at + d, vec2<f32>((*v)[d], (*v)[d + 1u]));
        } else {
            y_store(at + d, (*v)[d]);
        }
    }
}

// One tile of keys [j0, j0 + TILE) for query row i < T, j0 <= i: the scores, one rescale of
// the running state, then the tile's share of P·V.
fn tile_step(
    p: Place,
    row: ptr<function, Row>,
    q: ptr<function, array<f32, HS>>,
    acc: ptr<function, array<f32, HS>>,
    mask: ptr<function, Mask>,
    e_row: u32,
    i: u32,
    j0: u32,
) {
    // Keys j0 .. j0 + n - 1 are unmasked (j <= i < T).
    let n = min(TILE, i + 1u - j0);
    var s: array<f32, TILE>;
    var tile_max = -F32_MAX;
    for (var jj = 0u; jj < n; jj++) {
        var dot = 0.0;
        for (var d = 0u; d < HS; d++) {
            dot += (*q)[d] * staged(p, true, 0u, j0, jj, d);
        }
        let x = params.scale * dot;
        let c = logit_class(x);
        if (c == 0u) {
            tile_max = max(tile_max, x);
            (*row).seen = (*row).seen | 1u;
        } else if (c == 2u) {
            (*row).seen = (*row).seen | 2u;
        }
        s[jj] = x;
    }
    let m_new = max((*row).m, tile_max);
    let corr = exp((*row).m - m_new);
    (*row).l = (*row).l * corr;
    for (var d = 0u; d < HS; d++) {
        (*acc)[d] = (*acc)[d] * corr;
    }
    for (var jj = 0u; jj < n; jj++) {
        let x = s[jj];
        if (logit_class(x) != 0u) {
            continue;
        }
        let e = exp(x - m_new);
        (*row).l += e;
        // A dropped probability adds nothing (as FlashAttention skips it).
        let w = mask_apply(mask, e_row + j0 + jj, e);
        if (w != 0.0) {
            for (var d = 0u; d < HS; d++) {
                (*acc)[d] += w * staged(p, true, 1u, j0, jj, d);
            }
        }
    }
    (*row).m = m_new;
}

@compute @workgroup_size(WG)
fn flash_forward(#workgroup_builtins) {
    // This thread's query row: its online-softmax state, q, and the output accumulator.
    var row = Row(-F32_MAX, 0.0, 0u);
    var q: array<f32, HS>;
    var acc: array<f32, HS>; // zeros
    var mask = mask_new();
    let p = place_of(wid, nwg);
    if (p.bh >= params.batch_heads) {
        return;
    }
    let i = p.first + lid;
    let valid = i < params.t;
    if (valid) {
        q = qkv_row(p, i, 0u);
    }
    // Keys this block needs: up to its last row (the causal mask), uniform across the group.
    let kend = min(params.t, p.first + WG);
    let e_row = (p.bh * params.t + i) * params.t; // dropout element of (i, 0)

    for (var j0 = 0u; j0 < kend; j0 += TILE) {
        stage_tiles(p, true, j0, lid);
        if (valid && j0 <= i) {
            tile_step(p, &row, &q, &acc, &mask, e_row, i, j0);
        }
    }
    if (!valid) {
        return;
    }
    // A NaN/+inf logit, or no finite one (all -inf), poisons the row.
    let poisoned = row.seen != 1u;
    var out: array<f32, HS>;
    let inv = 1.0 / row.l;
    for (var d = 0u; d < HS; d++) {
        out[d] = acc[d] * inv;
        if (poisoned) {
            out[d] = nan_of(0u);
        }
    }
    store_y(out_at(p, i), &out);
    var l = row.m + log(row.l);
    if (poisoned) {
        l = nan_of(0u);
    }
    lse_store(p.bh * params.t + i, l);
}
