// The tile loop of the cooperative-matrix (tensor-core) kernels, shaders/matmul_coop.wgsl and
// shaders/conv_coop.wgsl, on the structure of llama.cpp's Vulkan coopmat `mul_mm`:
// out[BM x BN tile] = A[rows, k range] · B[k range, cols], f16 fragments accumulated in f32.
//
// - A workgroup is SG_M x SG_N subgroups of SUBGROUP lanes (the adapter's largest subgroup
//   size); subgroup s owns the FM x FN fragments of block (s / SG_N, s % SG_N).
//   Accumulators are named variables (acc_0_0, acc_0_1, ...) and the hot loop is straight-line
//   code, both written out per variant by `#for` blocks: no array of fragments, no loop over
//   fragments.
// - Correct at any subgroup size the driver picks (wgpu 30 cannot require one, and AMD's
//   RDNA3 offers 32 or 64): the workgroup is laid out for SUBGROUP lanes; where the driver
//   runs smaller subgroups there are more of them, and those past SG_M x SG_N only stage
//   (every thread stages by its index in the workgroup, never by its subgroup) and skip the
//   products. Lane loops use the subgroup size the kernel runs at.
// - Both operands are staged the way their fragments are read: K contiguous, A as [BM rows]
//   and B as [BN columns] of BK halves (each row padded by 8 halves: 16-byte row starts for
//   the fragment loads, rows in different banks), so an A fragment is a row-major load and a B
//   fragment a column-major one, each lane reading whole 8- or 16-byte runs of k.
// - How an operand arrives from memory, in chunks of 8 halves (one 16-byte load where the
//   including shader can): K-contiguous (A_KMAJOR / B_KMAJOR false: a plain A, a transposed
//   B), each chunk is one row's 8 k steps and goes to workgroup memory as it came; k-major
//   (a transposed A, a plain B, a convolution's pixel gather), each chunk is 8 rows (or
//   columns) of one k step, so a thread takes KB chunks of consecutive k and writes them
//   transposed: 8 runs of KB halves (8-byte stores), never single halves.
// - Double buffering with a register prefetch: while the fragments multiply one buffer, each
//   thread holds its units of the next k slice in registers and writes them to the other
//   buffer afterwards; one workgroup barrier per k slice.
// - The epilogue stores each fragment straight to memory with a cooperative store where it
//   may (DIRECT_STORE, the matmul's only: an f32 output c, or split-K partial sums, of whole
//   16-byte-aligned tiles with nothing to add; it names matmul_common's c, partials and
//   params), else through its subgroup's FRAG x FRAG f32 scratch, synchronised by subgroup
//   barriers (SG_BARRIER) or workgroup barriers, into the including shader's epilogue.
//
// The including shader defines what the tile loop reads and where results go:
//   coop_chunk_a(base, i, r, c, row0, k0)       8 halves of the k slice at k0 (zero past the
//     -> Halves                                 GEMM or the depth): K-contiguous, row r
//   coop_chunk_b(base, i, r, c, col0, k0)       (column r of B), k c .. c + 8; k-major, k row
//     -> Halves                                 r, rows (columns) c .. c + 8, the unit's i-th
//                                               k row (r minus the unit's first)
//   coop_base_a(r, c, row0) -> u32              whatever of a chunk's address does not move
//   coop_base_b(r, c, col0) -> u32              with k (for the unit's first chunk at k0 = 0),
//                                               computed once per thread and handed back as
//                                               `base` (the compiler does not hoist it)
//   coop_store(row, col, v: vec2<f32>)          results (row, col) and (row, col + 1); either
//                                               may lie past the GEMM (the epilogue checks)
// and the launch injects SUBGROUP, FRAG (8 or 16), SG_M, SG_N, FM, FN, BK, A_KMAJOR, B_KMAJOR,
// UNITS_A and UNITS_B (staging units of a slice), LOADS_A and LOADS_B (units per thread),
// KSTEPS (BK / FRAG), SG_BARRIER, DIRECT_STORE, and the fragment types FragA, FragB (f16) and
// FragC (f32).
//
// naga 30.0.1 notes: only square 8x8 and 16x16 shapes exist; a cooperative store takes its
// matrix, pointer and stride from `let`s computed before the call (the store statement is
// pushed before pending expressions are emitted, which can leave its pointer unemitted for the
// SPIR-V writer). naga's uniformity analysis asks cooperative operations for workgroup-uniform
// control flow, where SPIR-V asks for subgroup-uniform (what `sg < SUBGROUPS` is): coop_gemm
// turns that one analysis off.

