//! Launch shapes of the kernel bodies (tiled, direct, cooperative), per input storage.

use super::{COOP_SHADER, MatmulKernel, SHADER};
use crate::dtype::Storage;
use crate::gpu::{KernelDesc, TensorCoreConfig};
use crate::shader::ShaderDecl;

/// Launch shape of one kernel body for one input storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Tiling {
    pub(super) shader: &'static ShaderDecl,
    pub(super) entry: &'static str,
    pub(super) wg_x: u32,
    pub(super) wg_y: u32,
    pub(super) tm: u32,
    pub(super) tn: u32,
    pub(super) bk: u32,
    /// Cooperative body: the adapter's subgroup size (a workgroup is 4 subgroups); else 0.
    pub(super) subgroup: u32,
    /// Cooperative body: fragment edge (8 or 16) and fragments per subgroup along M and N
    /// (`shaders/include/coop_gemm.wgsl`); else 0.
    pub(super) edge: u32,
    pub(super) frags: u32,
}

impl Tiling {
    /// Tile shapes per kernel and input storage. Tiled: 16x16 threads with 8x8 outputs each
    /// (128x128 workgroup tiles, 8 KiB of f32 tiles at BK 8); 16-bit inputs stage deeper k
    /// tiles (16 KiB), as their global reads are half the bytes. Direct: one row of 64 threads
    /// per workgroup, 8 rows x 4 columns each: the 8 reads of a are shared by the workgroup
    /// (scalar loads on CPU drivers) and feed 32 FMAs per 4 gathers of b. Measured on
    /// lavapipe at 256³: 64x8x4 beat 32x8x2, 64x16x2, 64x8x8, 128x8x4, 32x8x4, 64x4x8 and
    /// 16x8x4 (8-wide blocks spill).
    pub(super) fn choose(kernel: MatmulKernel, a: Storage, b: Storage) -> Tiling {
        let sixteen_bit = a != Storage::F32 && b != Storage::F32;
        match kernel {
            MatmulKernel::Direct => Tiling {
                shader: &SHADER,
                entry: "matmul_direct",
                wg_x: 64,
                wg_y: 1,
                tm: 8,
                tn: 4,
                bk: 1,
                subgroup: 0,
                edge: 0,
                frags: 0,
            },
            MatmulKernel::Coop => unreachable!("the cooperative tiling comes from Tiling::coop"),
            MatmulKernel::Tiled | MatmulKernel::Auto => Tiling {
                shader: &SHADER,
                entry: "matmul_tiled",
                wg_x: 16,
                wg_y: 16,
                tm: 8,
                tn: 8,
                bk: if sixteen_bit { 16 } else { 8 },
                subgroup: 0,
                edge: 0,
                frags: 0,
            },
        }
    }

    /// The cooperative body (`shaders/matmul_coop.wgsl`) for an m×n product: 2×2 subgroups
    /// per workgroup, k slices of 32. 16×16 fragments: 2×2 per subgroup (64×64 tiles), or
    /// 4×4 (128×128 tiles, llama.cpp's large coopmat tile) where both sides span 512; 8×8
    /// fragments (Apple's simdgroup matrices, MLX's shape): 4×4 per subgroup (64×64 tiles).
    /// The choice depends on the sizes only, so a CPU adapter runs what a GPU would.
    pub(super) fn coop(config: TensorCoreConfig, m: u32, n: u32) -> Tiling {
        let frags = if config.edge == 16 && m >= 512 && n >= 512 {
            4
        } else {
            64 / (2 * config.edge)
        };
        Tiling::coop_tile(&COOP_SHADER, "matmul_coop", config, frags)
    }

