//! What the kernels assume of a kernel table's shapes: one validity function per family of the
//! table, each rule read off the WGSL that takes the shape, so a table that passes computes
//! what the kernels compute with the built-in one. Every path that accepts a table checks it
//! here: a tuning file (`--tuning`, `WEBGPU_AMP_TUNING`), a committed one (`tuning/`), the
//! class defaults, `bench tune`'s candidates and a context made for one
//! ([`crate::gpu::GpuContext::with_kernel_table`]).
//!
//! - SIMT tiles ([`SimtTile`], `shaders/matmul.wgsl`'s `matmul_tiled`, f32 and 16-bit inputs
//!   alike): the k slices of both operands are staged in chunks of 8 consecutive elements of a
//!   stored row (one 16-byte load of 16-bit values, two of f32), and a stored row is k, the
//!   tile's rows or its columns depending on the layout, so `bk`, `wg_y × tm` and `wg_x × tn`
//!   are multiples of 8; each thread owns groups of 4 rows and 4 columns (vec4 accumulators),
//!   so `tm` and `tn` are multiples of 4; the workgroup is `wg_x × wg_y` threads.
//! - Tensor-core tiles ([`CoopTile`], `shaders/include/coop_gemm.wgsl`, the matmul's and the
//!   convolutions'): k slices of `bk` are whole fragments and whole chunks of 8 halves; the
//!   workgroup is one row of `sg_m × sg_n` subgroups.
//! - Split-K ([`SplitK`]): the partial sums are `splits` copies of the output.
//!
//! Every kernel is written out per shape (named accumulators, straight-line staging), so the
//! register block, the fragments per subgroup and the chunks each thread stages are bounded
//! too: past them a pipeline takes minutes to build, or a driver gives up. Arithmetic is in
//! u64: no value of a file can overflow it.

use super::kernel_table::{CoopTile, KernelTable, SimtTile, SplitK};
use crate::error::{Error, Result};

/// The limits a kernel shape is checked against: the adapter's (or a target's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelLimits {
    pub workgroup_bytes: u32,
    pub invocations: u32,
    /// Threads along a workgroup's x and y (`maxComputeWorkgroupSizeX`/`Y`).
    pub size_x: u32,
    pub size_y: u32,
    /// The fixed subgroup size of the tensor-core kernels (0 where there are none: their tiles
    /// are then checked on [`MIN_COOP_SUBGROUP`], so a table that cannot run fails here and
    /// not on the next GPU).
    pub subgroup: u32,
}

impl KernelLimits {
    /// An adapter's limits, with tensor cores on subgroups of `subgroup` (0: none).
    pub fn of(limits: &wgpu::Limits, subgroup: u32) -> KernelLimits {
        KernelLimits {
            workgroup_bytes: limits.max_compute_workgroup_storage_size,
            invocations: limits.max_compute_invocations_per_workgroup,
            size_x: limits.max_compute_workgroup_size_x,
            size_y: limits.max_compute_workgroup_size_y,
            subgroup,
        }
    }
}

/// Elements of one staged chunk (`shaders/matmul.wgsl`, `include/coop_gemm.wgsl`).
pub const CHUNK: u64 = 8;
/// Outputs one SIMT thread may own (`tm × tn`: 16×16).
pub const MAX_SIMT_OUTPUTS: u64 = 256;
/// Fragments one subgroup may own (`fm × fn`).
pub const MAX_COOP_FRAGMENTS: u64 = 32;
/// Fragment steps per k slice (`bk / edge`).
pub const MAX_COOP_KSTEPS: u64 = 8;
/// Chunks one thread may stage per k slice, both operands together.
pub const MAX_CHUNKS_PER_THREAD: u64 = 64;
/// Splits of a reduction (the partial sums are this many copies of the output).
pub const MAX_SPLITS: u32 = 64;
/// The smallest subgroup of any adapter with cooperative matrices (Mesa's lavapipe: 8).
pub const MIN_COOP_SUBGROUP: u32 = 8;

/// One rule a shape breaks: the field (or product of fields), its value and why it cannot be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Broken {
    pub key: &'static str,
    pub value: u64,
    pub why: String,
}

