//! The numeric check of a loaded kernel table. A table read from a file (`--tuning`,
//! `WEBGPU_AMP_TUNING`, or one committed under `tuning/`) has passed the kernels' rules
//! (`gpu::kernel_rules`) when it was loaded; before the first product that uses it, each of its
//! tiles this adapter runs also computes a few tiny products against a CPU reference: the SIMT
//! tiles (f32 and bf16 inputs), and where tensor cores are used, each tensor-core tile of the
//! fragment shape in use, in the matmul and in the three convolutions. Both layouts of each
//! operand, the aligned interior variant and the checked edge one, and split-K, all run. A
//! tile that fails (or does not build) refuses the table with one line naming it and the key.
//!
//! The matmul's and the convolutions' public entry points call [`ensure_checked`] before they
//! shape a product from a family of the table (so a CPU adapter, whose training takes nothing from it, runs the
//! SIMT check only for `bench matmul --kernel tiled`); `info` and `plan`, which run nothing,
//! check what training would take. Each family is checked once per adapter and table in a
//! process, on a context of its own ([`GpuContext::table_check_twin`], whose memory is not
//! the run's), through the entry points below the check (`matmul_unchecked`, `conv::run`):
//! the check sits above what it gates, and its products do not check again. The class defaults are not checked here: the
//! test suite runs them.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::dtype::{DType, Storage};
use crate::error::{Error, Result};
use crate::gpu::{CoopTile, CoopTiles, GpuContext};
use crate::ops::Accumulate;
use crate::ops::conv::Conv2dParams;
use crate::ops::conv::run::{backward_input, backward_weight, forward};
use crate::ops::matmul::{MatmulKernel, MatmulOpts, matmul_unchecked};
use crate::tensor::Tensor;

/// A family of the table's tiles, checked the first time a product takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TableUse {
    /// `simt_f32`: the tiled SIMT matmul of f32 inputs.
    SimtF32,
    /// `simt_16`: the tiled SIMT matmul of 16-bit inputs.
    Simt16,
    /// `coop_8` or `coop_16` (the fragment shape in use): the tensor-core matmul and
    /// convolutions.
    Coop,
}

impl TableUse {
    /// What training takes from the table on this adapter: the SIMT tiles on GPUs (CPU
    /// adapters run the direct body, whose shape is fixed), the tensor-core tiles where they
    /// are used.
    pub fn training(ctx: &GpuContext) -> Vec<TableUse> {
        let mut uses = Vec::new();
        if !ctx.caps.cpu_adapter {
            uses.extend([TableUse::SimtF32, TableUse::Simt16]);
        }
        if ctx.caps.tensor_cores.config().is_some() {
            uses.push(TableUse::Coop);
        }
        uses
    }
}

/// Check the tiles of `ctx`'s table that `used` names, once per adapter, table and family in
/// this process, if the table was read from a file; Ok at once for the defaults, a given
/// table, a dry context and in the browser (whose only loaded tables are the committed ones,
/// which the test suite checks).
pub fn ensure_checked(ctx: &GpuContext, used: &[TableUse]) -> Result<()> {
    let kernels = &ctx.caps.kernels;
    if !kernels.origin.is_loaded() || ctx.is_dry() || cfg!(target_arch = "wasm32") {
        return Ok(());
    }
    type Outcomes = HashMap<(String, TableUse), std::result::Result<(), String>>;
    static CHECKED: Mutex<Option<Outcomes>> = Mutex::new(None);
    let key = format!(
        "{}|{}|{:?}|{:?}|{:?}",
        ctx.report.name,
        ctx.report.backend,
        ctx.caps.tensor_cores.config(),
        ctx.f16_storage,
        kernels.table
    );
    // Held while checking: one check per family, whichever thread asks first.
    let mut checked = CHECKED.lock().unwrap_or_else(|e| e.into_inner());
    let checked = checked.get_or_insert_with(HashMap::new);
    for &family in used {
        let outcome = checked
            .entry((key.clone(), family))
            .or_insert_with(|| check_family(ctx, family).map_err(|e| e.to_string()));
        outcome.clone().map_err(Error::InvalidArgument)?;
    }
    Ok(())
}

/// Run every tile of `ctx`'s table this adapter can run against the CPU reference (whatever
/// the table's origin: `bench tune` checks the table it writes): the first that fails is an
/// error naming the table and the key.
pub fn check_tiles(ctx: &GpuContext) -> Result<()> {
    for family in [TableUse::SimtF32, TableUse::Simt16, TableUse::Coop] {
        check_family(ctx, family)?;
    }
    Ok(())
}

