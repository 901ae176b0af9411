//! The fused attention on tensor cores: `shaders/flash_coop_forward.wgsl` and
//! `shaders/flash_coop_backward.wgsl` over `shaders/include/flash_coop.wgsl`. The SIMT
//! bodies' algorithm with the products Q·Kᵀ, P·V (forward), dO·Vᵀ, Pᵀ·dO, dSᵀ·Q and dS·K
//! (backward) on cooperative-matrix fragments, f16 in and f32 accumulated; softmax, masks,
//! dropout and the row statistics stay f32. It runs for native f16 storage where tensor cores
//! are used ([`uses_tensor_cores`], as the matmul and the convolutions decide), on the
//! context's fragment shape and subgroup size ([`TensorCoreConfig`], WGSL constants from
//! [`coop_consts`]), up to head size [`MAX_HEAD_SIZE`]; elsewhere the SIMT bodies run.
//!
//! Blocks: the forward takes 32 query rows against 32 keys at a time, the backward 16 against
//! 16 (it holds q, dy, k and v at once). With 16×16 fragments and head size 64 the forward
//! needs 14,848 bytes of workgroup memory and the backward 13,312: within WebGPU's default
//! 16 KiB, so the tensor-core body asks no more of an adapter than the SIMT ones.

use super::Params;
use crate::dtype::Storage;
use crate::error::{Error, Result};
use crate::gpu::{Capabilities, GpuContext, KernelDesc, TensorCoreConfig};
use crate::ops::matmul::{coop_consts, uses_tensor_cores};
use crate::shader::{Grid, ShaderDecl};

/// The forward kernel on tensor cores.
pub static FORWARD_SHADER: ShaderDecl = ShaderDecl {
    name: "flash_coop_forward",
    source: include_str!("../../../shaders/flash_coop_forward.wgsl"),
    structs: &[Params::WGSL],
    variants: |shader| {
        Grid::new()
            .each_of(&["qkv", "y"], &[Storage::F16])
            .variants_with(shader, |_| specialisations(Pass::Forward))
    },
};

/// The dk/dv and dq kernels on tensor cores (delta runs on the SIMT shader).
pub static BACKWARD_SHADER: ShaderDecl = ShaderDecl {
    name: "flash_coop_backward",
    source: include_str!("../../../shaders/flash_coop_backward.wgsl"),
    structs: &[Params::WGSL],
    variants: |shader| {
        Grid::new()
            .each_of(&["qkv", "dy", "dqkv"], &[Storage::F16])
            .variants_with(shader, |_| specialisations(Pass::Backward))
    },
};

/// The largest head size of the tensor-core body (the backward's four staged head-sized
/// blocks must fit 16 KiB); larger heads run on the SIMT bodies.
pub const MAX_HEAD_SIZE: usize = 64;
/// Subgroups per workgroup (`SUBGROUPS` in the shaders).
const SUBGROUPS: u32 = 4;
/// WebGPU's default `maxComputeWorkgroupStorageSize`.
const DEFAULT_WORKGROUP_BYTES: u32 = 16 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Pass {
    Forward,
    Backward,
}

/// The block sizes of one pass: the shaders' constants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Layout {
    pass: Pass,
    edge: u32,
    subgroup: u32,
    hs: u32,
    /// The head size padded to whole fragments, so that every product's fragment count is a
    /// multiple of the four subgroups (each runs the same number of jobs).
    hsp: u32,
    /// Query rows and keys per block.
    pub(super) bq: u32,
    bkv: u32,
    /// Depth parts of each score product (2 where a block has too few score fragments for
    /// four subgroups: the backward's 16×16 blocks of 16×16 fragments).
    split: u32,
}

impl Layout {
    /// The layout of `pass` for head size `hs`, or None where the fragments cannot be dealt
    /// evenly (a subgroup wider than a fragment has elements).
    pub(super) fn new(config: TensorCoreConfig, pass: Pass, hs: usize) -> Option<Layout> {
        let (edge, subgroup) = (config.edge, config.subgroup);
        let (bq, bkv) = match pass {
            Pass::Forward => (32, 32),
            Pass::Backward => (16, 16),
        };
        if hs == 0 || hs > MAX_HEAD_SIZE || subgroup == 0 || (edge * edge) % subgroup != 0 {
            return None;
        }
        let hs = hs as u32;
        let base = Layout {
            pass,
            edge,
            subgroup,
            hs,
            hsp: 0,
            bq,
            bkv,
            split: 1,
        };
        (hs.div_ceil(edge)..=MAX_HEAD_SIZE as u32 / edge)
            .flat_map(|frags| (1..=frags).map(move |split| (frags * edge, split)))
            .map(|(hsp, split)| Layout { hsp, split, ..base })
            .find(|l| l.deals_evenly() && l.workgroup_bytes() <= DEFAULT_WORKGROUP_BYTES)
    }

    /// Products per block of scores: S (and dP in the backward).
    fn products(&self) -> u32 {
        match self.pass {
            Pass::Forward => 1,
            Pass::Backward => 2,
        }
    }

    /// Every product's fragment count is a multiple of the subgroups, and the split cuts the
    /// depth into whole fragments.
    fn deals_evenly(&self) -> bool {
        let (e, d) = (self.edge, self.hsp / self.edge);
        let score_jobs = self.products() * (self.bq / e) * (self.bkv / e) * self.split;
        let value_jobs = match self.pass {
            // O = P·V
            Pass::Forward => vec![(self.bq / e) * d],
            // dk and dv per key block; dq per query block
            Pass::Backward => vec![2 * (self.bkv / e) * d, (self.bq / e) * d],
        };
        d.is_multiple_of(self.split)
            && score_jobs.is_multiple_of(SUBGROUPS)
            && value_jobs.iter().all(|j| j.is_multiple_of(SUBGROUPS))
    }

