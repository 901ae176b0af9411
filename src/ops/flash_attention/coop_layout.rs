//! Block sizes of the tensor-core attention, chosen per adapter.
//!
//! FlashAttention-2's work partition on four subgroups: every subgroup owns one fragment row
//! of the workgroup's block (`edge` query rows in the forward and dq, `edge` keys in dk/dv),
//! keeps that row's reused operand in named fragments (q, dy or k, v), computes its own
//! scores, runs the softmax (or the score gradients) of its own rows with the lanes spread
//! along each row, and accumulates its own outputs in named fragments. Workgroup barriers
//! only guard the staging of the streamed operand (k and v, or q and dy); everything else is
//! per subgroup, synchronised with subgroup barriers.
//!
//! What an adapter gets is [`FlashCoopConfig`] (its workgroup memory and whether subgroup
//! barriers are used); [`Layout::new`] takes the largest streamed step whose workgroup memory
//! fits it.

use crate::dtype::Storage;
use crate::gpu::{Capabilities, TensorCoreConfig};
use crate::ops::matmul::uses_tensor_cores;

/// The largest head size of the tensor-core body: eight named fragments of 8 channels per
/// operand (four of 16); larger heads run on the SIMT bodies.
pub const MAX_HEAD_SIZE: usize = 64;
/// Subgroups per workgroup (`SUBGROUPS` in the shaders).
const SUBGROUPS: u32 = 4;
/// Steps tried, largest first: keys per step (forward, dq) or queries per step (dk/dv).
const STEPS: [u32; 4] = [64, 32, 16, 8];

/// The per-adapter choices of the tensor-core attention: all of them sit here, so a table of
/// adapter classes can set them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlashCoopConfig {
    /// Workgroup memory a kernel may declare: the adapter's `maxComputeWorkgroupStorageSize`
    /// (48 KiB on NVIDIA, 64 KiB on AMD, 32 KiB on Apple and lavapipe).
    pub workgroup_bytes: u32,
    /// Per-subgroup scratch is synchronised with `subgroupBarrier` (else `workgroupBarrier`:
    /// the same sequence of barriers, all of them workgroup-wide).
    pub subgroup_barriers: bool,
}