impl std::fmt::Display for Broken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} = {}: {}", self.key, self.value, self.why)
    }
}

/// Collects the rules a shape breaks.
#[derive(Default)]
struct Rules(Vec<Broken>);

impl Rules {
    /// `key = value` must satisfy `holds`, else it breaks the rule `why`.
    fn require(&mut self, key: &'static str, value: u64, holds: bool, why: impl Into<String>) {
        if !holds {
            self.0.push(Broken {
                key,
                value,
                why: why.into(),
            });
        }
    }
}

/// The product, saturated: no value of a file overflows a rule.
fn product(values: &[u64]) -> u64 {
    values.iter().fold(1u64, |p, &v| p.saturating_mul(v))
}

fn multiple(v: u64, of: u64) -> bool {
    v > 0 && v.is_multiple_of(of)
}

/// Chunks of 8 one thread stages per k slice of both operands (`a` and `b` elements).
fn chunks_per_thread(a: u64, b: u64, threads: u64) -> u64 {
    (a / CHUNK).div_ceil(threads.max(1)) + (b / CHUNK).div_ceil(threads.max(1))
}

impl SimtTile {
    /// Every rule of `matmul_tiled` this shape breaks under `limits` (empty: it runs).
    pub fn broken_rules(&self, limits: &KernelLimits) -> Vec<Broken> {
        let mut r = Rules::default();
        let (wg_x, wg_y) = (self.wg_x as u64, self.wg_y as u64);
        let (tm, tn, bk) = (self.tm as u64, self.tn as u64, self.bk as u64);
        let threads = wg_x * wg_y;
        let (size_x, size_y) = (limits.size_x, limits.size_y);
        let lanes = |max| format!("threads along it must be 1 to {max} here");
        r.require(
            "wg_x",
            wg_x,
            (1..=size_x as u64).contains(&wg_x),
            lanes(size_x),
        );
        r.require(
            "wg_y",
            wg_y,
            (1..=size_y as u64).contains(&wg_y),
            lanes(size_y),
        );
        let most = limits.invocations;
        let why = format!("at most {most} threads per workgroup here");
        r.require("wg_x × wg_y", threads, threads <= most as u64, why);
        let groups = "a thread owns groups of 4 rows and 4 columns: a positive multiple of 4";
        r.require("tm", tm, multiple(tm, 4), groups);
        r.require("tn", tn, multiple(tn, 4), groups);
        let why = format!("at most {MAX_SIMT_OUTPUTS} outputs per thread (each a register)");
        r.require("tm × tn", tm * tn, tm * tn <= MAX_SIMT_OUTPUTS, why);
        let staged =
            format!("staged in chunks of {CHUNK} elements: a positive multiple of {CHUNK}");
        r.require("bk", bk, multiple(bk, CHUNK), staged.clone());
        r.require(
            "wg_y × tm",
            wg_y * tm,
            multiple(wg_y * tm, CHUNK),
            staged.clone(),
        );
        r.require("wg_x × tn", wg_x * tn, multiple(wg_x * tn, CHUNK), staged);
        let bytes = self.workgroup_bytes();
        let why = format!(
            "{bytes} B of workgroup memory (8 × bk × (wg_y × tm + wg_x × tn)), limit {} here",
            limits.workgroup_bytes
        );
        r.require("bk", bk, bytes <= limits.workgroup_bytes as u64, why);
        let chunks = chunks_per_thread(product(&[bk, wg_y, tm]), product(&[bk, wg_x, tn]), threads);
        let why = format!(
            "{chunks} chunks staged per thread and k slice, at most {MAX_CHUNKS_PER_THREAD}"
        );
        r.require("bk", bk, chunks <= MAX_CHUNKS_PER_THREAD, why);
        r.0
    }
}

