// The tile loop of the cooperative-matrix (tensor-core) kernels, shaders/matmul_coop.wgsl and
// shaders/conv_coop.wgsl, on the structure of llama.cpp's Vulkan coopmat `mul_mm`:
// out[BM x BN tile] = A[rows, k range] · B[k range, cols], f16 fragments accumulated in f32.
//
// - A workgroup is SG_M x SG_N subgroups; subgroup s owns the FM x FN fragments of block
//   (s / SG_N, s % SG_N). Accumulators are named variables (acc_0_0, acc_0_1, ...) and the
//   hot loop is straight-line code, both written out per variant by `#for` blocks: no array
//   of fragments, no loop over fragments.
// - Each operand's k slice is staged in its *stored* orientation (A_KROWS: A's staged rows
//   are k, as a transposed A is stored; B_KROWS likewise), in chunks of 8 halves (16 bytes,
//   one vector load where the including shader can), and read back with row- or
//   column-major cooperative loads. Rows are padded by 8 halves: strides and fragment
//   offsets stay multiples of 16 bytes (what a cooperative load needs) and rows start in
//   different banks.
// - Double buffering with a register prefetch: while the fragments multiply one buffer, each
//   thread holds its chunks of the next k slice in registers and writes them to the other
//   buffer afterwards; one workgroup barrier per k slice.
// - The epilogue stores each fragment straight to memory with a cooperative store where it
//   may (DIRECT_STORE, the matmul's only: an f32 output c, or split-K partial sums, of whole
//   16-byte-aligned tiles with nothing to add; it names matmul_common's c, partials and
//   params), else through its subgroup's FRAG x FRAG f32 scratch, synchronised by subgroup barriers
//   (SG_BARRIER) or workgroup barriers, into the including shader's epilogue.
//
// The including shader defines what the tile loop reads and where results go:
//   coop_chunk_a(r, c, row0, k0) -> Halves      staged A row r, columns c .. c + 8 for the
//   coop_chunk_b(r, c, col0, k0) -> Halves      k slice at k0 (zero past the GEMM or the
//                                               depth)
//   coop_store(row, col, v: vec2<f32>)          results (row, col) and (row, col + 1); either
//                                               may lie past the GEMM (the epilogue checks)
// and the launch injects SUBGROUP (the adapter's fixed subgroup size), FRAG (8 or 16), SG_M,
// SG_N, FM, FN, BK, A_KROWS, B_KROWS, A_ROWS x A_COLS and B_ROWS x B_COLS (the staged
// shapes), LOADS_A and LOADS_B (chunks per thread), KSTEPS (BK / FRAG), SG_BARRIER,
// DIRECT_STORE, and the fragment types FragA, FragB (f16) and FragC (f32).
//
// naga 30.0.1 notes: only square 8x8 and 16x16 shapes exist; a cooperative store takes its
// matrix, pointer and stride from `let`s computed before the call (the store statement is pushed
// before pending expressions are emitted, which can leave its pointer unemitted for the
// SPIR-V writer).

const THREADS: u32 = SG_M * SG_N * SUBGROUP;
const BM: u32 = SG_M * FM * FRAG;
const BN: u32 = SG_N * FN * FRAG;
const LDA: u32 = A_COLS + 8u;
const LDB: u32 = B_COLS + 8u;
const A_SIZE: u32 = A_ROWS * LDA;
const B_SIZE: u32 = B_ROWS * LDB;
// Chunks of 8 halves per staged row, and in a whole slice.
const A_CPR: u32 = A_COLS / 8u;
const B_CPR: u32 = B_COLS / 8u;
const CHUNKS_A: u32 = A_ROWS * A_CPR;
const CHUNKS_B: u32 = B_ROWS * B_CPR;

// Eight consecutive halves of a staged row: a chunk (f16 values, so staging never converts).
struct Halves {
    lo: vec4<f16>,
    hi: vec4<f16>,
}

// Two buffers of each staged slice, and one f32 fragment per subgroup for the epilogue.
var<workgroup> tile_a: array<f16, 2u * A_SIZE>;
var<workgroup> tile_b: array<f16, 2u * B_SIZE>;
var<workgroup> tile_out: array<f32, SG_M * SG_N * FRAG * FRAG>;

// The staged (row, column) of chunk c of a slice.
fn chunk_a(c: u32) -> vec2<u32> {
    return vec2<u32>(c / A_CPR, (c % A_CPR) * 8u);
}
fn chunk_b(c: u32) -> vec2<u32> {
    return vec2<u32>(c / B_CPR, (c % B_CPR) * 8u);
}

// Chunk s of thread tid for the slice at k0 (nothing when the slice has fewer chunks).
fn load_a(tid: u32, s: u32, row0: u32, k0: u32) -> Halves {
    let c = tid + s * THREADS;
    if (CHUNKS_A % THREADS != 0u && c >= CHUNKS_A) {
        return Halves();
    }
    let p = chunk_a(c);
    return coop_chunk_a(p.x, p.y, row0, k0);
}
fn load_b(tid: u32, s: u32, col0: u32, k0: u32) -> Halves {
    let c = tid + s * THREADS;
    if (CHUNKS_B % THREADS != 0u && c >= CHUNKS_B) {
        return Halves();
    }
    let p = chunk_b(c);
    return coop_chunk_b(p.x, p.y, col0, k0);
}

