//! The whole selftest: every family on every storage the adapter runs (apart from `mod.rs`,
//! which holds what the families share, so that no part reaches itself through it).

use super::{Case, Checker, Report, cnn, dense, sequence};
use crate::dtype::{DType, Storage};
use crate::error::Result;
use crate::gpu::{F16StorageChoice, GpuContext, GpuOptions};

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
