// ---- fused attention on cooperative matrices (tensor cores): shared by
// shaders/flash_coop_forward.wgsl, shaders/flash_coop_backward.wgsl (dk, dv) and
// shaders/flash_coop_dq.wgsl -----------------------------------------------------------------
// The SIMT bodies' algorithm (shaders/flash_forward.wgsl, shaders/flash_backward.wgsl) with
// the products on f16 fragments accumulated in f32. Softmax, masks, dropout, the row
// log-sum-exp and every statistic stay f32; only the probabilities P and the score gradients
// dS are rounded to f16 to enter a product, as FlashAttention does.
//
// FlashAttention-2's partition: a workgroup is SUBGROUPS = 4 subgroups of SUBGROUP lanes, and
// subgroup sg owns one fragment row of the block, rows [sg * FRAG, sg * FRAG + FRAG) (query
// rows in the forward and dq, keys in dk/dv). It keeps the operand it reuses on every step in
// named fragments, one per channel fragment (`#for d in 0..D_FRAGS`: qa0, qa1, ..., no arrays
// of fragments), computes its own scores into its own rows (or
// columns) of f_tile, runs the softmax or the score gradients of its own slab with the lanes
// spread along each row (LANES_PER_ROW lanes, reduced by shuffles), and accumulates its own
// outputs in named fragments. So workgroup barriers only guard the staging of the streamed
// operand; the rest is synchronised per subgroup (sync_subgroup).
//
// Correct at any subgroup size the driver picks (wgpu 30 cannot require one; AMD's RDNA3
// offers 32 or 64), as coop_gemm's tile loop is: the workgroup is laid out for SUBGROUP lanes
// (the adapter's largest); where the driver runs smaller subgroups (down to SUBGROUP_MIN)
// there are more of them, and those past SUBGROUPS own no rows (Slab.owns): they stage (every
// thread stages by its index in the workgroup) and meet every barrier, and skip the products
// and every write of their own. Lane loops step by the size the subgroup runs at.
//
// f16 operands live in h_tile, f32 in f_tile, at offsets each shader lays out. Each operand is
// staged (or written) in the layout its fragment load wants: the depth of the product it
// enters contiguous, so that a lane's part of a fragment is one wide load (AMD's WMMA reads a
// row of A or a column of B per lane; NVIDIA's ldmatrix transposes either way). Head-sized
// rows take QS = HSP + 8 halves (channels contiguous, zero past HS and past T) where channels
// are the depth (S = Q·Kᵀ, dP = dO·Vᵀ); where rows are the depth (O += P·V, dq += dS·K,
// dv += Pᵀ·dO, dk += dSᵀ·Q) the operand is staged transposed, a channel's row holding the
// block's rows contiguous (stage_columns, stage_rows_and_columns). Score rows take keys + 4
// floats, P and dS rows their depth + 8 halves: every stride is a multiple of 16 bytes, as
// Vulkan's cooperative loads require, and none is a power of two (no bank conflicts between
// rows). Each shader's const_asserts check its layout against H_TILE and F_TILE, the sizes
// src/ops/flash_attention/coop_layout.rs computes (and checks against the adapter's limit).
//
// Constants (coop_layout.rs): HS, HSP (HS rounded up to whole fragments), D_FRAGS (HSP / FRAG),
// BQ (query rows of a block), BKV (keys of a block), BLOCK (rows per workgroup), KV_REGIONS, PD_OVER,
// LANES_PER_ROW,
// SUBGROUP_SYNC, H_TILE, F_TILE, SUBGROUP, SUBGROUP_MIN, FRAG and the fragment types FragA,
// FragB, FragC.
// Each shader defines coop_source(p, which, r, d): channel d of row r of q (which 0), k (1),
// v (2) (qkv_half) or dy (3).

const SUBGROUPS: u32 = 4u;
const THREADS: u32 = SUBGROUPS * SUBGROUP;
const QS: u32 = HSP + 8u;
// Score rows (f32) and P or dS rows (f16) against a block of keys.
const SS: u32 = BKV + 4u;
const PS: u32 = BKV + 8u;
// Rows of a slab handled at once in the elementwise phase on subgroups of SUBGROUP lanes
// (Slab.rows_at_once: fewer on smaller ones, a smaller power of two).
const ROWS_AT_ONCE: u32 = SUBGROUP / LANES_PER_ROW;