#include invocation

const SUBGROUPS: u32 = SG_M * SG_N;
const THREADS: u32 = SUBGROUPS * SUBGROUP;
const BM: u32 = SG_M * FM * FRAG;
const BN: u32 = SG_N * FN * FRAG;
// Halves per staged row (k), padded.
const LD: u32 = BK + 8u;
const A_SIZE: u32 = BM * LD;
const B_SIZE: u32 = BN * LD;
// k steps a thread takes together from a k-major operand.
const KB: u32 = 4u;

// Eight consecutive halves of a stored matrix: a chunk (f16 values, so staging never converts).
struct Halves {
    lo: vec4<f16>,
    hi: vec4<f16>,
}

// What one thread stages of one unit: one chunk (K-contiguous) or KB chunks of consecutive k
// (k-major). The launch aliases UnitA and UnitB to one of them.
struct Chunks {
    h0: Halves,
    h1: Halves,
    h2: Halves,
    h3: Halves,
}

// Two buffers of each staged slice, and one f32 fragment per subgroup for the epilogue.
var<workgroup> tile_a: array<f16, 2u * A_SIZE>;
var<workgroup> tile_b: array<f16, 2u * B_SIZE>;
var<workgroup> tile_out: array<f32, SUBGROUPS * FRAG * FRAG>;

// Unit u of a slice: K-contiguous, row u / (BK / 8) at k (u % (BK / 8)) * 8; k-major, rows
// (u / (BK / KB)) * 8 .. + 8 at k (u % (BK / KB)) * KB, so neighbouring threads write
// neighbouring k runs of the same rows (no bank conflicts in the transposed stores).
fn unit_at(u: u32, kmajor: bool) -> vec2<u32> {
    if (kmajor) {
        return vec2<u32>((u / (BK / KB)) * 8u, (u % (BK / KB)) * KB);
    }
    return vec2<u32>(u / (BK / 8u), (u % (BK / 8u)) * 8u);
}

// Where thread tid's unit s lies in a slice (outer row or column, k), computed once per
// thread; `ok` is false where the slice has fewer units than that.
// `base` is the including shader's part of the address that does not move with k.
struct Unit {
    at: vec2<u32>,
    ok: bool,
    base: u32,
}
#for side in a b
// Unit s of thread tid in the slice of operand {side} (outer0: the tile's first row of A or
// column of B).
fn unit_{side}(tid: u32, s: u32, outer0: u32) -> Unit {
    let u = tid + s * THREADS;
    let at = unit_at(u, {SIDE}_KMAJOR);
    var r = at;
    if ({SIDE}_KMAJOR) {
        r = at.yx;
    }
    return Unit(at, UNITS_{SIDE} % THREADS == 0u || u < UNITS_{SIDE}, coop_base_{side}(r.x, r.y, outer0));
}

// A unit of the slice at k0 (zeros for a unit past the slice's).
fn load_{side}(p: Unit, outer0: u32, k0: u32) -> Unit{SIDE} {
    if (!p.ok) {
        return Unit{SIDE}();
    }
#if {SIDE}_KMAJOR
    let r = p.at.y;
    let c = p.at.x;
    return Chunks(coop_chunk_{side}(p.base, 0u, r, c, outer0, k0), coop_chunk_{side}(p.base, 1u, r + 1u, c, outer0, k0), coop_chunk_{side}(p.base, 2u, r + 2u, c, outer0, k0), coop_chunk_{side}(p.base, 3u, r + 3u, c, outer0, k0));
#else
    return coop_chunk_{side}(p.base, 0u, p.at.x, p.at.y, outer0, k0);
#end
}

