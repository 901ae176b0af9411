//! Launch shapes of the SIMT bodies (tiled, direct) per input storage: the tiled body's
//! register blocking comes from the adapter's kernel table (`gpu::kernel_table`), the direct
//! body's is fixed (CPU adapters).

use super::MatmulKernel;
use super::coop::staging_consts;
use super::epilogue::Epilogue;
use super::params::Params;
use crate::dtype::Storage;
use crate::error::Result;
use crate::gpu::{AdapterClass, KernelDesc, KernelTable, SimtTile};
use crate::shader::{Grid, ShaderDecl, Variant};

/// The SIMT bodies (direct and tiled).
pub static SHADER: ShaderDecl = ShaderDecl {
    name: "matmul",
    source: include_str!("../../../shaders/matmul.wgsl"),
    structs: &[Params::WGSL],
    consts: &[],
    variants: simt_variants,
};

/// Launch shape of one SIMT body for one input storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Tiling {
    pub(super) entry: &'static str,
    pub(super) wg_x: u32,
    pub(super) wg_y: u32,
    pub(super) tm: u32,
    pub(super) tn: u32,
    pub(super) bk: u32,
}

/// The direct body: one row of 64 threads per workgroup, 8 rows x 4 columns each: the 8
/// reads of a are shared by the workgroup (scalar loads on CPU drivers) and feed 32 FMAs per
/// 4 gathers of b. Measured on lavapipe at 256³: 64x8x4 beat 32x8x2, 64x16x2, 64x8x8,
/// 128x8x4, 32x8x4, 64x4x8 and 16x8x4 (8-wide blocks spill).
const DIRECT: SimtTile = SimtTile {
    wg_x: 64,
    wg_y: 1,
    tm: 8,
    tn: 4,
    bk: 8,
};

impl Tiling {
    /// The shape of `kernel` for inputs of storages `a` and `b` on an adapter with `table`:
    /// the tiled body takes the table's 16-bit tile where both inputs are 16-bit (their
    /// global reads are half the bytes), else its f32 tile.
    pub(super) fn choose(
        kernel: MatmulKernel,
        a: Storage,
        b: Storage,
        table: &KernelTable,
    ) -> Tiling {
        let (entry, t) = match kernel {
            MatmulKernel::Direct => ("matmul_direct", DIRECT),
            _ if Self::sixteen_bit(a, b) => ("matmul_tiled", table.simt_16),
            _ => ("matmul_tiled", table.simt_f32),
        };
        Tiling::of(entry, t)
    }

    /// Whether inputs of storages `a` and `b` take the table's 16-bit tile.
    pub(super) fn sixteen_bit(a: Storage, b: Storage) -> bool {
        a != Storage::F32 && b != Storage::F32 && a != Storage::U32
    }

    pub(super) fn of(entry: &'static str, t: SimtTile) -> Tiling {
        Tiling {
            entry,
            wg_x: t.wg_x,
            wg_y: t.wg_y,
            tm: t.tm,
            tn: t.tn,
            bk: t.bk,
        }
    }

    /// Threads per row group when the direct body would leave most threads on clamped
    /// duplicate columns (N at most half its BN), else 0. The narrow body splits the
    /// workgroup's row of threads into groups of the fewest threads (a power of two) whose TN
    /// columns each cover N, so a product N = 16 wide (an attention head) keeps 16 times
    /// fewer threads idle. Same FMA chain per output: same bits.
    pub(super) fn narrow_lanes(&self, n: u32) -> u32 {
        if self.entry != "matmul_direct" || n > self.bn() / 2 {
            return 0;
        }
        n.div_ceil(self.tn).next_power_of_two()
    }

    pub(crate) fn bm(&self) -> u32 {
        self.wg_y * self.tm
    }

    pub(crate) fn bn(&self) -> u32 {
        self.wg_x * self.tn
    }