const_assert D_FRAGS >= 1u && D_FRAGS <= 8u;
const_assert LANES_PER_ROW >= 1u && LANES_PER_ROW <= SUBGROUP_MIN && SUBGROUP_MIN <= SUBGROUP;

// Where an invocation of a kernel runs (the kernels' one parameter).
#include invocation

var<workgroup> h_tile: array<f16, H_TILE>;
var<workgroup> f_tile: array<f32, F_TILE>;

// The subgroup's fragment row of the block, rows (or keys) [first, first + FRAG), and its
// lanes. A subgroup past SUBGROUPS (smaller subgroups than SUBGROUP) owns none: its `first`
// is the last subgroup's, so its loads stay in range, and it writes nothing.
struct Slab {
    first: u32,
    owns: bool,
    lane: u32,
    lanes: u32,
    rows_at_once: u32,
}

fn slab_of(inv: Invocation) -> Slab {
    // Where the size is fixed the constants stand in (the compiler folds the checks away).
    let fixed = SUBGROUP_MIN == SUBGROUP;
    let lanes = select(inv.lanes, SUBGROUP, fixed);
    return Slab(min(inv.sg, SUBGROUPS - 1u) * FRAG, fixed || inv.sg < SUBGROUPS, inv.lane, lanes, lanes / LANES_PER_ROW);
}

// Orders a subgroup's accesses to its own part of workgroup memory: a subgroup barrier, or a
// workgroup barrier where the configuration says so (every subgroup runs the same sequence,
// so the workgroup barrier stays in uniform control flow).
fn sync_subgroup() {
    if (SUBGROUP_SYNC) {
        subgroupBarrier();
    } else {
        workgroupBarrier();
    }
}

// Channel d of row r of q (which 0), k (1) or v (2), in its f16 storage.
fn qkv_half(p: Place, which: u32, r: u32, d: u32) -> f16 {
    let e = qkv_at(p, r, which) + d;
    if (which == 0u) {
        return q[e];
    }
    if (which == 1u) {
        return k[e];
    }
    return v[e];
}

// Channel d of row r of tensor `which`, zero past HS.
fn channel(p: Place, which: u32, r: u32, d: u32) -> f16 {
    if (HS == HSP || d < HS) {
        return coop_source(p, which, r, d);
    }
    return f16(0.0);
}

// Rows [r0, r0 + rows) of tensor `which` into h_tile at `at` (the storage is f16: exact),
// zero past HS and past T. A thread stages runs of 4 channels, so its stores make one 8-byte
// store (HSP, QS and every offset are multiples of 4 halves); consecutive threads take
// consecutive runs of a row.
fn stage_rows(p: Place, which: u32, r0: u32, rows: u32, at: u32, tid: u32) {
    for (var u = tid; u < rows * (HSP / 4u); u += THREADS) {
        let r = u / (HSP / 4u);
        let d = (u % (HSP / 4u)) * 4u;
        var run = vec4<f16>();
        if (r0 + r < params.t) {
            let i = r0 + r;
            run = vec4<f16>(channel(p, which, i, d), channel(p, which, i, d + 1u), channel(p, which, i, d + 2u), channel(p, which, i, d + 3u));
        }
        let e = at + r * QS + d;
        h_tile[e] = run.x;
        h_tile[e + 1u] = run.y;
        h_tile[e + 2u] = run.z;
        h_tile[e + 3u] = run.w;
    }
}

// Channel d of rows [row0, row0 + 4) of tensor `which` (zero past T): rows past T read the
// last row, so no branch stands between the loads.
fn column_run(p: Place, which: u32, row0: u32, d: u32) -> vec4<f16> {
    var run = vec4<f16>();
    for (var i = 0u; i < 4u; i++) {
        let x = channel(p, which, min(row0 + i, params.t - 1u), d);
        run[i] = select(f16(0.0), x, row0 + i < params.t);
    }
    return run;
}

