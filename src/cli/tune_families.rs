//! The families of the kernel table that `bench tune` times one at a time: each is one field
//! of the table, its candidates (whole tables differing in that field) and the workloads that
//! take that field, so a candidate's time is its own. A convolution whose GEMM takes the large
//! tile is timed on the convolution's large tile (`conv_large`, which it runs where the class
//! sets one), never in the GEMMs' large family, whose candidates it would not run.

use webgpu_amp::GpuContext;
use webgpu_amp::Storage;
use webgpu_amp::gpu::{CoopTiles, KernelTable, TileSize};
use webgpu_amp::ops::bodies;
use webgpu_amp::ops::matmul::MatmulKernel;

use super::tune_workloads::{Work, coop_candidates, simt_candidates};

/// The field of the kernel table a family tunes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    /// A tensor-core tile of fragment edge `edge`.
    Coop {
        edge: u32,
        slot: CoopSlot,
    },
    SimtF32,
    Simt16,
    SplitK,
}

impl Field {
    /// The family's name in the progress bar, the notes and the file's measurements.
    pub fn name(self) -> String {
        match self {
            Field::Coop { edge, slot } => {
                let tile = match slot {
                    CoopSlot::Gemm(TileSize::Large) => "large",
                    CoopSlot::Gemm(TileSize::Wide) => "wide",
                    CoopSlot::Gemm(TileSize::Small) => "small",
                    CoopSlot::ConvLarge => "conv_large",
                };
                format!("coop {edge}x{edge} {tile}")
            }
            Field::SimtF32 => "simt f32".into(),
            Field::Simt16 => "simt 16-bit".into(),
            Field::SplitK => "split-K".into(),
        }
    }
}

/// Which tensor-core tile: one a GEMM takes by size, or the convolutions' large one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CoopSlot {
    Gemm(TileSize),
    ConvLarge,
}

/// One family: its candidates and the workloads that score them, run with `kernel` on inputs
/// of `storage`.
pub struct Family {
    pub field: Field,
    pub candidates: Vec<(String, KernelTable)>,
    pub work: Vec<Work>,
    pub storage: Storage,
    pub kernel: MatmulKernel,
}

/// The family's field of `winner` copied into `table` (the families are disjoint fields).
pub fn merge(table: &KernelTable, winner: &KernelTable, field: Field) -> KernelTable {
    let mut t = table.clone();
    match field {
        Field::SimtF32 => t.simt_f32 = winner.simt_f32,
        Field::Simt16 => t.simt_16 = winner.simt_16,
        Field::SplitK => t.split_k = winner.split_k,
        Field::Coop { edge, slot } => {
            let from = *winner.coop(edge);
            let to = coop_mut(&mut t, edge);
            match slot {
                CoopSlot::Gemm(size) => *to.get_mut(size) = *from.get(size),
                CoopSlot::ConvLarge => to.conv_large = from.conv_large,
            }
        }
    }
    t
}

fn coop_mut(table: &mut KernelTable, edge: u32) -> &mut CoopTiles {
    if edge == 16 {
        &mut table.coop_16
    } else {
        &mut table.coop_8
    }
}

/// The tile slot `work` takes in `tiles`: a convolution's GEMM picks as the convolution does
/// (`CoopTiles::pick_conv`), so where it takes the large tile it is the conv_large slot's.
fn slot_of(tiles: &CoopTiles, work: &Work) -> CoopSlot {
    match work {
        Work::Gemm(g) => CoopSlot::Gemm(tiles.size(g.m as u32, g.n as u32)),
        Work::Conv(c) => {
            let (rows, cols) = c.gemm_sides();
            match tiles.size(rows as u32, cols as u32) {
                TileSize::Large => CoopSlot::ConvLarge,
                size => CoopSlot::Gemm(size),
            }
        }
    }
}

/// The tensor-core families of `table` at fragment edge `edge`: the GEMMs' large, wide and
/// small tiles, and the convolutions' large one, each with the workloads that take it (a
/// family no workload takes is left out).
pub fn coop_families(
    table: &KernelTable,
    edge: u32,
    limits: &webgpu_amp::gpu::KernelLimits,
    work: &[Work],
) -> Vec<Family> {
    let tiles = *table.coop(edge);
    let mut out = Vec::new();
    for slot in [
        CoopSlot::Gemm(TileSize::Large),
        CoopSlot::Gemm(TileSize::Wide),
        CoopSlot::Gemm(TileSize::Small),
        CoopSlot::ConvLarge,
    ] {
        let shapes: Vec<Work> = work
            .iter()
            .filter(|w| slot_of(&tiles, w) == slot)
            .copied()
            .collect();
        if shapes.is_empty() {
            continue;
        }
        // A class without a convolution tile runs its convolutions on `large`: that is the
        // first candidate, and the winner is written as `conv_large`.
        let current = match slot {
            CoopSlot::Gemm(size) => *tiles.get(size),
            CoopSlot::ConvLarge => tiles.conv_large.unwrap_or(tiles.large),
        };
        let candidates = coop_candidates(current, edge, limits)
            .into_iter()
            .map(|tile| {
                let mut t = table.clone();
                let c = coop_mut(&mut t, edge);
                match slot {
                    CoopSlot::Gemm(size) => *c.get_mut(size) = tile,
                    CoopSlot::ConvLarge => c.conv_large = Some(tile),
                }
                (tile.describe(edge), t)
            })
            .collect();
        out.push(Family {
            field: Field::Coop { edge, slot },
            candidates,
            work: shapes,
            storage: Storage::F16,
            kernel: MatmulKernel::Coop,
        });
    }
    out
}