    /// The shader constants for these layouts; `aligned`: the tiled body's interior variant.
    pub(super) fn consts(&self, trans: (bool, bool), aligned: bool) -> Vec<(&'static str, String)> {
        let u = |v: u32| format!("{v}u");
        let mut c = vec![
            ("TRANS_A", trans.0.to_string()),
            ("TRANS_B", trans.1.to_string()),
            ("WG_X", u(self.wg_x)),
            ("WG_Y", u(self.wg_y)),
            ("TM", u(self.tm)),
            ("TN", u(self.tn)),
            ("TM4", u(self.tm / 4)),
            ("TN4", u(self.tn / 4)),
            ("ALIGNED", aligned.to_string()),
        ];
        let tile = (self.bm(), self.bn(), self.bk);
        let krows = (trans.0, !trans.1);
        c.extend(staging_consts(tile, krows, self.wg_x * self.wg_y));
        c
    }

    pub(super) fn desc(
        &self,
        trans: (bool, bool),
        aligned: bool,
        epilogue: &Epilogue,
        split_out: bool,
    ) -> KernelDesc {
        let aligned = aligned && self.entry == "matmul_tiled";
        let mut d = KernelDesc::new(&SHADER, self.entry);
        d.consts = self.consts(trans, aligned);
        d.consts.extend(epilogue.consts(split_out));
        // The interior variant's range invariant (shaders/matmul.wgsl) keeps every index in
        // range: built without runtime checks natively.
        d.trusted = aligned;
        d
    }

    /// The constants of split-K's reduction (`matmul_split_reduce`, in the SIMT shader): its
    /// own entry point needs only the epilogue's; the rest compile the module's other entries.
    pub(super) fn reduce_consts(epilogue: &Epilogue) -> Vec<(&'static str, String)> {
        let t = Tiling::of("matmul_tiled", DIRECT);
        let mut c = t.consts((false, false), false);
        c.extend(epilogue.consts(false));
        c
    }
}

/// The SIMT bodies with the four transpose combinations and every storage of a, b and c
/// within one f16 world (native or packed; the two never meet in one call), the bias in c's
/// storage or f32; the tiled body in each tile of the class tables, interior and edge
/// variants; each with the bare epilogue and with every epilogue option on.
fn simt_variants(shader: &'static ShaderDecl) -> Result<Vec<Variant>> {
    let grid = Grid::new()
        .each(&["a"])
        .each(&["b"])
        .each(&["c"])
        .like_or_f32(&["bias"], "c")
        .one_f16_storage();
    let tables: Vec<KernelTable> = AdapterClass::ALL.map(KernelTable::defaults).to_vec();
    grid.variants_with(shader, |storages| {
        let (a, b) = (storages.storage("a"), storages.storage("b"));
        let mut shapes = Vec::new();
        for table in &tables {
            let tiled = Tiling::choose(MatmulKernel::Tiled, a, b, table);
            for aligned in [false, true] {
                if !shapes.contains(&(tiled, aligned)) {
                    shapes.push((tiled, aligned));
                }
            }
        }
        shapes.push((
            Tiling::choose(MatmulKernel::Direct, a, b, &tables[0]),
            false,
        ));
        let mut consts = Vec::new();
        for (tiling, aligned) in shapes {
            for trans in [(false, false), (true, false), (false, true), (true, true)] {
                for epilogue in Epilogue::VARIANTS {
                    let mut c = tiling.consts(trans, aligned);
                    c.extend(epilogue.consts(false));
                    consts.push(c);
                }
            }
        }
        // Split-K: the tiled body writing partial sums, and the reduction.
        let tiled = Tiling::choose(MatmulKernel::Tiled, a, b, &tables[0]);
        let mut split = tiled.consts((true, false), false);
        split.extend(Epilogue::VARIANTS[0].consts(true));
        consts.push(split);
        consts
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::AdapterClass;

    #[test]
    fn direct_tiles_own_column_pairs_and_rows_are_uniform() {
        let table = KernelTable::defaults(AdapterClass::Cpu);
        let t = Tiling::choose(MatmulKernel::Direct, Storage::F32, Storage::F32, &table);
        assert!(t.wg_x * t.wg_y <= 256, "{t:?}: over 256 threads");
        assert_eq!(t.tn % 2, 0, "{t:?}: threads must own column pairs");
        assert_eq!(t.wg_y, 1, "{t:?}: rows must be uniform per workgroup");
    }
}