// Rows [r0, r0 + rows) of tensor `which` into h_tile at `at` transposed: channel d's row of
// `stride` halves holds the rows' channel d contiguous (zero past HS and past T). A thread
// stages a run of 4 rows of one channel (one 8-byte store: rows, stride and every offset are
// multiples of 4 halves); consecutive threads take consecutive channels of the same rows, so
// their global loads are neighbours.
fn stage_columns(p: Place, which: u32, r0: u32, rows: u32, at: u32, stride: u32, tid: u32) {
    for (var u = tid; u < (rows / 4u) * HSP; u += THREADS) {
        let r = (u / HSP) * 4u;
        let d = u % HSP;
        let run = column_run(p, which, r0 + r, d);
        let e = at + d * stride + r;
        h_tile[e] = run.x;
        h_tile[e + 1u] = run.y;
        h_tile[e + 2u] = run.z;
        h_tile[e + 3u] = run.w;
    }
}

// The same rows both ways from the same loads: as rows at `at` (QS halves a row, as
// stage_rows) and transposed at `t_at` (as stage_columns). A thread stages 4 rows of 2
// channels: two 8-byte stores of channel runs, four 4-byte stores of row runs. (4 channels, for
// 8-byte row stores, leave three threads in four idle at head size 16 and hold more
// registers: more static cycles on both classes in the kernel report.)
fn stage_rows_and_columns(p: Place, which: u32, r0: u32, rows: u32, at: u32, t_at: u32, stride: u32, tid: u32) {
    for (var u = tid; u < (rows / 4u) * (HSP / 2u); u += THREADS) {
        let r = (u / (HSP / 2u)) * 4u;
        let d = (u % (HSP / 2u)) * 2u;
        let c0 = column_run(p, which, r0 + r, d);
        let c1 = column_run(p, which, r0 + r, d + 1u);
        for (var i = 0u; i < 4u; i++) {
            let e = at + (r + i) * QS + d;
            h_tile[e] = c0[i];
            h_tile[e + 1u] = c1[i];
        }
        let e = t_at + d * stride + r;
        h_tile[e] = c0.x;
        h_tile[e + 1u] = c0.y;
        h_tile[e + 2u] = c0.z;
        h_tile[e + 3u] = c0.w;
        h_tile[e + stride] = c1.x;
        h_tile[e + stride + 1u] = c1.y;
        h_tile[e + stride + 2u] = c1.z;
        h_tile[e + stride + 3u] = c1.w;
    }
}

// The cooperative operations go through these functions: naga's uniformity analysis knows
// workgroup uniformity only, and the subgroup-uniform branches and loops around them (a
// subgroup's own rows) would fail its check inside the entry points.
fn mma(a: FragA, b: FragB, c: FragC) -> FragC {
    return coopMultiplyAdd(a, b, c);
}
// A of rows [at, at + FRAG) of a P or dS block (row-major, rows `stride` halves apart: its
// depth contiguous; dk/dv writes them transposed, keys as rows).
fn block_a(at: u32, stride: u32) -> FragA {
    return coopLoadT<FragA>(&h_tile[at], stride);
}

// The channel fragment d of a staged head-sized row block, rows [at, at + FRAG): as A
// (row-major: A(m = row, k = channel)) and as B (column-major: B(k = channel, n = row), the
// transpose a product against channels takes).
fn rows_a(at: u32, d: u32) -> FragA {
    return coopLoadT<FragA>(&h_tile[at + d * FRAG], QS);
}
fn rows_b(at: u32, d: u32) -> FragB {
    return coopLoad<FragB>(&h_tile[at + d * FRAG], QS);
}
// The channel fragment d of a block staged transposed (stage_columns, `stride` halves a
// channel), rows [at, at + FRAG) as B's depth: B(k = row, n = channel), column-major.
fn depth_b(at: u32, stride: u32, d: u32) -> FragB {
    return coopLoad<FragB>(&h_tile[at + d * FRAG * stride], stride);
}

#for side in a b
// Rows [first, first + BLOCK) of tensor `which` staged at the start of h_tile (whoever read
// it before is past a workgroup barrier), and the subgroup's rows of them held in the
// fragments f0, f1, ... as operand {side} of products against channels (q and dy as A in
// the forward and dq; k and v as B in dk/dv).
fn hold_{side}(
    p: Place,
    which: u32,
    first: u32,
    s: Slab,
    tid: u32,
#for d in 0..D_FRAGS
    f{d}: ptr<function, Frag{SIDE}>,
#end
) {
    stage_rows(p, which, first, BLOCK, 0u, tid);
    workgroupBarrier();
#for d in 0..D_FRAGS
    *f{d} = rows_{side}(s.first * QS, {d}u);
#end
}