impl CoopTile {
    /// Every rule of the tensor-core tile loop this shape breaks on fragments of `edge` under
    /// `limits` (empty: it runs).
    pub fn broken_rules(&self, edge: u32, limits: &KernelLimits) -> Vec<Broken> {
        let mut r = Rules::default();
        let e = edge as u64;
        let (sg_m, sg_n) = (self.sg_m as u64, self.sg_n as u64);
        let (fm, fn_, bk) = (self.fm as u64, self.fn_ as u64, self.bk as u64);
        for (key, v) in [("sg_m", sg_m), ("sg_n", sg_n), ("fm", fm), ("fn", fn_)] {
            r.require(key, v, v > 0, "at least 1");
        }
        let whole = format!(
            "whole {edge}x{edge} fragments staged in chunks of {CHUNK}: a positive multiple of \
             {}",
            e.max(CHUNK)
        );
        r.require("bk", bk, multiple(bk, e) && multiple(bk, CHUNK), whole);
        let why = format!("at most {MAX_COOP_KSTEPS} fragment steps of {edge} per k slice");
        r.require("bk", bk, bk / e <= MAX_COOP_KSTEPS, why);
        let why = format!("at most {MAX_COOP_FRAGMENTS} fragments per subgroup");
        r.require("fm × fn", fm * fn_, fm * fn_ <= MAX_COOP_FRAGMENTS, why);
        let subgroup = match limits.subgroup {
            0 => MIN_COOP_SUBGROUP,
            s => s,
        } as u64;
        let threads = product(&[sg_m, sg_n, subgroup]);
        let max = (limits.invocations as u64).min(limits.size_x as u64);
        let why = format!("{threads} threads on subgroups of {subgroup}, at most {max} here");
        r.require("sg_m × sg_n", sg_m * sg_n, threads <= max, why);
        let bytes = self.workgroup_bytes(edge);
        let why = format!(
            "{bytes} B of workgroup memory, limit {} here",
            limits.workgroup_bytes
        );
        r.require("bk", bk, bytes <= limits.workgroup_bytes as u64, why);
        let (a, b) = (product(&[bk, sg_m, fm, e]), product(&[bk, sg_n, fn_, e]));
        let chunks = chunks_per_thread(a, b, threads);
        let why = format!(
            "{chunks} chunks staged per thread and k slice, at most {MAX_CHUNKS_PER_THREAD}"
        );
        r.require("bk", bk, chunks <= MAX_CHUNKS_PER_THREAD, why);
        r.0
    }
}

impl SplitK {
    /// Every rule of split-K this breaks (empty: it runs).
    pub fn broken_rules(&self) -> Vec<Broken> {
        let mut r = Rules::default();
        let splits = self.max_splits as u64;
        let why =
            format!("the partial sums are that many copies of the output: at most {MAX_SPLITS}");
        r.require("max_splits", splits, self.max_splits <= MAX_SPLITS, why);
        r.0
    }
}

impl KernelTable {
    /// Every rule a shape of this table breaks under `limits`, with the table key of the shape
    /// (`simt_f32`, `coop_16.large`, `split_k`) and the shape as the file writes it. Both
    /// fragment shapes are checked wherever the table is loaded, used here or not.
    pub fn broken_rules(&self, limits: &KernelLimits) -> Vec<(String, String, Broken)> {
        let mut out = Vec::new();
        let mut add = |key: String, shape: String, rules: Vec<Broken>| {
            out.extend(rules.into_iter().map(|b| (key.clone(), shape.clone(), b)));
        };
        for (key, t) in [("simt_f32", &self.simt_f32), ("simt_16", &self.simt_16)] {
            add(key.to_string(), format!("{t:?}"), t.broken_rules(limits));
        }
        for (edge, tiles) in [(8, &self.coop_8), (16, &self.coop_16)] {
            for (what, t) in tiles.named() {
                add(
                    format!("coop_{edge}.{what}"),
                    format!("{t:?}"),
                    t.broken_rules(edge, limits),
                );
            }
        }
        add(
            "split_k".into(),
            format!("{:?}", self.split_k),
            self.split_k.broken_rules(),
        );
        out
    }

