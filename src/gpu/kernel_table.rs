//! How the heavy kernels are shaped on an adapter: one table per adapter class (NVIDIA, AMD,
//! Apple, Intel, CPU, other GPUs) giving the SIMT matmul's register blocking, the tensor-core
//! GEMM's subgroups, fragments and k depth per fragment shape, and when a long reduction is
//! split. `webgpu-amp info` prints it; `bench tune` times candidates and writes a tuned table
//! that the binary loads (`gpu::tuning_file`). The kernels read their shapes from the
//! context's table, and which kernel *body* runs is chosen from the same capabilities by
//! `ops::bodies`.
//!
//! The class defaults are reasoned from each vendor's hardware and from kernels known to run
//! well there (llama.cpp's Vulkan `mul_mm` tiles, MLX's 64×64 simdgroup tiles); none of them
//! is measured yet with these kernels (BENCHMARKS.md says so).

pub use super::adapter_class::AdapterClass;

/// The tiled SIMT matmul's shape: `wg_x` × `wg_y` threads, each owning `tm` × `tn` outputs
/// (multiples of 4), k slices of `bk`, double-buffered in workgroup memory as f32.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimtTile {
    pub wg_x: u32,
    pub wg_y: u32,
    pub tm: u32,
    pub tn: u32,
    pub bk: u32,
}

impl SimtTile {
    // Products saturate: a shape from a file is checked before it runs (`kernel_rules`).
    pub fn bm(&self) -> u32 {
        self.wg_y.saturating_mul(self.tm)
    }
    pub fn bn(&self) -> u32 {
        self.wg_x.saturating_mul(self.tn)
    }
    pub fn threads(&self) -> u32 {
        self.wg_x.saturating_mul(self.wg_y)
    }
    /// Workgroup memory: two buffers of the A and B slices, f32 (in u128, saturated: no
    /// value of a file overflows it).
    pub fn workgroup_bytes(&self) -> u64 {
        let w = |v: u32| v as u128;
        let (bm, bn) = (w(self.wg_y) * w(self.tm), w(self.wg_x) * w(self.tn));
        u64::try_from(2 * 4 * w(self.bk) * (bm + bn)).unwrap_or(u64::MAX)
    }
    pub fn describe(&self) -> String {
        format!(
            "{}x{} threads, {}x{} outputs each ({}x{} tile), BK {}, {} B workgroup memory",
            self.wg_x,
            self.wg_y,
            self.tm,
            self.tn,
            self.bm(),
            self.bn(),
            self.bk,
            self.workgroup_bytes()
        )
    }
}

/// The tensor-core GEMM's shape: `sg_m` × `sg_n` subgroups, each owning `fm` × `fn` fragments,
/// k slices of `bk` staged as f16 and double-buffered (llama.cpp's coopmat `mul_mm`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CoopTile {
    pub sg_m: u32,
    pub sg_n: u32,
    pub fm: u32,
    #[serde(rename = "fn")]
    pub fn_: u32,
    pub bk: u32,
}

/// Halves of padding after each staged row: strides stay multiples of 16 bytes (what a
/// cooperative load needs) and rows start in different banks.
pub const COOP_PAD: u32 = 8;

impl CoopTile {
    // Products saturate: a shape from a file is checked before it runs (`kernel_rules`).
    pub fn bm(&self, edge: u32) -> u32 {
        self.sg_m.saturating_mul(self.fm).saturating_mul(edge)
    }
    pub fn bn(&self, edge: u32) -> u32 {
        self.sg_n.saturating_mul(self.fn_).saturating_mul(edge)
    }
    pub fn threads(&self, subgroup: u32) -> u32 {
        self.sg_m.saturating_mul(self.sg_n).saturating_mul(subgroup)
    }
    /// Workgroup memory: two buffers of the f16 A and B slices (rows padded by
    /// [`COOP_PAD`], the larger of the two staging orientations), and one f32 fragment of
    /// scratch per subgroup for the epilogue (in u128, saturated: no value of a file
    /// overflows it).
    pub fn workgroup_bytes(&self, edge: u32) -> u64 {
        let w = |v: u32| v as u128;
        let (e, pad, bk) = (w(edge), w(COOP_PAD), w(self.bk));
        let (bm, bn) = (
            w(self.sg_m) * w(self.fm) * e,
            w(self.sg_n) * w(self.fn_) * e,
        );
        let side = |outer: u128| (outer * (bk + pad)).max(bk * (outer + pad));
        let scratch = 4 * w(self.sg_m) * w(self.sg_n) * e * e;
        u64::try_from(2 * 2 * (side(bm) + side(bn)) + scratch).unwrap_or(u64::MAX)
    }
    pub fn describe(&self, edge: u32) -> String {
        format!(
            "{}x{} subgroups, {}x{} fragments each ({}x{} tile), BK {}, {} B workgroup memory",
            self.sg_m,
            self.sg_n,
            self.fm,
            self.fn_,
            self.bm(edge),
            self.bn(edge),
            self.bk,
            self.workgroup_bytes(edge)
        )
    }
}