/// The families this adapter can run, each with its candidates and workloads (at most two
/// candidates each when `quick`).
pub fn families(ctx: &GpuContext, table: &KernelTable, work: &[Work], quick: bool) -> Vec<Family> {
    let limits = ctx.caps.kernel_limits();
    let gemms: Vec<Work> = work
        .iter()
        .filter(|w| matches!(w, Work::Gemm(_)))
        .copied()
        .collect();
    let mut out = Vec::new();
    if let Some(config) = ctx.caps.tensor_cores.config() {
        out.extend(coop_families(table, config.edge, &limits, work));
    }
    for (field, storage) in [
        (Field::SimtF32, Storage::F32),
        (Field::Simt16, Storage::BF16),
    ] {
        let f32 = field == Field::SimtF32;
        let current = if f32 { table.simt_f32 } else { table.simt_16 };
        let candidates = simt_candidates(current, &limits)
            .into_iter()
            .map(|tile| {
                let mut t = table.clone();
                if f32 {
                    t.simt_f32 = tile
                } else {
                    t.simt_16 = tile
                }
                (tile.describe(), t)
            })
            .collect();
        out.push(Family {
            field,
            candidates,
            work: gemms.clone(),
            storage,
            kernel: MatmulKernel::Tiled,
        });
    }
    // When to split K: on the weight gradients, on the body f16 products take here.
    let f16 = ctx.storage_for(webgpu_amp::DType::F16);
    let body = bodies::matmul(&ctx.caps, f16, f16);
    let body = if body == MatmulKernel::Direct {
        MatmulKernel::Tiled
    } else {
        body
    };
    let mut split = Vec::new();
    for max_tiles in [table.split_k.max_tiles, 0, 32, 64, 128, 256] {
        let mut t = table.clone();
        t.split_k.max_tiles = max_tiles;
        let label = match max_tiles {
            0 => "no split-K".to_string(),
            n => format!("split under {n} output tiles"),
        };
        if !split
            .iter()
            .any(|(l, _): &(String, KernelTable)| *l == label)
        {
            split.push((label, t));
        }
    }
    let weight_grads: Vec<Work> = gemms
        .iter()
        .filter(|w| matches!(w, Work::Gemm(g) if g.weight_grad))
        .copied()
        .collect();
    out.push(Family {
        field: Field::SplitK,
        candidates: split,
        work: weight_grads,
        storage: f16,
        kernel: body,
    });
    if quick {
        for family in &mut out {
            family.candidates.truncate(2);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::tune_workloads::workloads;
    use super::*;
    use webgpu_amp::gpu::{AdapterClass, KernelLimits};

    fn limits() -> KernelLimits {
        // An Ampere's (NVK reports these): 48 KiB of workgroup memory, subgroups of 32.
        KernelLimits::of(
            &wgpu::Limits {
                max_compute_workgroup_storage_size: 49152,
                max_compute_invocations_per_workgroup: 1024,
                max_compute_workgroup_size_x: 1024,
                max_compute_workgroup_size_y: 1024,
                ..wgpu::Limits::default()
            },
            32,
        )
    }

    #[test]
    fn convolutions_taking_the_large_tile_are_timed_on_conv_large_alone() {
        let table = KernelTable::defaults(AdapterClass::Nvidia);
        let work = workloads(false);
        let families = coop_families(&table, 16, &limits(), &work);
        let names: Vec<String> = families.iter().map(|f| f.field.name()).collect();
        assert!(names.contains(&"coop 16x16 conv_large".into()), "{names:?}");
        let tiles = table.coop_16;
        for family in &families {
            for w in &family.work {
                match (family.field, w) {
                    (Field::Coop { slot, .. }, Work::Conv(c)) => {
                        let (rows, cols) = c.gemm_sides();
                        let runs = tiles.pick_conv(rows as u32, cols as u32);
                        // Every candidate's tile in this slot is the one the convolution runs.
                        for (_, t) in &family.candidates {
                            let tried = t.coop_16.pick_conv(rows as u32, cols as u32);
                            let slot_tile = match slot {
                                CoopSlot::ConvLarge => t.coop_16.conv_large.unwrap(),
                                CoopSlot::Gemm(size) => *t.coop_16.get(size),
                            };
                            assert_eq!(
                                tried,
                                slot_tile,
                                "{} {}",
                                family.field.name(),
                                w.describe()
                            );
                        }
                        // The first candidate is the table as it stands.
                        let first = &family.candidates[0].1.coop_16;
                        assert_eq!(first.pick_conv(rows as u32, cols as u32), runs);
                    }
                    (Field::Coop { slot, .. }, Work::Gemm(_)) => {
                        assert_ne!(
                            slot,
                            CoopSlot::ConvLarge,
                            "a GEMM in {}",
                            family.field.name()
                        )
                    }
                    _ => unreachable!(),
                }
            }
        }
    }

    #[test]
    fn a_table_without_a_convolution_tile_starts_from_large_and_merges_conv_large_only() {
        let table = KernelTable::defaults(AdapterClass::Amd);
        assert!(table.coop_16.conv_large.is_none());
        let families = coop_families(&table, 16, &limits(), &workloads(false));
        let conv = families
            .iter()
            .find(|f| {
                f.field
                    == Field::Coop {
                        edge: 16,
                        slot: CoopSlot::ConvLarge,
                    }
            })
            .expect("the presets' convolutions take the large tile");
        assert_eq!(
            conv.candidates[0].1.coop_16.conv_large,
            Some(table.coop_16.large)
        );
        let (_, winner) = conv.candidates.last().unwrap();
        let merged = merge(&table, winner, conv.field);
        assert_eq!(merged.coop_16.conv_large, winner.coop_16.conv_large);
        assert_eq!(
            merged.coop_16.large, table.coop_16.large,
            "the GEMMs' tile is kept"
        );
        assert_eq!(merged.coop_8, table.coop_8);
    }
}