/// The products of one family's tiles on a twin of `ctx`.
fn check_family(ctx: &GpuContext, family: TableUse) -> Result<()> {
    let twin = ctx.table_check_twin();
    let table = &twin.caps.kernels.table;
    let origin = ctx.caps.kernels.origin.name();
    let refuse = |key: &str, shape: String, why: String| {
        Error::InvalidArgument(format!(
            "{origin}: {key} {shape} computes wrong results on `{}`: {why}; leave the table out \
             (the built-in one runs) or run `webgpu-amp bench tune` again",
            ctx.report.name
        ))
    };
    let simt = match family {
        TableUse::SimtF32 => Some(("simt_f32", table.simt_f32, DType::F32)),
        TableUse::Simt16 => Some(("simt_16", table.simt_16, DType::BF16)),
        TableUse::Coop => None,
    };
    if let Some((key, tile, dtype)) = simt {
        let tiles = (tile.bm(), tile.bn(), tile.bk);
        return products(&twin, MatmulKernel::Tiled, dtype, tiles)
            .map_err(|why| refuse(key, format!("{tile:?}"), why));
    }
    let Some(config) = twin.caps.tensor_cores.config() else {
        return Ok(());
    };
    if twin.storage_for(DType::F16) != Storage::F16 {
        return Ok(());
    }
    let edge = config.edge;
    let mut seen: Vec<CoopTile> = Vec::new();
    for (size, tile) in table.coop(edge).named() {
        if seen.contains(&tile) {
            continue;
        }
        seen.push(tile);
        let key = format!("coop_{edge}.{size}");
        let refuse = |why| refuse(&key, format!("{tile:?}"), why);
        // Every product takes this tile: all three sizes are it.
        let mut only = table.clone();
        let tiles = if edge == 16 {
            &mut only.coop_16
        } else {
            &mut only.coop_8
        };
        *tiles = CoopTiles {
            small: tile,
            wide: tile,
            large: tile,
            large_from: u32::MAX,
            conv_large: None,
        };
        let twin = twin
            .with_kernel_table(only, "kernel table check")
            .map_err(|e| refuse(e.to_string()))?;
        let sides = (tile.bm(edge), tile.bn(edge), tile.bk);
        products(&twin, MatmulKernel::Coop, DType::F16, sides).map_err(&refuse)?;
        convolutions(&twin).map_err(&refuse)?;
    }
    Ok(())
}

/// Normwise tolerance of a product of inputs already rounded to `dtype`, accumulated in f32
/// (a few hundred terms at most): errors of a wrong tile are of the order of the values.
const TOLERANCE: f64 = 1e-4;

/// The products of one tile of `bm` × `bn`, depth slices of `bk`, on `body`: both layouts of
/// each operand in the aligned variant (whole tiles, two of each side) and in the checked one
/// (ragged edges), and split-K over the checked one.
fn products(
    ctx: &GpuContext,
    body: MatmulKernel,
    dtype: DType,
    (bm, bn, bk): (u32, u32, u32),
) -> std::result::Result<(), String> {
    let (bm, bn, bk) = (bm as usize, bn as usize, bk as usize);
    let aligned = (2 * bm, 2 * bn, 2 * bk);
    let ragged = (bm + 3, bn + 5, 2 * bk + 3);
    let cases = [
        (aligned, (false, false), None),
        (aligned, (true, true), None),
        (ragged, (false, true), None),
        (ragged, (true, false), None),
        ((bm + 3, bn + 5, 4 * bk + 3), (false, false), Some(2)),
    ];
    for (i, ((m, n, k), trans, split_k)) in cases.into_iter().enumerate() {
        let what = format!(
            "{} {m}x{n}x{k}{}{}{}",
            dtype.name(),
            if trans.0 { " aᵀ" } else { "" },
            if trans.1 { " bᵀ" } else { "" },
            if split_k.is_some() { " split-K" } else { "" }
        );
        let a = values(m * k, 2 * i as u64 + 1, dtype);
        let b = values(k * n, 2 * i as u64 + 2, dtype);
        let shape = |trans: bool, rows: usize, cols: usize| match trans {
            true => [cols, rows],
            false => [rows, cols],
        };
        let run = || -> Result<Vec<f32>> {
            let at = Tensor::from_f32(ctx, &a, &shape(trans.0, m, k), dtype)?;
            let bt = Tensor::from_f32(ctx, &b, &shape(trans.1, k, n), dtype)?;
            let c = Tensor::zeros(ctx, &[m, n], DType::F32);
            let opts = MatmulOpts {
                trans_a: trans.0,
                trans_b: trans.1,
                split_k,
                ..Default::default()
            };
            let kernel = matmul_unchecked(ctx, &at, &bt, &c, opts, body)?;
            ctx.run(&[&kernel]);
            ctx.check()?;
            read(ctx, &c)
        };
        let got = run().map_err(|e| format!("{what} does not run ({})", first_line(&e)))?;
        let want = reference(&a, &b, (m, n, k), trans);
        judge(&what, &got, &want)?;
    }
    Ok(())
}