/// A tensor-core GEMM's tiles for one fragment edge: `large` where both sides of the product
/// span `large_from` (llama.cpp picks its large coopmat tile the same way), `wide` where only
/// the columns do (a convolution's pixels by a few channels), else `small`. A convolution
/// takes `conv_large` instead of `large` where the class sets one: its pixel gather keeps
/// addresses live beside the accumulators, which a GEMM's tile may leave no registers for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CoopTiles {
    pub small: CoopTile,
    pub wide: CoopTile,
    pub large: CoopTile,
    pub large_from: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conv_large: Option<CoopTile>,
}

/// Which tile of [`CoopTiles`] a product takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TileSize {
    Small,
    Wide,
    Large,
}

impl CoopTiles {
    /// Which tile an m×n product takes.
    pub fn size(&self, m: u32, n: u32) -> TileSize {
        match (m >= self.large_from, n >= self.large_from) {
            (true, true) => TileSize::Large,
            (false, true) => TileSize::Wide,
            _ => TileSize::Small,
        }
    }

    /// The tile for an m×n product.
    pub fn pick(&self, m: u32, n: u32) -> CoopTile {
        *self.get(self.size(m, n))
    }

    /// The tile for a convolution's m×n implicit GEMM: `conv_large` where it takes the large
    /// tile and the class sets one.
    pub fn pick_conv(&self, m: u32, n: u32) -> CoopTile {
        match (self.size(m, n), self.conv_large) {
            (TileSize::Large, Some(tile)) => tile,
            (size, _) => *self.get(size),
        }
    }

    pub fn get(&self, size: TileSize) -> &CoopTile {
        match size {
            TileSize::Small => &self.small,
            TileSize::Wide => &self.wide,
            TileSize::Large => &self.large,
        }
    }

    pub fn get_mut(&mut self, size: TileSize) -> &mut CoopTile {
        match size {
            TileSize::Small => &mut self.small,
            TileSize::Wide => &mut self.wide,
            TileSize::Large => &mut self.large,
        }
    }

    /// Every tile, named.
    pub fn named(&self) -> Vec<(&'static str, CoopTile)> {
        let mut tiles = vec![
            ("small", self.small),
            ("wide", self.wide),
            ("large", self.large),
        ];
        tiles.extend(self.conv_large.map(|tile| ("conv_large", tile)));
        tiles
    }
}

/// When a GEMM's reduction is split (split-K): products with fewer than `max_tiles` output
/// tiles and a depth of at least `min_depth` run `depth / min_split` splits (at most
/// `max_splits`, and enough to give about `max_tiles` workgroups), whose partial sums a second
/// kernel adds in split order: no float atomics, the same bits every run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SplitK {
    pub max_tiles: u32,
    pub min_depth: u32,
    pub min_split: u32,
    pub max_splits: u32,
}

impl SplitK {
    /// Splits for a product of `tiles` output tiles and depth `depth`, and the depth of each
    /// (a multiple of `align`). One split: no split-K.
    pub fn plan(&self, tiles: u32, depth: u32, align: u32) -> (u32, u32) {
        if tiles == 0 || tiles >= self.max_tiles || depth < self.min_depth || self.max_splits < 2 {
            return (1, depth);
        }
        let wanted = self.max_tiles.div_ceil(tiles);
        let by_depth = depth / self.min_split.max(1);
        let splits = wanted.min(by_depth).min(self.max_splits).max(1);
        let len = depth.div_ceil(splits).next_multiple_of(align.max(1));
        (depth.div_ceil(len), len)
    }
}