    /// Bytes of workgroup memory the pass's kernels declare (as the shaders size them).
    pub(super) fn workgroup_bytes(&self) -> u32 {
        let (bq, bkv, hsp) = (self.bq, self.bkv, self.hsp);
        let scratch = SUBGROUPS * self.edge * self.edge;
        let (halves, floats, rows) = match self.pass {
            // q, k or v, P; scores or scratch; m, l, classes, rescale per row
            Pass::Forward => (
                bq * hsp + bkv * hsp + bq * bkv,
                (bq * bkv).max(scratch),
                4 * bq,
            ),
            // q, dy, k, v, P, dS; score parts or scratch
            Pass::Backward => (
                2 * (bq * hsp + bkv * hsp + bq * bkv),
                (self.split * 2 * bq * bkv).max(scratch),
                0,
            ),
        };
        2 * halves + 4 * floats + 4 * rows
    }

    /// The shader constants (`BLOCK`: rows or keys per workgroup, the same here).
    pub(super) fn consts(&self) -> Vec<(&'static str, String)> {
        let mut c = vec![
            ("HS", format!("{}u", self.hs)),
            ("HSP", format!("{}u", self.hsp)),
            ("BQ", format!("{}u", self.bq)),
            ("BKV", format!("{}u", self.bkv)),
            ("BLOCK", format!("{}u", self.bq)),
            ("SPLIT", format!("{}u", self.split)),
        ];
        c.extend(coop_consts(self.subgroup, self.edge, 1));
        c
    }
}

/// Whether attention over tensors of these storages with head size `hs` runs on tensor cores.
pub(super) fn eligible(caps: &Capabilities, storages: &[Storage], hs: usize) -> bool {
    uses_tensor_cores(caps, storages)
        && caps.tensor_cores.config().is_some_and(|c| {
            [Pass::Forward, Pass::Backward]
                .iter()
                .all(|&pass| Layout::new(c, pass, hs).is_some())
        })
}

/// The layout of `pass` here, or why the tensor-core body cannot run (it is only ever forced
/// onto such a context; `Auto` never picks it there).
pub(super) fn layout(
    ctx: &GpuContext,
    op: &'static str,
    pass: Pass,
    storages: &[Storage],
    hs: usize,
) -> Result<Layout> {
    let Some(config) = ctx.caps.tensor_cores.config() else {
        return Err(Error::Unsupported(format!(
            "{op}: the tensor-core body needs tensor cores; on `{}` they are {}",
            ctx.report.name,
            ctx.caps.tensor_cores.describe()
        )));
    };
    if let Some(s) = storages.iter().find(|&&s| s != Storage::F16) {
        return Err(Error::Unsupported(format!(
            "{op}: the tensor-core body takes native f16 storage, got {}",
            s.name()
        )));
    }
    Layout::new(config, pass, hs).ok_or_else(|| {
        Error::Unsupported(format!(
            "{op}: the tensor-core body takes head sizes up to {MAX_HEAD_SIZE} on fragments \
             with at least as many elements as a subgroup has lanes, got head size {hs} on {}",
            config.describe()
        ))
    })
}

/// A tensor-core entry's kernel description.
pub(super) fn desc(
    shader: &'static ShaderDecl,
    entry: &'static str,
    layout: &Layout,
) -> KernelDesc {
    let mut desc = KernelDesc::new(shader, entry);
    desc.consts = layout.consts();
    desc
}

/// The variants the portability tests check: both fragment shapes on subgroups of 32 (other
/// fixed sizes change the workgroup size and the lanes' shares), at the head sizes of
/// gpt-tiny (16), gpt-char (64) and an odd one (5).
fn specialisations(pass: Pass) -> Vec<Vec<(&'static str, String)>> {
    let mut v = Vec::new();
    for edge in [8, 16] {
        for hs in [5, 16, 64] {
            let config = TensorCoreConfig {
                edge,
                subgroup: 32,
                forced: false,
            };
            let layout = Layout::new(config, pass, hs).expect("a layout for every head size");
            v.push(layout.consts());
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_head_size_deals_evenly_within_16_kib() {
        for edge in [8, 16] {
            for subgroup in [4, 8, 16, 32, 64] {
                let config = TensorCoreConfig {
                    edge,
                    subgroup,
                    forced: false,
                };
                for hs in 1..=MAX_HEAD_SIZE {
                    for pass in [Pass::Forward, Pass::Backward] {
                        let fits = edge * edge >= subgroup;
                        let Some(l) = Layout::new(config, pass, hs) else {
                            assert!(!fits, "{edge}x{edge} sg {subgroup} hs {hs} {pass:?}");
                            continue;
                        };
                        assert!(l.deals_evenly() && l.hsp >= l.hs, "{l:?}");
                        assert!(l.workgroup_bytes() <= DEFAULT_WORKGROUP_BYTES, "{l:?}");
                    }
                }
                assert!(Layout::new(config, Pass::Forward, MAX_HEAD_SIZE + 1).is_none());
            }
        }
    }

    #[test]
    fn gpt_char_heads_use_the_documented_bytes() {
        let config = TensorCoreConfig {
            edge: 16,
            subgroup: 32,
            forced: false,
        };
        let bytes = |pass| Layout::new(config, pass, 64).unwrap().workgroup_bytes();
        assert_eq!(bytes(Pass::Forward), 14_848);
        assert_eq!(bytes(Pass::Backward), 13_312);
    }
}