impl FlashCoopConfig {
    /// What an adapter gets: its whole workgroup memory, and subgroup barriers where the
    /// device has them.
    pub fn for_adapter(caps: &Capabilities) -> FlashCoopConfig {
        FlashCoopConfig {
            workgroup_bytes: caps.max_compute_workgroup_storage_size,
            subgroup_barriers: caps.subgroup_barrier,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Pass {
    /// `flash_coop_forward`: y and the row log-sum-exp.
    Forward,
    /// `flash_coop_dkv`: dk and dv of a block of keys.
    KeyGrads,
    /// `flash_coop_dq`: dq of a block of queries.
    QueryGrads,
}

/// The block sizes of one kernel: the shaders' constants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Layout {
    pass: Pass,
    edge: u32,
    subgroup: u32,
    /// The smallest subgroup the driver may run the kernel at (`subgroup` where the size is
    /// fixed): more subgroups than SUBGROUPS then, the rest only stage.
    subgroup_min: u32,
    hs: u32,
    /// The head size rounded up to whole fragments.
    hsp: u32,
    /// Rows per workgroup (forward and dq: queries; dk/dv: keys): one fragment row per
    /// subgroup.
    pub(super) block: u32,
    /// The streamed side of a step: keys (forward, dq) or queries (dk/dv).
    step: u32,
    /// Regions side by side: the forward's k and v (else v over k: two more barriers per
    /// step); dk/dv's dropout(P)ᵀ and dSᵀ beside q's and dy's rows (else over them, which
    /// S and dP have spent: a workgroup barrier per step in place of a subgroup one).
    apart: bool,
    /// Lanes sharing one row of the softmax or score gradients (a power of two).
    lanes_per_row: u32,
    subgroup_sync: bool,
}

impl Layout {
    /// The layout of `pass` for head size `hs` within `config`, or None where none fits
    /// (or the subgroup is wider than a fragment has elements, or the head is too large).
    pub(super) fn new(
        tc: TensorCoreConfig,
        config: FlashCoopConfig,
        pass: Pass,
        hs: usize,
    ) -> Option<Layout> {
        let (edge, subgroup, subgroup_min) = (tc.edge, tc.subgroup, tc.subgroup_min);
        if hs == 0 || hs > MAX_HEAD_SIZE || !subgroup.is_power_of_two() || subgroup > edge * edge {
            return None;
        }
        let hs = hs as u32;
        let apart: &[bool] = match pass {
            Pass::QueryGrads => &[true],
            _ => &[true, false],
        };
        STEPS
            .iter()
            .filter(|&&step| step >= edge)
            .flat_map(|&step| apart.iter().map(move |&a| (step, a)))
            .filter_map(|(step, apart)| {
                let mut l = Layout {
                    pass,
                    edge,
                    subgroup,
                    subgroup_min,
                    hs,
                    hsp: hs.div_ceil(edge) * edge,
                    block: SUBGROUPS * edge,
                    step,
                    apart,
                    lanes_per_row: 0,
                    subgroup_sync: config.subgroup_barriers,
                };
                l.lanes_per_row = l.lanes()?;
                Some(l)
            })
            .find(|l| l.workgroup_bytes() <= config.workgroup_bytes)
    }

    /// Query rows and keys of a score block.
    fn bq_bkv(&self) -> (u32, u32) {
        match self.pass {
            Pass::KeyGrads => (self.step, self.block),
            _ => (self.block, self.step),
        }
    }

    /// Lanes per row of the elementwise phase over a subgroup's slab (rows x columns): four
    /// columns per lane where the row is wide enough (one Philox call per four dropout
    /// keys), no lane left without a row, and a row's lanes within the smallest subgroup
    /// the driver may run (a smaller subgroup takes fewer rows at once).
    fn lanes(&self) -> Option<u32> {
        let (rows, cols) = match self.pass {
            // Every query row of the step, against the subgroup's own keys.
            Pass::KeyGrads => (self.step, self.edge),
            // The subgroup's own query rows against every key of the step.
            _ => (self.edge, self.step),
        };
        let lanes = (cols / 4)
            .clamp(1, self.subgroup_min)
            .max(self.subgroup / rows);
        (lanes <= cols && lanes <= self.subgroup_min).then_some(lanes)
    }

    /// Halves and floats of the two workgroup arrays (and u32s of the forward's row
    /// classes), as the shaders lay them out: head-sized rows padded by 8 halves, score rows
    /// by 4 floats, P and dS rows by 8 halves (no power-of-two strides). An operand whose
    /// rows are a product's depth is staged transposed too (HSP channel rows of the block's
    /// rows + 8 halves), so that every fragment load reads its depth contiguous.
    fn arrays(&self) -> (u32, u32, u32) {
        let (bq, bkv) = self.bq_bkv();
        let hsp = self.hsp;
        let qs = hsp + 8;
        let (ss, ps) = (bkv + 4, bkv + 8);
        match self.pass {
            // q staged once, then k and vᵀ (vᵀ over k or beside it), P; scores, m, l,
            // rescale; classes
            Pass::Forward => {
                let v_at = if self.apart { bkv * qs } else { 0 };
                let p_at = (v_at + hsp * ps).max(bkv * qs);
                let halves = (bq * qs).max(p_at + bq * ps);
                (halves, bq * ss + 3 * bq, bq)
            }
            // k then v staged once; q, dy, qᵀ, dyᵀ, dropout(P)ᵀ, dSᵀ (or those two over q and
            // dy); S, dP, lse, delta, or the subgroups' output scratch
            Pass::KeyGrads => {
                let pts = bq + 8;
                let (rows, pd) = (2 * bq * qs, 2 * bkv * pts);
                let step = if self.apart {
                    rows + 2 * hsp * pts + pd
                } else {
                    rows.max(pd) + 2 * hsp * pts
                };
                let halves = (bkv * qs).max(step);
                let floats = (2 * bq * ss + 2 * bq).max(SUBGROUPS * self.edge * self.edge);
                (halves, floats, 0)
            }
            // q then dy staged once; k, kᵀ, v, dS; S, dP, lse, delta
            Pass::QueryGrads => {
                let halves = (bq * qs).max(2 * bkv * qs + hsp * ps + bq * ps);
                (halves, 2 * bq * ss + 2 * bq, 0)
            }
        }
    }

    /// Bytes of workgroup memory the kernel declares (`tests/platforms.rs` checks the
    /// shaders against it).
    pub(super) fn workgroup_bytes(&self) -> u32 {
        let (halves, floats, words) = self.arrays();
        2 * halves + 4 * floats + 4 * words
    }

    /// The block's query rows and keys, `64x64`, and `(v over k)` where the forward stages
    /// them one after the other, `(P over q)` where dk/dv writes dropout(P) and dS over q.
    pub(super) fn describe(&self) -> String {
        let (bq, bkv) = self.bq_bkv();
        let over = match (self.apart, self.pass) {
            (true, _) => "",
            (false, Pass::Forward) => " (v over k)",
            (false, _) => " (P over q)",
        };
        format!("{bq}x{bkv}{over}")
    }

    /// The shader constants.
    pub(super) fn consts(&self) -> Vec<(&'static str, String)> {
        let (bq, bkv) = self.bq_bkv();
        let (halves, floats, _) = self.arrays();
        let e = self.edge;
        vec![
            ("HS", format!("{}u", self.hs)),
            ("HSP", format!("{}u", self.hsp)),
            // Channel fragments of a head-sized row: the shaders' `#for d in 0..D_FRAGS`.
            ("D_FRAGS", format!("{}u", self.hsp / e)),
            ("BQ", format!("{bq}u")),
            ("BKV", format!("{bkv}u")),
            ("BLOCK", format!("{}u", self.block)),
            ("KV_REGIONS", format!("{}u", if self.apart { 2 } else { 1 })),
            ("PD_OVER", format!("{}u", u32::from(!self.apart))),
            ("LANES_PER_ROW", format!("{}u", self.lanes_per_row)),
            ("SUBGROUP_SYNC", self.subgroup_sync.to_string()),
            ("H_TILE", format!("{halves}u")),
            ("F_TILE", format!("{floats}u")),
            ("WORKGROUP_BYTES", format!("{}u", self.workgroup_bytes())),
            ("SUBGROUP", format!("{}u", self.subgroup)),
            ("SUBGROUP_MIN", format!("{}u", self.subgroup_min)),
            ("FRAG", format!("{e}u")),
            ("alias FragA", format!("coop_mat{e}x{e}<f16, A>")),
            ("alias FragB", format!("coop_mat{e}x{e}<f16, B>")),
            ("alias FragC", format!("coop_mat{e}x{e}<f32, C>")),
        ]
    }
}

const PASSES: [Pass; 3] = [Pass::Forward, Pass::KeyGrads, Pass::QueryGrads];

/// Whether attention over tensors of these storages with head size `hs` runs on tensor cores
/// under `config` (the adapter's, unless a caller forces one).
pub(super) fn eligible(
    caps: &Capabilities,
    config: Option<FlashCoopConfig>,
    storages: &[Storage],
    hs: usize,
) -> bool {
    let config = config.unwrap_or_else(|| FlashCoopConfig::for_adapter(caps));
    uses_tensor_cores(caps, storages)
        && caps.subgroup_barrier
        && caps.tensor_cores.config().is_some_and(|tc| {
            PASSES
                .iter()
                .all(|&pass| Layout::new(tc, config, pass, hs).is_some())
        })
}

/// The blocks of head size `hs` under `config` (None: the adapter's) here: forward, dk/dv,
/// dq, each as query rows x keys; None where the body does not run.
pub(super) fn describe(
    caps: &Capabilities,
    config: Option<FlashCoopConfig>,
    hs: usize,
) -> Option<String> {
    let tc = caps.tensor_cores.config()?;
    let config = config.unwrap_or_else(|| FlashCoopConfig::for_adapter(caps));
    let blocks: Option<Vec<String>> = PASSES
        .iter()
        .map(|&pass| Layout::new(tc, config, pass, hs).map(|l| l.describe()))
        .collect();
    blocks.map(|b| format!("blocks {} forward, {} dk/dv, {} dq", b[0], b[1], b[2]))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Pass; 3] = [Pass::Forward, Pass::KeyGrads, Pass::QueryGrads];

    fn tc(edge: u32, subgroup: u32) -> TensorCoreConfig {
        TensorCoreConfig {
            edge,
            subgroup,
            subgroup_min: subgroup,
            forced: false,
        }
    }

    fn config(bytes: u32) -> FlashCoopConfig {
        FlashCoopConfig {
            workgroup_bytes: bytes,
            subgroup_barriers: true,
        }
    }

    #[test]
    fn every_head_size_has_a_layout_on_every_tensor_core_adapter() {
        // gpu::COOP_MIN_WORKGROUP_BYTES: the least a tensor-core adapter has.
        let least = crate::gpu::COOP_MIN_WORKGROUP_BYTES;
        for edge in [8, 16] {
            for subgroup in [4, 8, 16, 32, 64] {
                for hs in 1..=MAX_HEAD_SIZE {
                    for pass in ALL {
                        let fits = edge * edge >= subgroup;
                        let Some(l) = Layout::new(tc(edge, subgroup), config(least), pass, hs)
                        else {
                            assert!(!fits, "{edge}x{edge} sg {subgroup} hs {hs} {pass:?}");
                            continue;
                        };
                        assert!(l.workgroup_bytes() <= least, "{l:?}");
                        assert!(l.hsp >= l.hs && l.hsp.is_multiple_of(edge), "{l:?}");
                        // Named fragments: at most eight per operand.
                        assert!(l.hsp / edge <= 8, "{l:?}");
                        // Every lane has a row in the elementwise phase.
                        let rows = if pass == Pass::KeyGrads { l.step } else { edge };
                        assert!(rows.is_multiple_of(subgroup / l.lanes_per_row), "{l:?}");
                    }
                }
                let l = Layout::new(tc(edge, subgroup), config(least), Pass::Forward, 65);
                assert!(l.is_none());
            }
        }
    }

    /// Laid out for 64 lanes that the driver may run at 32 (RDNA3): a row's lanes fit the
    /// smaller subgroup, every lane of either size has a row, and the blocks are those of a
    /// fixed 64.
    #[test]
    fn varying_subgroups_split_rows_within_the_smallest() {
        for edge in [8, 16] {
            for pass in ALL {
                for hs in [5, 16, 64] {
                    let varying = TensorCoreConfig {
                        subgroup_min: 32,
                        ..tc(edge, 64)
                    };
                    let bytes = config(64 * 1024);
                    let l = Layout::new(varying, bytes, pass, hs).expect("a layout");
                    let fixed = Layout::new(tc(edge, 64), bytes, pass, hs).expect("a layout");
                    assert_eq!(l.describe(), fixed.describe(), "{l:?}");
                    assert!(l.lanes_per_row <= 32, "{l:?}");
                    let rows = if pass == Pass::KeyGrads { l.step } else { edge };
                    for lanes in [32, 64] {
                        assert!(
                            rows.is_multiple_of(lanes / l.lanes_per_row),
                            "{l:?} {lanes}"
                        );
                    }
                }
            }
        }
    }

    /// The blocks each adapter class gets for gpt-char's head (64) on subgroups of 32.
    #[test]
    fn larger_workgroup_memory_gives_larger_steps() {
        let blocks = |edge, bytes| {
            ALL.map(|pass| {
                let l = Layout::new(tc(edge, 32), config(bytes), pass, 64).unwrap();
                (l.describe(), l.workgroup_bytes())
            })
        };
        // NVIDIA: 48 KiB, 16x16 fragments.
        let nvidia = blocks(16, 48 * 1024);
        assert_eq!(nvidia[0], ("64x64".into(), 46_080));
        assert_eq!(nvidia[1], ("32x64".into(), 47_360));
        assert_eq!(nvidia[2], ("64x32".into(), 38_400));
        // 32 KiB (Apple; Mesa 26's lavapipe forced to 16x16): smaller streamed steps.
        let small = blocks(16, 32 * 1024);
        assert_eq!(small[0], ("64x32".into(), 25_088));
        assert_eq!(small[1], ("16x64".into(), 25_728));
        assert_eq!(small[2], ("64x16".into(), 21_504));
        // 8x8 fragments: blocks of 32 (dk/dv's transposed q and dy leave room for 32 queries
        // a step where dropout(P) and dS go over q and dy).
        let apple = blocks(8, 32 * 1024);
        assert_eq!(apple[0].0, "32x64");
        assert_eq!(apple[1].0, "32x32 (P over q)");
        assert_eq!(apple[2].0, "32x32");
    }
}