// Two tensors held in turn the same way, `which` in f0, f1, ... then `then` in g0, g1, ...
// (staged over it once every subgroup holds its fragments): k and v in dk/dv, q and dy in dq.
fn hold_two_{side}(
    p: Place,
    which: u32,
    then: u32,
    first: u32,
    s: Slab,
    tid: u32,
#for d in 0..D_FRAGS
    f{d}: ptr<function, Frag{SIDE}>,
    g{d}: ptr<function, Frag{SIDE}>,
#end
) {
    hold_{side}(p, which, first, s, tid,
#for d in 0..D_FRAGS
        f{d},
#end
    );
    workgroupBarrier();
    hold_{side}(p, then, first, s, tid,
#for d in 0..D_FRAGS
        g{d},
#end
    );
}
#end

// acc_d += A·B_d over `frags` fragments of depth: A of block rows [a_at, a_at + FRAG) (P or
// dS, row-major, PS halves a row, fragment f at a_at + f * FRAG), B_d the channel fragment d
// of head-sized rows staged transposed at b_at (PS halves a channel; rows are the depth,
// fragment f at b_at + f * FRAG): O += P·V in the forward, dq += dS·k.
fn add_block_products(
    a_at: u32,
    b_at: u32,
    frags: u32,
#for d in 0..D_FRAGS
    acc{d}: ptr<function, FragC>,
#end
) {
    for (var f = 0u; f < frags; f++) {
        let a = block_a(a_at + f * FRAG, PS);
        let b = b_at + f * FRAG;
#for d in 0..D_FRAGS
        *acc{d} = mma(a, depth_b(b, PS, {d}u), *acc{d});
#end
    }
}

// Fragment c out to f_tile[at], rows `stride` floats apart, and back.
fn store_scores(c: FragC, at: u32, stride: u32) {
    coopStoreT(c, &f_tile[at], stride);
}
fn load_scores(at: u32, stride: u32) -> FragC {
    return coopLoadT<FragC>(&f_tile[at], stride);
}

// Reductions over the LANES_PER_ROW lanes of one row (aligned groups of lanes): a butterfly of
// shuffles, so every lane of the group ends with the same bits in a fixed order.
fn row_max(v: f32) -> f32 {
    var m = v;
    for (var o = LANES_PER_ROW / 2u; o > 0u; o /= 2u) {
        m = max(m, subgroupShuffleXor(m, o));
    }
    return m;
}
fn row_sum(v: f32) -> f32 {
    var s = v;
    for (var o = LANES_PER_ROW / 2u; o > 0u; o /= 2u) {
        s += subgroupShuffleXor(s, o);
    }
    return s;
}
fn row_or(v: u32) -> u32 {
    var s = v;
    for (var o = LANES_PER_ROW / 2u; o > 0u; o /= 2u) {
        s |= subgroupShuffleXor(s, o);
    }
    return s;
}

// The last valid row of rows [first, first + FRAG) (first < T).
fn last_row(first: u32) -> u32 {
    return min(first + FRAG, params.t) - 1u;
}

// Whether rows [first, first + FRAG) hold a valid row that sees key `key` (key <= row < T).
fn rows_see(first: u32, key: u32) -> bool {
    return first < params.t && key <= last_row(first);
}

// Of `width` keys from j0, how many fragments hold a key that one of the rows
// [first, first + FRAG) sees (the causal mask): 0 when every key comes after them. Fragments
// that nobody sees are never multiplied, so a non-finite value past the diagonal's fragment
// reaches no earlier row.
fn seen_fragments(j0: u32, first: u32, width: u32) -> u32 {
    if (!rows_see(first, j0)) {
        return 0u;
    }
    return min(width / FRAG, (last_row(first) - j0) / FRAG + 1u);
}

// ---- end fused attention on cooperative matrices ----------------------------------------------