// Eight halves in a row of a staged tile, from element e (a multiple of 8: one 16-byte store).
fn put_row_{side}(e: u32, h: Halves) {
    tile_{side}[e] = h.lo.x;
    tile_{side}[e + 1u] = h.lo.y;
    tile_{side}[e + 2u] = h.lo.z;
    tile_{side}[e + 3u] = h.lo.w;
    tile_{side}[e + 4u] = h.hi.x;
    tile_{side}[e + 5u] = h.hi.y;
    tile_{side}[e + 6u] = h.hi.z;
    tile_{side}[e + 7u] = h.hi.w;
}
// KB halves along k of a staged tile, from element e (a multiple of KB: one 8-byte store).
fn put_run_{side}(e: u32, v: vec4<f16>) {
    tile_{side}[e] = v.x;
    tile_{side}[e + 1u] = v.y;
    tile_{side}[e + 2u] = v.z;
    tile_{side}[e + 3u] = v.w;
}

// A unit into buffer `buf` of its staged tile: a K-contiguous chunk as it is; KB k-major
// chunks transposed, column j of the chunks becoming row (or column) c + j's run of KB k.
fn put_{side}(buf: u32, p: Unit, v: Unit{SIDE}) {
    if (!p.ok) {
        return;
    }
    let e = buf * {SIDE}_SIZE + p.at.x * LD + p.at.y;
#if {SIDE}_KMAJOR
    put_run_{side}(e, vec4<f16>(v.h0.lo.x, v.h1.lo.x, v.h2.lo.x, v.h3.lo.x));
    put_run_{side}(e + LD, vec4<f16>(v.h0.lo.y, v.h1.lo.y, v.h2.lo.y, v.h3.lo.y));
    put_run_{side}(e + 2u * LD, vec4<f16>(v.h0.lo.z, v.h1.lo.z, v.h2.lo.z, v.h3.lo.z));
    put_run_{side}(e + 3u * LD, vec4<f16>(v.h0.lo.w, v.h1.lo.w, v.h2.lo.w, v.h3.lo.w));
    put_run_{side}(e + 4u * LD, vec4<f16>(v.h0.hi.x, v.h1.hi.x, v.h2.hi.x, v.h3.hi.x));
    put_run_{side}(e + 5u * LD, vec4<f16>(v.h0.hi.y, v.h1.hi.y, v.h2.hi.y, v.h3.hi.y));
    put_run_{side}(e + 6u * LD, vec4<f16>(v.h0.hi.z, v.h1.hi.z, v.h2.hi.z, v.h3.hi.z));
    put_run_{side}(e + 7u * LD, vec4<f16>(v.h0.hi.w, v.h1.hi.w, v.h2.hi.w, v.h3.hi.w));
#else
    put_row_{side}(e, v);
#end
}
#end

// Orders a subgroup's scratch writes before its lanes read them (and reads before the next
// writes). Every subgroup of the workgroup reaches it, so a workgroup barrier is uniform too
// where subgroup barriers are missing.
fn scratch_barrier() {
#if SG_BARRIER
    subgroupBarrier();
#else
    workgroupBarrier();
#end
}

