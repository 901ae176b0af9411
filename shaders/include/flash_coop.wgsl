// ---- fused attention on cooperative matrices (tensor cores): shared by
// shaders/flash_coop_forward.wgsl and shaders/flash_coop_backward.wgsl -------------------------
// The SIMT bodies' algorithm (shaders/flash_forward.wgsl, shaders/flash_backward.wgsl) with
// the products on f16 fragments accumulated in f32. Softmax, masks, dropout, the row
// log-sum-exp and every statistic stay f32, in threads and workgroup memory; only the
// probabilities P and the score gradients dS are rounded to f16 to enter a product, as
// FlashAttention does.
//
// A workgroup is SUBGROUPS = 4 subgroups of SUBGROUP lanes. A product is cut into FRAG x FRAG
// output fragments ("jobs"), dealt round robin: job u to subgroup u % SUBGROUPS. The launch
// sizes make every job count a multiple of SUBGROUPS, so each subgroup runs the same number
// and the barriers between products stay in uniform control flow.
//
// f16 operands live in one workgroup array, h_tile, at offsets each shader lays out: rows of a
// head-sized tensor take HSP halves each (channels contiguous, zero past HS and past T). f32
// results go to f_tile. Offsets and strides are multiples of 8 halves (16 bytes), as Vulkan's
// cooperative loads require.
//
// Constants (src/ops/flash_attention/coop.rs): HS, HSP (HS rounded up so every job count
// divides), BQ (query rows per block), BKV (keys per block), SPLIT (depth parts of a score
// product) and coop_consts' SUBGROUP, FRAG and fragment types FragA, FragB, FragC. Each
// shader defines PRODUCTS (score products per block), H_TILE and F_TILE (array sizes) and
// coop_source(p, which, r, d): channel d of row r of q (which 0), k (1), v (2) or dy (3).

const SUBGROUPS: u32 = 4u;
const THREADS: u32 = SUBGROUPS * SUBGROUP;
// include/tile_staging.wgsl's depth: the channels of a staged row.
const BK: u32 = HSP;

var<workgroup> h_tile: array<f16, H_TILE>;
var<workgroup> f_tile: array<f32, F_TILE>;

// Rows [r0, r0 + rows) of tensor `which` into h_tile at `at` (exact: the storage is f16).
// Consecutive threads read consecutive channels (tile_position with the depth contiguous).
fn stage_rows(p: Place, which: u32, r0: u32, rows: u32, at: u32, tid: u32) {
    for (var l = tid; l < rows * HSP; l += THREADS) {
        let pos = tile_position(l, rows, true); // (row, channel)
        var v = 0.0;
        if (r0 + pos.x < params.t && pos.y < HS) {
            v = coop_source(p, which, r0 + pos.x, pos.y);
        }
        h_tile[at + pos.x * HSP + pos.y] = f16(v);
    }
}

// A·Bᵀ, `steps` fragments deep, with A's and B's rows at h_tile[a] and h_tile[b] (stride
// HSP, depth contiguous): the scores Q·Kᵀ and dO·Vᵀ. Bᵀ loads column-major.
fn product_abt(a: u32, b: u32, steps: u32) -> FragC {
    var acc = FragC();
    for (var s = 0u; s < steps; s++) {
        let fa = coopLoadT<FragA>(&h_tile[a + s * FRAG], HSP);
        let fb = coopLoad<FragB>(&h_tile[b + s * FRAG], HSP);
        acc = coopMultiplyAdd(fa, fb, acc);
    }
    return acc;
}

// acc + A·B: A's rows at h_tile[a] (stride lda, depth contiguous), B's rows (one per depth
// step) at h_tile[b] (stride ldb): P·V and dS·K.
fn product_ab(acc: FragC, a: u32, lda: u32, b: u32, ldb: u32, steps: u32) -> FragC {
    var c = acc;
    for (var s = 0u; s < steps; s++) {
        let fa = coopLoadT<FragA>(&h_tile[a + s * FRAG], lda);
        let fb = coopLoadT<FragB>(&h_tile[b + s * FRAG * ldb], ldb);
        c = coopMultiplyAdd(fa, fb, c);
    }
    return c;
}

// acc + Aᵀ·B: A stored with one row per depth step at h_tile[a] (stride lda; Aᵀ loads
// column-major), B likewise at h_tile[b]: Pᵀ·dO and dSᵀ·Q.
fn product_atb(acc: FragC, a: u32, lda: u32, b: u32, ldb: u32, steps: u32) -> FragC {
    var c = acc;
    for (var s = 0u; s < steps; s++) {
        let fa = coopLoad<FragA>(&h_tile[a + s * FRAG * lda], lda);
        let fb = coopLoadT<FragB>(&h_tile[b + s * FRAG * ldb], ldb);
        c = coopMultiplyAdd(fa, fb, c);
    }
    return c;
}

// ---- the score products of a block ------------------------------------------------------------
// Product pr (0: Q·Kᵀ; 1: dO·Vᵀ where PRODUCTS is 2) of the BQ query rows at h_tile[rows_at]
// (then dy's BQ rows) and the BKV keys at h_tile[keys_at] (then v's BKV rows), BQ x BKV in
// f32, row-major. With SPLIT > 1 (too few fragments for four subgroups) the depth HSP is cut
// in SPLIT parts: part `part` of product pr lies at f_tile[(part * PRODUCTS + pr) * BQ * BKV],
// and `score` adds the parts in order.
const S_FRAGS: u32 = (BQ / FRAG) * (BKV / FRAG);
const SCORE_JOBS: u32 = PRODUCTS * S_FRAGS * SPLIT;
const SCORE_STEPS: u32 = HSP / FRAG / SPLIT;

fn score_products(rows_at: u32, keys_at: u32, sg: u32) {
    for (var t = 0u; t < SCORE_JOBS / SUBGROUPS; t++) {
        let u = sg + SUBGROUPS * t;
        let part = u / (PRODUCTS * S_FRAGS);
        let pr = (u / S_FRAGS) % PRODUCTS;
        let fr = (u % S_FRAGS) / (BKV / FRAG);
        let fc = (u % S_FRAGS) % (BKV / FRAG);
        let d0 = part * SCORE_STEPS * FRAG;
        let a = rows_at + (pr * BQ + fr * FRAG) * HSP + d0;
        let b = keys_at + (pr * BKV + fc * FRAG) * HSP + d0;
        let c = product_abt(a, b, SCORE_STEPS);
        let out = &f_tile[(part * PRODUCTS + pr) * BQ * BKV + fr * FRAG * BKV + fc * FRAG];
        coopStoreT(c, out, BKV);
    }
}

// Element x (row-major in the block) of score product pr, its parts added in order.
fn score(pr: u32, x: u32) -> f32 {
    var s = f_tile[pr * BQ * BKV + x];
    for (var part = 1u; part < SPLIT; part++) {
        s += f_tile[(part * PRODUCTS + pr) * BQ * BKV + x];
    }
    return s;
}

// ---- end fused attention on cooperative matrices ----------------------------------------------