    fn coop_tile(
        shader: &'static ShaderDecl,
        entry: &'static str,
        config: TensorCoreConfig,
        frags: u32,
    ) -> Tiling {
        Tiling {
            shader,
            entry,
            wg_x: 4 * config.subgroup,
            wg_y: 1,
            tm: 0,
            tn: 0,
            bk: 32,
            subgroup: config.subgroup,
            edge: config.edge,
            frags,
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
        if self.subgroup != 0 {
            return 2 * self.frags * self.edge;
        }
        self.wg_y * self.tm
    }

    pub(crate) fn bn(&self) -> u32 {
        if self.subgroup != 0 {
            return 2 * self.frags * self.edge;
        }
        self.wg_x * self.tn
    }

    pub(super) fn consts(&self, trans_a: bool, trans_b: bool) -> Vec<(&'static str, String)> {
        if self.subgroup != 0 {
            let mut c = vec![
                ("TRANS_A", trans_a.to_string()),
                ("TRANS_B", trans_b.to_string()),
            ];
            c.extend(coop_consts(self.subgroup, self.edge, self.frags));
            return c;
        }
        vec![
            ("TRANS_A", trans_a.to_string()),
            ("TRANS_B", trans_b.to_string()),
            ("WG_X", format!("{}u", self.wg_x)),
            ("WG_Y", format!("{}u", self.wg_y)),
            ("TM", format!("{}u", self.tm)),
            ("TN", format!("{}u", self.tn)),
            ("BK", format!("{}u", self.bk)),
        ]
    }

    pub(super) fn desc(&self, trans_a: bool, trans_b: bool) -> KernelDesc {
        let mut d = KernelDesc::new(self.shader, self.entry);
        d.consts = self.consts(trans_a, trans_b);
        d
    }
}

/// Every cooperative tiling [`Tiling::coop`] picks, on subgroups of 32 (the shader variants
/// the portability tests check; other fixed subgroup sizes change only the workgroup size).
pub(super) fn coop_tilings() -> Vec<Tiling> {
    let config = |edge| TensorCoreConfig {
        edge,
        subgroup: 32,
        forced: false,
    };
    vec![
        Tiling::coop(config(16), 64, 64),
        Tiling::coop(config(16), 512, 512),
        Tiling::coop(config(8), 512, 512),
    ]
}

/// The constants of `shaders/include/coop_gemm.wgsl` (the tile loop of every cooperative
/// kernel): subgroup size, fragment edge, `frags`×`frags` fragments per subgroup (tiles of
/// `2 * frags * edge` square), and the fragment types.
pub(crate) fn coop_consts(subgroup: u32, edge: u32, frags: u32) -> Vec<(&'static str, String)> {
    let e = edge;
    vec![
        ("SUBGROUP", format!("{subgroup}u")),
        ("FRAG", format!("{e}u")),
        ("FM", format!("{frags}u")),
        ("FN", format!("{frags}u")),
        ("alias FragA", format!("coop_mat{e}x{e}<f16, A>")),
        ("alias FragB", format!("coop_mat{e}x{e}<f16, B>")),
        ("alias FragC", format!("coop_mat{e}x{e}<f32, C>")),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tilings_divide_evenly_and_fit_portable_limits() {
        for kernel in [MatmulKernel::Tiled, MatmulKernel::Direct] {
            for a in Storage::ALL {
                for b in Storage::ALL {
                    let t = Tiling::choose(kernel, a, b);
                    assert!(t.wg_x * t.wg_y <= 256, "{t:?}: over 256 threads");
                    assert_eq!(t.tn % 2, 0, "{t:?}: threads must own column pairs");
                    if kernel == MatmulKernel::Tiled {
                        assert_eq!((t.tm % 4, t.tn % 4), (0, 0), "{t:?}: vec4 fragments");
                    } else {
                        assert_eq!(t.wg_y, 1, "{t:?}: rows must be uniform per workgroup");
                    }
                    let shared = 4 * t.bk * (t.bm() + t.bn());
                    if kernel == MatmulKernel::Tiled {
                        assert!(
                            shared <= 16 * 1024,
                            "{t:?}: {shared} bytes of workgroup memory"
                        );
                        assert_eq!((t.bm() * t.bk) % (t.wg_x * t.wg_y), 0, "{t:?}");
                        assert_eq!((t.bn() * t.bk) % (t.wg_x * t.wg_y), 0, "{t:?}");
                    }
                }
            }
        }
    }
}
