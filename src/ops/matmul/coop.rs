//! The tensor-core body's plan for one product (`shaders/matmul_coop.wgsl` on the tile loop
//! `shaders/include/coop_gemm.wgsl`): the tile from the adapter's kernel table, the aligned
//! interior variant (16-byte loads, no bounds tests) or the checked edge one, and whether the
//! results go straight to memory with cooperative stores. The tile loop's constants are
//! shared with the convolutions ([`gemm_consts`]).

use super::epilogue::Epilogue;
use super::layout::{MatrixLayout, vector_ready};
use super::params::Params;
use crate::dtype::Storage;
use crate::error::Result;
use crate::gpu::{CoopTile, KernelDesc, KernelTable, TensorCoreConfig};
use crate::shader::{ShaderDecl, Variant};
use crate::tensor::Tensor;

/// The cooperative-matrix body (tensor cores).
pub static COOP_SHADER: ShaderDecl = ShaderDecl {
    name: "matmul_coop",
    source: include_str!("../../../shaders/matmul_coop.wgsl"),
    structs: &[Params::WGSL],
    consts: &[],
    variants: coop_variants,
};

/// How the tile loop stages and stores one GEMM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CoopGemm {
    pub(crate) config: TensorCoreConfig,
    pub(crate) tile: CoopTile,
    /// A arrives k-major (stored [K, M], as a transposed A is); B likewise (a plain B, a
    /// convolution's pixel gather). Both are staged K-contiguous whichever way they arrive.
    pub(crate) a_krows: bool,
    pub(crate) b_krows: bool,
    /// Subgroup barriers for the per-subgroup scratch (else workgroup barriers).
    pub(crate) sg_barrier: bool,
    /// Fragments go straight to memory (the matmul's f32 outputs only).
    pub(crate) direct: bool,
}

impl CoopGemm {
    pub(crate) fn bm(&self) -> u32 {
        self.tile.bm(self.config.edge)
    }
    pub(crate) fn bn(&self) -> u32 {
        self.tile.bn(self.config.edge)
    }

    /// The constants of `shaders/include/coop_gemm.wgsl`.
    pub(crate) fn consts(&self) -> Vec<(&'static str, String)> {
        let t = &self.tile;
        let e = self.config.edge;
        let u = |v: u32| format!("{v}u");
        let threads = t.threads(self.config.subgroup);
        // Staging units of a slice: one chunk of 8 halves (K-contiguous), or KB = 4 chunks of
        // consecutive k (k-major), and how many each thread stages.
        let units = |outer: u32, kmajor: bool| outer * t.bk / if kmajor { 32 } else { 8 };
        let unit = |kmajor: bool| if kmajor { "Chunks" } else { "Halves" };
        let (units_a, units_b) = (
            units(self.bm(), self.a_krows),
            units(self.bn(), self.b_krows),
        );
        vec![
            ("SUBGROUP", u(self.config.subgroup)),
            ("FRAG", u(e)),
            ("SG_M", u(t.sg_m)),
            ("SG_N", u(t.sg_n)),
            ("FM", u(t.fm)),
            ("FN", u(t.fn_)),
            ("BK", u(t.bk)),
            ("KSTEPS", u(t.bk / e)),
            ("A_KMAJOR", self.a_krows.to_string()),
            ("B_KMAJOR", self.b_krows.to_string()),
            ("UNITS_A", u(units_a)),
            ("UNITS_B", u(units_b)),
            ("LOADS_A", u(units_a.div_ceil(threads))),
            ("LOADS_B", u(units_b.div_ceil(threads))),
            ("SG_BARRIER", self.sg_barrier.to_string()),
            ("DIRECT_STORE", self.direct.to_string()),
            ("alias UnitA", unit(self.a_krows).into()),
            ("alias UnitB", unit(self.b_krows).into()),
            ("alias FragA", format!("coop_mat{e}x{e}<f16, A>")),
            ("alias FragB", format!("coop_mat{e}x{e}<f16, B>")),
            ("alias FragC", format!("coop_mat{e}x{e}<f32, C>")),
        ]
    }
}

/// The staged slices of the tiled SIMT GEMM: BK of A's BM rows and of B's BN columns, each in
/// its stored orientation (`krows`: its staged rows are k), in chunks of 8 elements, and how
/// many chunks each of `threads` threads stages.
pub(crate) fn staging_consts(
    (bm, bn, bk): (u32, u32, u32),
    (a_krows, b_krows): (bool, bool),
    threads: u32,
) -> Vec<(&'static str, String)> {
    let (a_rows, a_cols) = if a_krows { (bk, bm) } else { (bm, bk) };
    let (b_rows, b_cols) = if b_krows { (bk, bn) } else { (bn, bk) };
    let loads = |rows: u32, cols: u32| (rows * cols / 8).div_ceil(threads);
    let u = |v: u32| format!("{v}u");
    vec![
        ("BK", u(bk)),
        ("A_ROWS", u(a_rows)),
        ("A_COLS", u(a_cols)),
        ("B_ROWS", u(b_rows)),
        ("B_COLS", u(b_cols)),
        ("LOADS_A", u(loads(a_rows, a_cols))),
        ("LOADS_B", u(loads(b_rows, b_cols))),
    ]
}

/// One product on the tensor-core body: its GEMM and its variant.
#[derive(Clone, Copy, Debug)]
pub(super) struct CoopPlan {
    pub(super) gemm: CoopGemm,
    pub(super) trans: (bool, bool),
    pub(super) aligned: bool,
}