/// Every kernel shape of one adapter class.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelTable {
    pub class: AdapterClass,
    /// The tiled SIMT matmul for f32 inputs (the f32 baseline) and for 16-bit inputs (bf16,
    /// packed f16; staged as f32).
    pub simt_f32: SimtTile,
    pub simt_16: SimtTile,
    /// The tensor-core GEMMs (matmul and convolutions) on 8×8 and 16×16 fragments.
    pub coop_8: CoopTiles,
    pub coop_16: CoopTiles,
    pub split_k: SplitK,
}

const fn simt(tm: u32, tn: u32, bk: u32) -> SimtTile {
    SimtTile {
        wg_x: 16,
        wg_y: 16,
        tm,
        tn,
        bk,
    }
}

const fn coop(sg: u32, frags: u32, bk: u32) -> CoopTile {
    CoopTile {
        sg_m: sg,
        sg_n: sg,
        fm: frags,
        fn_: frags,
        bk,
    }
}

impl KernelTable {
    /// The defaults of a class (what runs until a tuned table exists for the adapter).
    pub fn defaults(class: AdapterClass) -> KernelTable {
        // 2×2 subgroups; 16×16 fragments: 64×64 tiles, or llama.cpp's large 128×128 tile
        // (4×4 fragments) where both sides span 512, 64×128 where only the columns do;
        // 8×8 fragments: MLX's 64×64 tile, 64×128 wide.
        let wide = |fm, fn_, bk| CoopTile {
            sg_m: 2,
            sg_n: 2,
            fm,
            fn_,
            bk,
        };
        let coop_8 = CoopTiles {
            small: coop(2, 4, 32),
            wide: wide(4, 8, 32),
            large: coop(2, 4, 32),
            large_from: 512,
            conv_large: None,
        };
        // The larger 16×16 tiles take BK 16 where workgroup memory is 32 KiB.
        let coop_16 = |big_bk| CoopTiles {
            small: coop(2, 2, 32),
            wide: wide(2, 4, big_bk),
            large: coop(2, 4, big_bk),
            large_from: 512,
            conv_large: None,
        };
        // Split where there are fewer output tiles than about half the workgroups a large GPU
        // keeps in flight, and the depth is long (weight gradients over a whole batch).
        let split_k = |max_tiles| SplitK {
            max_tiles,
            min_depth: 2048,
            min_split: 512,
            max_splits: 16,
        };
        match class {
            // 48 KiB of workgroup memory (NVIDIA), 64 KiB (AMD): deep k slices.
            AdapterClass::Amd => KernelTable {
                class,
                simt_f32: simt(8, 8, 16),
                simt_16: simt(8, 8, 16),
                coop_8,
                coop_16: coop_16(32),
                split_k: split_k(128),
            },
            // NVIDIA allows 255 registers a thread: the 128×128 tile's accumulators take 128 of
            // them, and a convolution's pixel gather spills past the rest (NAK on Ampere: 68 to
            // 201 registers), so the convolutions take 64×128 there (216 to 240 registers).
            AdapterClass::Nvidia => KernelTable {
                class,
                simt_f32: simt(8, 8, 16),
                simt_16: simt(8, 8, 16),
                coop_8,
                coop_16: CoopTiles {
                    conv_large: Some(wide(2, 4, 32)),
                    ..coop_16(32)
                },
                split_k: split_k(128),
            },
            // 32 KiB (Apple): the large 16×16 tile at BK 16.
            AdapterClass::Apple | AdapterClass::Intel => KernelTable {
                class,
                simt_f32: simt(8, 8, 8),
                simt_16: simt(8, 8, 8),
                coop_8,
                coop_16: coop_16(16),
                split_k: split_k(64),
            },
            // A CPU adapter (Mesa 26's lavapipe) is a correctness device: every product takes
            // the 64×64 tile, so each kernel compiles once there (a 16×16 pipeline takes
            // seconds to compile on lavapipe) and the convolutions split their depth as they
            // did before the table. The wide and large tiles are checked on it through a
            // table that asks for them (tests/matmul_coop.rs).
            AdapterClass::Cpu => KernelTable {
                class,
                simt_f32: simt(8, 8, 8),
                simt_16: simt(8, 8, 8),
                coop_8: CoopTiles {
                    large_from: u32::MAX,
                    ..coop_8
                },
                coop_16: CoopTiles {
                    large_from: u32::MAX,
                    ..coop_16(16)
                },
                split_k: split_k(16),
            },
            // WebGPU's default 16 KiB: 64×64 tensor-core tiles only.
            AdapterClass::Other => KernelTable {
                class,
                simt_f32: simt(8, 8, 8),
                simt_16: simt(8, 8, 8),
                coop_8: CoopTiles {
                    small: coop(2, 4, 16),
                    wide: coop(2, 4, 16),
                    large: coop(2, 4, 16),
                    large_from: 512,
                    conv_large: None,
                },
                coop_16: CoopTiles {
                    small: coop(2, 2, 16),
                    wide: coop(2, 2, 16),
                    large: coop(2, 2, 16),
                    large_from: 512,
                    conv_large: None,
                },
                split_k: split_k(32),
            },
        }
    }

