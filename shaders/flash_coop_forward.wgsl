// Fused causal attention, forward, on cooperative matrices (tensor cores): the online softmax
// of shaders/flash_forward.wgsl with S = Q·Kᵀ and O += P·V on f16 fragments accumulated in
// f32 (shaders/include/flash_coop.wgsl), for native f16 storage where tensor cores are used.
//
// One workgroup per (batch * head, block of BQ query rows). Per block of BKV keys: stage k,
// the score fragments into f_tile, then one thread per query row runs the online softmax in
// f32 (running max, sum and the NaN/inf classes in workgroup memory, exactly as the SIMT
// body), writing P = dropout(exp(x - m)) in f16; stage v over k, and each subgroup's P·V
// fragments go through its FRAG x FRAG scratch into the output accumulators its lanes keep
// in f32 registers, rescaled there by the row's correction (a fragment cannot scale its rows).
// The outputs are the SIMT body's: y (f16) and the row log-sum-exp (f32), with the same
// poisoning rules; they differ from it by reassociation and by P's rounding to f16.

enable wgpu_cooperative_matrix;

#tensor qkv 1 read
#tensor y 2 read_write
#tensor lse 3 read_write
#include logit_class
#include flash_common
#include tile_staging
#include flash_coop

const PRODUCTS: u32 = 1u;
// h_tile: the query rows, the key block (then the value block), P.
const Q_AT: u32 = 0u;
const KV_AT: u32 = BQ * HSP;
const P_AT: u32 = KV_AT + BKV * HSP;
const H_TILE: u32 = P_AT + BQ * BKV;
// f_tile: the scores, then each subgroup's FRAG x FRAG scratch.
const F_TILE: u32 = max(BQ * BKV, SUBGROUPS * FRAG * FRAG);
// The output's fragments, and the accumulator elements each lane keeps.
const O_JOBS: u32 = (BQ / FRAG) * (HSP / FRAG);
const O_LANE: u32 = FRAG * FRAG / SUBGROUP;

// Each query row's online-softmax state (flash_forward.wgsl's Row) and this block's rescale.
var<workgroup> row_m: array<f32, BQ>;
var<workgroup> row_l: array<f32, BQ>;
var<workgroup> row_seen: array<u32, BQ>;
var<workgroup> row_corr: array<f32, BQ>;

fn coop_source(p: Place, which: u32, r: u32, d: u32) -> f32 {
    return qkv_load(qkv_at(p, r, which) + d);
}

// Query row r of the block against keys [j0, j0 + BKV): the scores' classes and maximum, one
// rescale of the running state, and the row of P (zero where masked or dropped).
fn softmax_row(p: Place, r: u32, j0: u32, mask: ptr<function, Mask>) {
    let i = p.first + r;
    var n = 0u; // unmasked keys: j0 <= j <= i < T
    if (i < params.t && j0 <= i) {
        n = min(BKV, i + 1u - j0);
    }
    var tile_max = -F32_MAX;
    var seen = row_seen[r];
    for (var jj = 0u; jj < n; jj++) {
        let x = params.scale * f_tile[r * BKV + jj];
        let c = logit_class(x);
        if (c == 0u) {
            tile_max = max(tile_max, x);
            seen = seen | 1u;
        } else if (c == 2u) {
            seen = seen | 2u;
        }
    }
    let m_new = max(row_m[r], tile_max);
    let corr = exp(row_m[r] - m_new);
    var l = row_l[r] * corr;
    let e_row = (p.bh * params.t + i) * params.t + j0; // dropout element of (i, j0)
    for (var jj = 0u; jj < BKV; jj++) {
        var w = 0.0;
        let x = params.scale * f_tile[r * BKV + jj];
        if (jj < n && logit_class(x) == 0u) {
            let e = exp(x - m_new);
            l += e;
            w = mask_apply(mask, e_row + jj, e);
        }
        h_tile[P_AT + r * BKV + jj] = f16_from_f32(w);
    }
    row_m[r] = m_new;
    row_l[r] = l;
    row_seen[r] = seen;
    row_corr[r] = corr;
}

// O = O * corr + P·V for this subgroup's output fragments; o[t * O_LANE + k] is element
// lane + k * SUBGROUP of its job t's fragment.
fn value_products(o: ptr<function, array<f32, O_JOBS / SUBGROUPS * O_LANE>>, sg: u32, lane: u32) {
    let scratch = sg * FRAG * FRAG;
    for (var t = 0u; t < O_JOBS / SUBGROUPS; t++) {
        let u = sg + SUBGROUPS * t;
        let fr = u / (HSP / FRAG);
        let fc = u % (HSP / FRAG);
        let c = product_ab(FragC(), P_AT + fr * FRAG * BKV, BKV, KV_AT + fc * FRAG, HSP, BKV / FRAG);
        let out = &f_tile[scratch];
        coopStoreT(c, out, FRAG);
        workgroupBarrier();
        for (var k = 0u; k < O_LANE; k++) {
            let e = lane + k * SUBGROUP;
            let at = t * O_LANE + k;
            (*o)[at] = (*o)[at] * row_corr[fr * FRAG + e / FRAG] + f_tile[scratch + e];
        }
        workgroupBarrier();
    }
}

@compute @workgroup_size(THREADS)
fn flash_coop_forward(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
    @builtin(subgroup_id) sg: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    var o: array<f32, O_JOBS / SUBGROUPS * O_LANE>; // zeros
    var mask = mask_new();
    let p = place_of(wid, nwg);
    if (p.bh >= params.batch_heads) {
        return;
    }
    stage_rows(p, 0u, p.first, BQ, Q_AT, tid);
    for (var r = tid; r < BQ; r += THREADS) {
        row_m[r] = -F32_MAX;
        row_l[r] = 0.0;
        row_seen[r] = 0u;
    }
    // Keys up to the block's last row (the causal mask), uniform across the group.
    let kend = min(params.t, p.first + BQ);
    for (var j0 = 0u; j0 < kend; j0 += BKV) {
        workgroupBarrier();
        stage_rows(p, 1u, j0, BKV, KV_AT, tid);
        workgroupBarrier();
        score_products(Q_AT, KV_AT, sg);
        workgroupBarrier();
        for (var r = tid; r < BQ; r += THREADS) {
            softmax_row(p, r, j0, &mask);
        }
        workgroupBarrier();
        stage_rows(p, 2u, j0, BKV, KV_AT, tid);
        workgroupBarrier();
        value_products(&o, sg, lane);
    }
    // y = O / l; a NaN/+inf logit, or no finite one (all -inf), poisons the row.
    for (var t = 0u; t < O_JOBS / SUBGROUPS; t++) {
        let u = sg + SUBGROUPS * t;
        for (var k = 0u; k < O_LANE; k++) {
            let e = lane + k * SUBGROUP;
            let r = (u / (HSP / FRAG)) * FRAG + e / FRAG;
            let d = (u % (HSP / FRAG)) * FRAG + e % FRAG;
            let i = p.first + r;
            if (i < params.t && d < HS) {
                var v = o[t * O_LANE + k] * (1.0 / row_l[r]);
                if (row_seen[r] != 1u) {
                    v = nan_of(0u);
                }
                y_store(out_at(p, i) + d, v);
            }
        }
    }
    for (var r = tid; r < BQ; r += THREADS) {
        let i = p.first + r;
        if (i < params.t) {
            var l = row_m[r] + log(row_l[r]);
            if (row_seen[r] != 1u) {
                l = nan_of(0u);
            }
            lse_store(p.bh * params.t + i, l);
        }
    }
}