/// What one product looks like to the planner.
pub(super) struct Product<'a> {
    pub(super) a: (&'a Tensor, MatrixLayout),
    pub(super) b: (&'a Tensor, MatrixLayout),
    pub(super) c: (&'a Tensor, MatrixLayout),
    pub(super) mnk: (u32, u32, u32),
    pub(super) trans: (bool, bool),
    /// Depth of each split of K (K itself without split-K).
    pub(super) k_split: u32,
    pub(super) epilogue: Epilogue,
}

impl CoopPlan {
    /// The plan for `p` on tensor cores configured as `config`, shaped by `table`.
    pub(super) fn new(
        table: &KernelTable,
        config: TensorCoreConfig,
        sg_barrier: bool,
        p: &Product,
        split_out: bool,
    ) -> CoopPlan {
        let (m, n, k) = p.mnk;
        let tile = table.coop(config.edge).pick(m, n);
        let mut gemm = CoopGemm {
            config,
            tile,
            a_krows: p.trans.0,
            b_krows: !p.trans.1,
            sg_barrier,
            direct: false,
        };
        let whole = |v: u32, t: u32| v > 0 && v.is_multiple_of(t);
        let aligned = whole(m, gemm.bm())
            && whole(n, gemm.bn())
            && whole(k, tile.bk)
            && whole(p.k_split, tile.bk)
            && vector_ready(p.a.0, &p.a.1, 8)
            && vector_ready(p.b.0, &p.b.1, 8);
        let (c, cl) = p.c;
        // A cooperative store of f32 needs 16-byte-aligned rows; split-K partials are
        // [splits, M, N] f32, aligned when N is whole tiles.
        let c_ready = split_out
            || (c.storage() == Storage::F32 && vector_ready(c, &cl, 4) && p.epilogue.is_plain());
        gemm.direct = aligned && c_ready;
        CoopPlan {
            gemm,
            trans: p.trans,
            aligned,
        }
    }

    pub(super) fn desc(&self, epilogue: &Epilogue, split_out: bool) -> KernelDesc {
        let mut d = KernelDesc::new(&COOP_SHADER, "matmul_coop");
        d.consts = vec![
            ("TRANS_A", self.trans.0.to_string()),
            ("TRANS_B", self.trans.1.to_string()),
            ("ALIGNED", self.aligned.to_string()),
        ];
        d.consts.extend(self.gemm.consts());
        d.consts.extend(epilogue.consts(split_out));
        // The interior variant's range invariant (shaders/matmul_coop.wgsl) keeps every
        // index in range: built without runtime checks natively.
        d.trusted = self.aligned;
        d
    }
}

/// Every tensor-core tile the class tables hold, per fragment edge, on subgroups of 32, and
/// AMD's 16x16 tiles on subgroups of 64 too (RDNA3's largest, which its kernels are laid out
/// for): the variants the portability tests check. Other subgroup sizes change only the
/// workgroup size and the units each thread stages.
pub(crate) fn table_tiles() -> Vec<(TensorCoreConfig, CoopTile)> {
    use crate::gpu::AdapterClass;
    let mut tiles = Vec::new();
    for class in AdapterClass::ALL {
        let table = KernelTable::defaults(class);
        for edge in [8, 16] {
            let t = table.coop(edge);
            let subgroups: &[u32] = match (class, edge) {
                (AdapterClass::Amd, 16) => &[32, 64],
                _ => &[32],
            };
            for (_, tile) in t.named() {
                for &subgroup in subgroups {
                    let config = TensorCoreConfig {
                        edge,
                        subgroup,
                        subgroup_min: 32,
                        forced: false,
                    };
                    if !tiles.contains(&(config, tile)) {
                        tiles.push((config, tile));
                    }
                }
            }
        }
    }
    tiles
}

/// The cooperative body: native f16 inputs, f16 or f32 output and bias, every tile of the
/// class tables (on subgroups of 32; other fixed subgroup sizes differ only in the workgroup
/// size), every transpose, interior and edge variants, the bare and the full epilogue, the
/// straight-to-memory store of f32 outputs and of split-K partial sums.
fn coop_variants(shader: &'static ShaderDecl) -> Result<Vec<Variant>> {
    use crate::dtype::Storage::{F16, F32};
    let [bare, full] = Epilogue::VARIANTS;
    // (c, bias, epilogue, direct store, split-K partial sums)
    let outputs = [
        (F16, F16, bare, false, false),
        (F32, F32, bare, false, false),
        (F16, F32, full, false, false),
        (F32, F16, full, false, false),
        (F32, F32, bare, true, false),
        (F32, F32, bare, false, true),
        (F32, F32, bare, true, true),
    ];
    let mut variants = Vec::new();
    for (config, tile) in table_tiles() {
        for (a_krows, b_krows) in [(false, true), (true, true), (false, false), (true, false)] {
            for aligned in [false, true] {
                for (c, bias, epilogue, direct, split) in outputs {
                    if direct && !aligned {
                        continue;
                    }
                    let gemm = CoopGemm {
                        config,
                        tile,
                        a_krows,
                        b_krows,
                        sg_barrier: epilogue == full,
                        direct,
                    };
                    let mut consts = vec![
                        ("TRANS_A", a_krows.to_string()),
                        ("TRANS_B", (!b_krows).to_string()),
                        ("ALIGNED", aligned.to_string()),
                    ];
                    consts.extend(gemm.consts());
                    consts.extend(epilogue.consts(split));
                    let storages = [("a", F16), ("b", F16), ("c", c), ("bias", bias)];
                    variants.push(Variant::new(shader, &storages, &consts)?);
                }
            }
        }
    }
    Ok(variants)
}