    /// The tiles for fragments of `edge`.
    pub fn coop(&self, edge: u32) -> &CoopTiles {
        if edge == 16 {
            &self.coop_16
        } else {
            &self.coop_8
        }
    }

    /// Lines for `info`.
    pub fn describe(&self, edge: Option<u32>) -> Vec<String> {
        let mut lines = vec![
            format!("SIMT f32     {}", self.simt_f32.describe()),
            format!("SIMT 16-bit  {}", self.simt_16.describe()),
        ];
        for e in [16, 8] {
            if edge.is_some_and(|used| used != e) {
                continue;
            }
            let t = self.coop(e);
            let name = format!("coop {e}x{e}");
            let from = t.large_from;
            lines.push(format!("{name:<12} small: {}", t.small.describe(e)));
            let wide = format!("wide (columns >= {from}): {}", t.wide.describe(e));
            lines.push(format!("{:<12} {wide}", ""));
            let large = format!("large (both sides >= {from}): {}", t.large.describe(e));
            lines.push(format!("{:<12} {large}", ""));
            if let Some(conv) = t.conv_large {
                let conv = format!("large convolutions: {}", conv.describe(e));
                lines.push(format!("{:<12} {conv}", ""));
            }
        }
        let s = &self.split_k;
        lines.push(match s.max_tiles {
            0 => "split-K      never".to_string(),
            _ => format!(
                "split-K      under {} output tiles and depth >= {}: up to {} splits of >= {}",
                s.max_tiles, s.min_depth, s.max_splits, s.min_split
            ),
        });
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_k_splits_only_few_tiles_over_long_depths() {
        let s = KernelTable::defaults(AdapterClass::Nvidia).split_k;
        assert_eq!(s.plan(200, 1 << 20, 32), (1, 1 << 20), "enough tiles");
        assert_eq!(s.plan(4, 1000, 32), (1, 1000), "short depth");
        let (splits, len) = s.plan(9, 16384, 32);
        assert!(splits > 1 && splits <= 16, "{splits}");
        assert_eq!(len % 32, 0);
        assert!(splits * len >= 16384 && (splits - 1) * len < 16384);
    }

    #[test]
    fn convolutions_take_their_own_large_tile_where_a_class_sets_one() {
        let nvidia = KernelTable::defaults(AdapterClass::Nvidia).coop_16;
        let conv = nvidia
            .conv_large
            .expect("NVIDIA's convolutions have a large tile");
        assert_eq!((conv.bm(16), conv.bn(16)), (64, 128));
        assert_eq!((nvidia.large.bm(16), nvidia.large.bn(16)), (128, 128));
        assert_eq!(nvidia.pick_conv(512, 4096), conv, "both sides large");
        assert_eq!(nvidia.pick(512, 4096), nvidia.large, "a GEMM keeps 128x128");
        assert_eq!(
            nvidia.pick_conv(64, 4096),
            nvidia.wide,
            "only the columns large"
        );
        assert_eq!(nvidia.pick_conv(64, 64), nvidia.small);
        assert!(
            nvidia.named().contains(&("conv_large", conv)),
            "checked and built"
        );
        let amd = KernelTable::defaults(AdapterClass::Amd).coop_16;
        assert_eq!(
            amd.pick_conv(512, 4096),
            amd.large,
            "no conv tile: the large one"
        );
        assert_eq!(amd.named().len(), 3);
    }
}
