//! `webgpu-amp selftest`: does this GPU compute correctly? Every op family runs forward and
//! backward on the adapter at hand and is compared with a CPU reference computed in f64 from
//! the same (already rounded) inputs, in every storage the adapter runs: f32, packed f16 (two
//! halves per `u32`, on every adapter), native f16 (where it has `shader-f16`) and bf16.
//!
//! A check compares normwise: the largest difference over the largest reference value, within
//! a tolerance of a few roundings of the storage dtype (`tolerance`). That catches what goes
//! wrong on a driver (a miscompiled index, a lost barrier, a wrong conversion: errors of the
//! order of the values themselves) without flagging the last-bit differences between drivers.
//! The families: matmul, conv, pool, elementwise, reduce and unary (`dense.rs`); loss,
//! layernorm, embedding, the causal softmax and the fused attention (`sequence.rs`); the CPU
//! references are in `reference.rs`; BatchNorm and average pooling, with their references, in
//! `cnn.rs`. The optimizer, GradScaler and clipping kernels are checked
//! by training (`train`'s trajectories against PyTorch's), not here.

mod cnn;
mod dense;
mod reference;
mod sequence;

use crate::dtype::{DType, Storage};
use crate::error::Result;
use crate::gpu::{F16StorageChoice, GpuContext, GpuOptions, Kernel};
use crate::tensor::Tensor;

/// One comparison: an op family's forward or backward output in one storage.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Check {
    pub family: &'static str,
    /// What was compared (`forward`, `backward dx`, ...).
    pub what: String,
    pub storage: &'static str,
    /// Largest |GPU − reference| over the largest |reference| (inf for a non-finite output).
    pub error: f64,
    pub tolerance: f64,
    pub passed: bool,
}

/// What a selftest ran, on which adapter, and what it could not run there.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Report {
    pub adapter: String,
    pub backend: String,
    pub checks: Vec<Check>,
    /// Storages this adapter cannot run, with the reason (native f16 without `shader-f16`).
    pub not_run: Vec<String>,
}

impl Report {
    pub fn failures(&self) -> impl Iterator<Item = &Check> {
        self.checks.iter().filter(|c| !c.passed)
    }
    pub fn passed(&self) -> bool {
        !self.checks.is_empty() && self.failures().next().is_none()
    }
}

/// One storage to check on: a context that stores f16 that way, and the low dtype.
pub(crate) struct Case<'a> {
    pub name: &'static str,
    pub ctx: &'a GpuContext,
    pub dtype: DType,
}

/// One op family's checks on one storage.
pub(crate) type Family = fn(&mut Checker, &Case) -> Result<()>;

/// Collects the checks of one run (and breaks a family's reference on request, to show a
/// wrong result fails).
pub(crate) struct Checker {
    checks: Vec<Check>,
    broken: Option<String>,
}

impl Checker {
    /// Run `families` in order; a signal (where the caller installed the handler) stops
    /// between two of them.
    pub fn run(&mut self, case: &Case, families: &[Family]) -> Result<()> {
        for family in families {
            if let Some(signal) = crate::interrupt::received() {
                return Err(crate::Error::Interrupted(format!(
                    "selftest: interrupted by {} after {} checks",
                    signal.name(),
                    self.checks.len()
                )));
            }
            family(self, case)?;
        }
        Ok(())
    }

    /// Compare `got` (read from the GPU) with `want` (the f64 reference).
    pub fn compare(
        &mut self,
        family: &'static str,
        what: &str,
        case: &Case,
        got: &[f32],
        want: &[f64],
    ) {
        let mut want = want.to_vec();
        if self.broken.as_deref() == Some(family) && !want.is_empty() {
            // A deliberately wrong reference (`--break-reference FAMILY`): half the largest
            // value added to one element, far past every tolerance.
            let top = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            want[0] += 0.5 * top + 1e-3;
        }
        let tolerance = tolerance(case.dtype);
        let error = normwise_error(got, &want);
        self.checks.push(Check {
            family,
            what: what.to_string(),
            storage: case.name,
            error,
            tolerance,
            passed: error <= tolerance,
        });
    }
}