/// The three convolutions of a tiny 3×3 layer on the tensor-core body, against the same
/// convolutions of the same values on the SIMT body (f32 inputs: it takes no table).
fn convolutions(ctx: &GpuContext) -> std::result::Result<(), String> {
    let (n, c, hw, o) = (2, 5, 9, 12);
    let p = Conv2dParams {
        stride: 1,
        padding: 1,
    };
    let x = values(n * c * hw * hw, 11, DType::F16);
    let w = values(o * c * 9, 12, DType::F16);
    let dy = values(n * o * hw * hw, 13, DType::F16);
    let run = |dtype: DType| -> Result<[Vec<f32>; 3]> {
        let xt = Tensor::from_f32(ctx, &x, &[n, c, hw, hw], dtype)?;
        let wt = Tensor::from_f32(ctx, &w, &[o, c, 3, 3], dtype)?;
        let dyt = Tensor::from_f32(ctx, &dy, &[n, o, hw, hw], dtype)?;
        let y = Tensor::zeros(ctx, &[n, o, hw, hw], dtype);
        let dx = Tensor::zeros(ctx, &[n, c, hw, hw], dtype);
        let dw = Tensor::zeros(ctx, &[o, c, 3, 3], DType::F32);
        let mut kernels = vec![
            forward(ctx, &xt, &wt, None, &y, p)?,
            backward_input(ctx, &dyt, &wt, &dx, p)?,
        ];
        kernels.extend(backward_weight(
            ctx,
            &xt,
            &dyt,
            &dw,
            p,
            Accumulate::Overwrite,
            None,
        )?);
        ctx.run(&kernels.iter().collect::<Vec<_>>());
        ctx.check()?;
        Ok([read(ctx, &y)?, read(ctx, &dx)?, read(ctx, &dw)?])
    };
    let got = run(DType::F16).map_err(|e| format!("conv does not run ({})", first_line(&e)))?;
    let want = run(DType::F32).map_err(|e| format!("conv reference: {}", first_line(&e)))?;
    for ((what, got), want) in ["forward", "input gradient", "weight gradient"]
        .iter()
        .zip(&got)
        .zip(&want)
    {
        let want: Vec<f64> = want.iter().map(|&v| v as f64).collect();
        // The f16 outputs are rounded once: a few units of f16's roundoff.
        let error = normwise_error(got, &want);
        if error > 4e-3 {
            return Err(format!("conv {what}: error {error:.1e} (tolerance 4e-3)"));
        }
    }
    Ok(())
}

fn judge(what: &str, got: &[f32], want: &[f64]) -> std::result::Result<(), String> {
    let error = normwise_error(got, want);
    if error > TOLERANCE {
        return Err(format!(
            "matmul {what}: error {error:.1e} (tolerance {TOLERANCE:.0e})"
        ));
    }
    Ok(())
}

#[cfg(not(target_arch = "wasm32"))]
fn read(ctx: &GpuContext, t: &Tensor) -> Result<Vec<f32>> {
    t.read_f32(ctx)
}

#[cfg(target_arch = "wasm32")]
fn read(_: &GpuContext, _: &Tensor) -> Result<Vec<f32>> {
    Err(Error::Unsupported("no blocking read in the browser".into()))
}

fn first_line(e: &Error) -> String {
    e.to_string().lines().next().unwrap_or_default().to_string()
}

/// op(a) · op(b) in f64 (a stored [m, k] or [k, m] for aᵀ; b [k, n] or [n, k] for bᵀ).
fn reference(a: &[f32], b: &[f32], (m, n, k): (usize, usize, usize), t: (bool, bool)) -> Vec<f64> {
    let at = |i: usize, l: usize| a[if t.0 { l * m + i } else { i * k + l }] as f64;
    let bt = |l: usize, j: usize| b[if t.1 { j * k + l } else { l * n + j }] as f64;
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k).map(|l| at(i, l) * bt(l, j)).sum();
        }
    }
    c
}

/// The largest difference over the largest reference value (inf for a non-finite result).
fn normwise_error(got: &[f32], want: &[f64]) -> f64 {
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

/// Values in [-1, 1) rounded to `dtype` (a fixed pseudo-random sequence per seed).
fn values(n: usize, seed: u64, dtype: DType) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(1);
    (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            dtype.round((state >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
        })
        .collect()
}