    /// Every shape checked against `limits`: one error line naming each key that cannot run
    /// and why (`simt_f32.bk: ...`).
    pub fn check(&self, limits: &KernelLimits) -> Result<()> {
        let broken = self.broken_rules(limits);
        if broken.is_empty() {
            return Ok(());
        }
        let mut parts: Vec<String> = Vec::new();
        let mut last_key = String::new();
        for (key, shape, b) in &broken {
            if *key != last_key {
                parts.push(format!("{key} {shape}: {b}"));
                last_key = key.clone();
            } else {
                parts.push(b.to_string());
            }
        }
        Err(Error::InvalidArgument(format!(
            "kernel table for {} cannot run here: {}",
            self.class.name(),
            parts.join("; ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::AdapterClass;

    fn limits(workgroup_bytes: u32, subgroup: u32) -> KernelLimits {
        KernelLimits {
            workgroup_bytes,
            invocations: 256,
            size_x: 256,
            size_y: 256,
            subgroup,
        }
    }

    /// Each class's defaults fit the workgroup memory its hardware (and WebGPU) gives, with
    /// tensor cores on any subgroup size or none.
    #[test]
    fn every_class_default_fits_its_class_limits() {
        for class in AdapterClass::ALL {
            let workgroup_bytes = match class {
                AdapterClass::Nvidia => 48 * 1024,
                AdapterClass::Amd | AdapterClass::Intel => 64 * 1024,
                AdapterClass::Apple | AdapterClass::Cpu => 32 * 1024,
                AdapterClass::Other => 16 * 1024,
            };
            for subgroup in [0, 8, 32, 64] {
                let limits = limits(workgroup_bytes, subgroup);
                KernelTable::defaults(class).check(&limits).unwrap();
            }
        }
    }

    /// Issue 43's tables: tile sides that are multiples of 4 but not of 8 (the f32 staging
    /// loads chunks of 8) are refused, naming the table key and the fields.
    #[test]
    fn tile_sides_not_whole_chunks_are_refused_with_the_key() {
        for (wg_x, wg_y) in [(3, 5), (2, 3)] {
            let mut table = KernelTable::defaults(AdapterClass::Nvidia);
            table.simt_f32 = SimtTile {
                wg_x,
                wg_y,
                tm: 4,
                tn: 4,
                bk: 8,
            };
            let e = table.check(&limits(48 * 1024, 0)).unwrap_err().to_string();
            assert!(e.contains("simt_f32 SimtTile"), "{e}");
            assert!(e.contains(&format!("wg_y × tm = {}", 4 * wg_y)), "{e}");
            assert_eq!(e.contains("wg_x × tn"), wg_x == 3, "{e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
    }

    /// Values that overflow u32 products are rules broken, not panics or wrapped checks.
    #[test]
    fn huge_values_are_refused_without_overflow() {
        let l = limits(48 * 1024, 32);
        let simt = SimtTile {
            wg_x: 65536,
            wg_y: 65536,
            tm: 4,
            tn: 4,
            bk: 67_108_864,
        };
        let keys: Vec<_> = simt.broken_rules(&l).into_iter().map(|b| b.key).collect();
        assert!(
            keys.contains(&"wg_x") && keys.contains(&"wg_x × wg_y"),
            "{keys:?}"
        );
        let coop = CoopTile {
            sg_m: 2,
            sg_n: 2,
            fm: 1_000_000_000,
            fn_: 4,
            bk: u32::MAX,
        };
        let keys: Vec<_> = coop
            .broken_rules(16, &l)
            .into_iter()
            .map(|b| b.key)
            .collect();
        assert!(
            keys.contains(&"fm × fn") && keys.contains(&"bk"),
            "{keys:?}"
        );
        let split = SplitK {
            max_tiles: u32::MAX,
            min_depth: 0,
            min_split: 0,
            max_splits: u32::MAX,
        };
        assert_eq!(split.broken_rules()[0].key, "max_splits");
    }

    /// Tensor-core tiles are checked where no tensor cores are used too (on the smallest
    /// subgroup), so a bad one fails on this adapter and not on the next GPU.
    #[test]
    fn coop_tiles_are_checked_without_tensor_cores() {
        let mut table = KernelTable::defaults(AdapterClass::Cpu);
        table.coop_16.large.bk = 12;
        let e = table.check(&limits(32 * 1024, 0)).unwrap_err().to_string();
        assert!(e.contains("coop_16.large") && e.contains("bk"), "{e}");
    }
}
