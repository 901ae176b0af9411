// The tile loop of the cooperative-matrix (tensor-core) kernels, shaders/matmul_coop.wgsl and
// shaders/conv_coop.wgsl: out[BM x BN tile] = A[rows, k range] · B[k range, cols], f16
// fragments accumulated in f32, then stored through the including shader's epilogue.
//
// The including shader defines what the tile loop reads and where results go:
//   coop_a_element(tid, s, row0, k0, k_end) -> TileElement
//   coop_b_element(tid, s, col0, k0, k_end) -> TileElement
//                                          step s of thread tid staging the k slice at k0 of
//                                          A (rows from row0) and B (columns from col0), as
//                                          include/tile_staging.wgsl says (f16 values, 0
//                                          past the GEMM or at k >= k_end)
//   coop_store(row, col, v: vec2<f32>)     results (row, col) and (row, col + 1); either may
//                                          lie past the GEMM (the epilogue checks)
// and the launch injects SUBGROUP (the adapter's fixed subgroup size), FRAG (fragment edge,
// 8 or 16), FM and FN (fragments per subgroup along M and N), and the fragment types as
// aliases FragA = coop_mat<FRAG>x<FRAG><f16, A>, FragB (f16, B) and FragC (f32, C).
//
// A workgroup is 2 x 2 subgroups; subgroup s owns the FM x FN fragments of quadrant
// (s / 2, s % 2). Each k slice of BK = 32 is staged through workgroup memory as f16 (exact:
// the inputs are f16), zero outside the GEMM, so every cooperative load is a whole fragment
// and the subgroups stay in uniform control flow. Rows of the staged tiles are padded by 8
// halves: strides and fragment offsets stay multiples of 16 bytes (what Vulkan requires of a
// cooperative load) and rows start in different banks. At the end each fragment goes through
// its subgroup's FRAG x FRAG f32 scratch once, and the subgroup's lanes store its pairs.
//
// naga 30.0.1 notes: only square 8x8 and 16x16 shapes exist; a cooperative store takes its
// matrix and pointer from `let`s computed before the call (the store statement is pushed
// before pending expressions are emitted, which can leave its pointer unemitted for the
// SPIR-V writer).

const SG_M: u32 = 2u;
const SG_N: u32 = 2u;
const THREADS: u32 = SG_M * SG_N * SUBGROUP;
const BM: u32 = SG_M * FM * FRAG;
const BN: u32 = SG_N * FN * FRAG;
const BK: u32 = 32u;
const LDA: u32 = BK + 8u;
const LDB: u32 = BN + 8u;

// op(A)[row0 + i, k0 + kk] at i * LDA + kk; B[k0 + kk, col0 + j] at kk * LDB + j.
var<workgroup> tile_a: array<f16, BM * LDA>;
var<workgroup> tile_b: array<f16, BK * LDB>;
// One FRAG x FRAG f32 fragment per subgroup on its way to the epilogue.
var<workgroup> tile_out: array<f32, SG_M * SG_N * FRAG * FRAG>;

fn coop_stage(tid: u32, row0: u32, col0: u32, k0: u32, k_end: u32) {
    for (var s = 0u; s < BM * BK / THREADS; s++) {
        let t = coop_a_element(tid, s, row0, k0, k_end);
        tile_a[t.row * LDA + t.col] = f16(t.value);
    }
    for (var s = 0u; s < BN * BK / THREADS; s++) {
        let t = coop_b_element(tid, s, col0, k0, k_end);
        tile_b[t.row * LDB + t.col] = f16(t.value);
    }
}

// The tile at (row0, col0) over k in [k_begin, k_end). Every invocation of the workgroup
// calls it (tid: local index; sg, lane: subgroup id and the lane within it).
fn coop_gemm(tid: u32, sg: u32, lane: u32, row0: u32, col0: u32, k_begin: u32, k_end: u32) {
    let qr = (sg / SG_N) * FM * FRAG;
    let qc = (sg % SG_N) * FN * FRAG;
    var acc: array<FragC, FM * FN>;
    for (var f = 0u; f < FM * FN; f++) {
        acc[f] = FragC();
    }
    for (var k0 = k_begin; k0 < k_end; k0 += BK) {
        coop_stage(tid, row0, col0, k0, k_end);
        workgroupBarrier();
        for (var kk = 0u; kk < BK; kk += FRAG) {
            var fa: array<FragA, FM>;
            var fb: array<FragB, FN>;
            for (var i = 0u; i < FM; i++) {
                fa[i] = coopLoadT<FragA>(&tile_a[(qr + i * FRAG) * LDA + kk], LDA);
            }
            for (var j = 0u; j < FN; j++) {
                fb[j] = coopLoadT<FragB>(&tile_b[kk * LDB + qc + j * FRAG], LDB);
            }
            for (var i = 0u; i < FM; i++) {
                for (var j = 0u; j < FN; j++) {
                    acc[i * FN + j] = coopMultiplyAdd(fa[i], fb[j], acc[i * FN + j]);
                }
            }
        }
        workgroupBarrier();
    }

    let scratch = sg * FRAG * FRAG;
    for (var f = 0u; f < FM * FN; f++) {
        let r = acc[f];
        let p = &tile_out[scratch];
        coopStoreT(r, p, FRAG);
        workgroupBarrier();
        let i0 = row0 + qr + (f / FN) * FRAG;
        let j0 = col0 + qc + (f % FN) * FRAG;
        for (var e = 2u * lane; e < FRAG * FRAG; e += 2u * SUBGROUP) {
            let v = vec2<f32>(tile_out[scratch + e], tile_out[scratch + e + 1u]);
            coop_store(i0 + e / FRAG, j0 + e % FRAG, v);
        }
        workgroupBarrier();
    }
}