/// The largest difference over the largest reference value; inf where a value is not finite
/// or the lengths differ.
pub fn normwise_error(got: &[f32], want: &[f64]) -> f64 {
    if got.len() != want.len() {
        return f64::INFINITY;
    }
    let top = want.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-30);
    got.iter().zip(want).fold(0.0f64, |m, (&g, &w)| {
        let d = (g as f64 - w).abs();
        if d.is_nan() {
            f64::INFINITY
        } else {
            m.max(d / top)
        }
    })
}

/// The normwise tolerance of a storage dtype: some four roundings of its unit roundoff (the
/// outputs are stored in it, and some ops round intermediates to it as autocast does), and for
/// f32 the sums of a few hundred terms. Measured on lavapipe: at most a quarter of it (f16
/// 4.4e-4, bf16 3.6e-3, f32 4e-7).
pub fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 2e-3,
        DType::BF16 => 1.5e-2,
        _ => 2e-5,
    }
}

/// Inputs in [-amp, amp) already rounded to `dtype` (a fixed pseudo-random sequence).
pub(crate) fn values(n: usize, seed: u64, amp: f32, dtype: DType) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(1);
    (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let unit = (state >> 40) as f32 / (1u64 << 24) as f32;
            dtype.round((2.0 * unit - 1.0) * amp)
        })
        .collect()
}

/// Upload f32 values as a tensor of `dtype` (the context's storage for it).
pub(crate) fn upload(
    ctx: &GpuContext,
    data: &[f32],
    shape: &[usize],
    dtype: DType,
) -> Result<Tensor> {
    Tensor::from_f32(ctx, data, shape, dtype)
}

/// Run `kernels` in order (one submission) and check the device reported no error.
pub(crate) fn run(ctx: &GpuContext, kernels: &[Kernel]) -> Result<()> {
    ctx.run(&kernels.iter().collect::<Vec<_>>());
    ctx.check()
}

/// Run every family on every storage of the adapter `options` choose. `break_family` makes
/// that family's reference wrong (to see a failure); None for a real check.
pub fn selftest(options: &GpuOptions, break_family: Option<&str>) -> Result<Report> {
    let auto = GpuContext::new(&GpuOptions {
        f16_storage: F16StorageChoice::Auto,
        ..options.clone()
    })?;
    let packed = GpuContext::new(&GpuOptions {
        f16_storage: F16StorageChoice::Packed,
        ..options.clone()
    })?;
    let mut cases = vec![Case {
        name: "f32",
        ctx: &auto,
        dtype: DType::F32,
    }];
    let mut not_run = Vec::new();
    if auto.storage_for(DType::F16) == Storage::F16 {
        cases.push(Case {
            name: "f16 native",
            ctx: &auto,
            dtype: DType::F16,
        });
    } else {
        not_run.push(format!(
            "f16 native: adapter `{}` has no shader-f16 (f16 is stored packed here)",
            auto.report.name
        ));
    }
    cases.push(Case {
        name: "f16 packed",
        ctx: &packed,
        dtype: DType::F16,
    });
    cases.push(Case {
        name: "bf16",
        ctx: &auto,
        dtype: DType::BF16,
    });
    let mut checker = Checker {
        checks: Vec::new(),
        broken: break_family.map(str::to_string),
    };
    for case in &cases {
        dense::check_all(&mut checker, case)?;
        sequence::check_all(&mut checker, case)?;
        cnn::check_all(&mut checker, case)?;
    }
    Ok(Report {
        adapter: auto.report.name.clone(),
        backend: auto.report.backend.clone(),
        checks: checker.checks,
        not_run,
    })
}

/// The storages a selftest runs, in the order it reports them.
pub const STORAGES: &[&str] = &["f32", "f16 native", "f16 packed", "bf16"];

/// The families a selftest checks (what `--break-reference` accepts).
pub const FAMILIES: &[&str] = &[
    "matmul",
    "conv",
    "pool",
    "elementwise",
    "reduce",
    "unary",
    "loss",
    "layernorm",
    "embedding",
    "softmax",
    "attention",
    "batchnorm",
    "avgpool",
];