// The tile at (row0, col0) over k in [k_lo, k_hi). Every invocation of the workgroup calls
// it, with the builtins of its entry point (include/invocation.wgsl).
@diagnostic(off, derivative_uniformity)
fn coop_gemm(inv: Invocation, row0: u32, col0: u32, k_lo: u32, k_hi: u32) {
    let tid = inv.tid;
    let sg = inv.sg;
    let lane = inv.lane;
    let lanes = inv.lanes;
    // Subgroups past the tile's (smaller subgroups than SUBGROUP) only stage.
    let in_tile = sg < SUBGROUPS;
    let qr = (sg / SG_N) * FM * FRAG;
    let qc = (sg % SG_N) * FN * FRAG;
#for i in 0..FM
#for j in 0..FN
    var acc_{i}_{j} = FragC();
#end
#end
#for s in 0..LOADS_A
    let ua_{s} = unit_a(tid, {s}u, row0);
    var pa_{s} = UnitA();
#end
#for s in 0..LOADS_B
    let ub_{s} = unit_b(tid, {s}u, col0);
    var pb_{s} = UnitB();
#end
    var steps = 0u;
    if (k_hi > k_lo) {
        steps = (k_hi - k_lo + BK - 1u) / BK;
#for s in 0..LOADS_A
        put_a(0u, ua_{s}, load_a(ua_{s}, row0, k_lo));
#end
#for s in 0..LOADS_B
        put_b(0u, ub_{s}, load_b(ub_{s}, col0, k_lo));
#end
    }
    workgroupBarrier();
    for (var t = 0u; t < steps; t++) {
        let cur = t & 1u;
        // (cur ^ 1, not 1 - cur: the compiler proves a store's alignment from products by
        // constants, which a subtraction hides; unaligned, 16-bit stores stay 16-bit.)
        let nxt = cur ^ 1u;
        // Prefetch the next slice into registers: its loads are in flight while the fragments
        // below multiply. The last step fetches its own slice again (into the buffer no one
        // reads any more): no branch, so the prefetch registers need no copies.
        let k_next = k_lo + min(t + 1u, steps - 1u) * BK;
#for s in 0..LOADS_A
        pa_{s} = load_a(ua_{s}, row0, k_next);
#end
#for s in 0..LOADS_B
        pb_{s} = load_b(ub_{s}, col0, k_next);
#end
        if (in_tile) {
            let a0 = cur * A_SIZE + qr * LD;
            let b0 = cur * B_SIZE + qc * LD;
#for kk in 0..KSTEPS
            {
#for i in 0..FM
                let fa_{i} = coopLoadT<FragA>(&tile_a[a0 + {i}u * FRAG * LD + {kk}u * FRAG], LD);
#end
#for j in 0..FN
                let fb_{j} = coopLoad<FragB>(&tile_b[b0 + {j}u * FRAG * LD + {kk}u * FRAG], LD);
#end
#for i in 0..FM
#for j in 0..FN
                acc_{i}_{j} = coopMultiplyAdd(fa_{i}, fb_{j}, acc_{i}_{j});
#end
#end
            }
#end
        }
        // The other buffer was last read before the previous barrier: free to write.
#for s in 0..LOADS_A
        put_a(nxt, ua_{s}, pa_{s});
#end
#for s in 0..LOADS_B
        put_b(nxt, ub_{s}, pb_{s});
#end
        workgroupBarrier();
    }

    let scratch = min(sg, SUBGROUPS - 1u) * FRAG * FRAG;
#for i in 0..FM
#for j in 0..FN
    {
        let r = acc_{i}_{j};
        let r0 = row0 + qr + {i}u * FRAG;
        let c0 = col0 + qc + {j}u * FRAG;
#if DIRECT_STORE
        if (in_tile) {
#if SPLIT_OUT
            let ld = params.n;
            let p = &partials[(split_id * params.m + r0) * ld + c0];
            coopStoreT(r, p, ld);
#else
            let ld = params.c_ld;
            let p = &c[c_base + r0 * ld + c0];
            coopStoreT(r, p, ld);
#end
        }
#else
        if (in_tile) {
            let p = &tile_out[scratch];
            coopStoreT(r, p, FRAG);
        }
        scratch_barrier();
        if (in_tile) {
            for (var e = 2u * lane; e < FRAG * FRAG; e += 2u * lanes) {
                let v = vec2<f32>(tile_out[scratch + e], tile_out[scratch + e + 1u]);
                coop_store(r0 + e / FRAG, c0 + e % FRAG, v);
            }
        }
        scratch_barrier();
#end
    }
#end
#end
}