// A chunk into buffer `buf` of its staged tile, eight halves in a row.
fn put_a(buf: u32, tid: u32, s: u32, h: Halves) {
    let c = tid + s * THREADS;
    if (CHUNKS_A % THREADS != 0u && c >= CHUNKS_A) {
        return;
    }
    let p = chunk_a(c);
    let e = buf * A_SIZE + p.x * LDA + p.y;
    tile_a[e] = h.lo.x;
    tile_a[e + 1u] = h.lo.y;
    tile_a[e + 2u] = h.lo.z;
    tile_a[e + 3u] = h.lo.w;
    tile_a[e + 4u] = h.hi.x;
    tile_a[e + 5u] = h.hi.y;
    tile_a[e + 6u] = h.hi.z;
    tile_a[e + 7u] = h.hi.w;
}
fn put_b(buf: u32, tid: u32, s: u32, h: Halves) {
    let c = tid + s * THREADS;
    if (CHUNKS_B % THREADS != 0u && c >= CHUNKS_B) {
        return;
    }
    let p = chunk_b(c);
    let e = buf * B_SIZE + p.x * LDB + p.y;
    tile_b[e] = h.lo.x;
    tile_b[e + 1u] = h.lo.y;
    tile_b[e + 2u] = h.lo.z;
    tile_b[e + 3u] = h.lo.w;
    tile_b[e + 4u] = h.hi.x;
    tile_b[e + 5u] = h.hi.y;
    tile_b[e + 6u] = h.hi.z;
    tile_b[e + 7u] = h.hi.w;
}

// Orders a subgroup's scratch writes before its lanes read them (and reads before the next
// writes). Every subgroup stores the same number of fragments, so a workgroup barrier is
// uniform too where subgroup barriers are missing.
fn scratch_barrier() {
#if SG_BARRIER
    subgroupBarrier();
#else
    workgroupBarrier();
#end
}

// The tile at (row0, col0) over k in [k_lo, k_hi). Every invocation of the workgroup calls
// it (tid: local index; sg, lane: subgroup id and the lane within it).
fn coop_gemm(tid: u32, sg: u32, lane: u32, row0: u32, col0: u32, k_lo: u32, k_hi: u32) {
    let qr = (sg / SG_N) * FM * FRAG;
    let qc = (sg % SG_N) * FN * FRAG;
#for i in 0..FM
#for j in 0..FN
    var acc_{i}_{j} = FragC();
#end
#end
#for s in 0..LOADS_A
    var pa_{s} = Halves();
#end
#for s in 0..LOADS_B
    var pb_{s} = Halves();
#end
    var steps = 0u;
    if (k_hi > k_lo) {
        steps = (k_hi - k_lo + BK - 1u) / BK;
#for s in 0..LOADS_A
        put_a(0u, tid, {s}u, load_a(tid, {s}u, row0, k_lo));
#end
#for s in 0..LOADS_B
        put_b(0u, tid, {s}u, load_b(tid, {s}u, col0, k_lo));
#end
    }
    workgroupBarrier();
    for (var t = 0u; t < steps; t++) {
        let cur = t & 1u;
        let more = t + 1u < steps;
        if (more) {
            // Prefetch the next slice into registers: its loads are in flight while the
            // fragments below multiply.
            let k_next = k_lo + (t + 1u) * BK;
#for s in 0..LOADS_A
            pa_{s} = load_a(tid, {s}u, row0, k_next);
#end
#for s in 0..LOADS_B
            pb_{s} = load_b(tid, {s}u, col0, k_next);
#end
        }
        let a0 = cur * A_SIZE;
        let b0 = cur * B_SIZE;
#for kk in 0..KSTEPS
        {
#for i in 0..FM
#if A_KROWS
            let fa_{i} = coopLoad<FragA>(&tile_a[a0 + {kk}u * FRAG * LDA + qr + {i}u * FRAG], LDA);
#else
            let fa_{i} = coopLoadT<FragA>(&tile_a[a0 + (qr + {i}u * FRAG) * LDA + {kk}u * FRAG], LDA);
#end
#end
#for j in 0..FN
#if B_KROWS
            let fb_{j} = coopLoadT<FragB>(&tile_b[b0 + {kk}u * FRAG * LDB + qc + {j}u * FRAG], LDB);
#else
            let fb_{j} = coopLoad<FragB>(&tile_b[b0 + (qc + {j}u * FRAG) * LDB + {kk}u * FRAG], LDB);
#end
#end
#for i in 0..FM
#for j in 0..FN
            acc_{i}_{j} = coopMultiplyAdd(fa_{i}, fb_{j}, acc_{i}_{j});
#end
#end
        }
#end
        if (more) {
            // The other buffer was last read before the previous barrier: free to write.
#for s in 0..LOADS_A
            put_a(1u - cur, tid, {s}u, pa_{s});
#end
#for s in 0..LOADS_B
            put_b(1u - cur, tid, {s}u, pb_{s});
#end
        }
        workgroupBarrier();
    }

    let scratch = sg * FRAG * FRAG;
#for i in 0..FM
#for j in 0..FN
    {
        let r = acc_{i}_{j};
        let r0 = row0 + qr + {i}u * FRAG;
        let c0 = col0 + qc + {j}u * FRAG;
#if DIRECT_STORE
#if SPLIT_OUT
        let ld = params.n;
        let p = &partials[(split_id * params.m + r0) * ld + c0];
        coopStoreT(r, p, ld);
#else
        let ld = params.c_ld;
        let p = &c[c_base + r0 * ld + c0];
        coopStoreT(r, p, ld);
#end
#else
        let p = &tile_out[scratch];
        coopStoreT(r, p, FRAG);
        scratch_barrier();
        for (var e = 2u * lane; e < FRAG * FRAG; e += 2u * SUBGROUP) {
            let v = vec2<f32>(tile_out[scratch + e], tile_out[scratch + e + 1u]);
            coop_store(r0 + e / FRAG, c0 + e % FRAG, v);
        }
        scratch_barrier();
#end
    }
#end
#end
}
