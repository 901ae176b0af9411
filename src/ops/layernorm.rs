//! LayerNorm (`shaders/layernorm.wgsl`): `torch.nn.LayerNorm(C, bias=...)` over the last dim
//! of a 2-D view `x [rows, C]` (the caller reshapes `[B, T, C]` to `[B·T, C]`), forward and
//! backward.
//!
//! Numerics follow PyTorch: biased variance, `rstd = 1 / sqrt(var + eps)`, statistics computed
//! in f32 in two passes (the mean, then the centred sum of squares). LayerNorm is on autocast's
//! fp32 list, so under AMP its input arrives as f32 and its output is f32, but every kernel is
//! storage-generic: `x`, `y`, `dy`, `dx`, `weight` and `bias` may each have any storage; the
//! statistics `mean`/`rstd` and the parameter gradients are f32.
//!
//! Algorithms (rows R, columns C):
//! - forward: one workgroup of 64 threads per row; two fixed-order tree reductions (sum, then
//!   centred sum of squares), then `y = (x − mean)·rstd·weight + bias`. O(R·C) work.
//! - input gradient: one workgroup per row; one tree reduction of `(Σ g, Σ g·x̂)` with
//!   `g = dy·weight`, then `dx = rstd·(g − mean(g) − x̂·mean(g·x̂))`. O(R·C).
//! - weight and bias gradients, deterministic without float atomics: the rows are cut into
//!   `chunks` fixed chunks of `chunk_rows` rows (a function of R only); thread (chunk, c) sums
//!   `dy·x̂` and `dy` over its chunk's rows in row order into a scratch buffer, then thread c
//!   adds the chunk sums in chunk order to `dweight[c]` / `dbias[c]`. `chunk_rows =
//!   max(32, ⌈R/256⌉)`, so at most 256 chunks: O(R·C) work, span O(R/256 + 256); scratch
//!   `chunks·C` f32 (twice that with a bias), allocated when the backward is planned.

use super::check_f32;
use crate::error::{Error, Result};
use crate::gpu::{Arg, KernelDesc, grid_1d};
use crate::gpu::{GpuContext, Kernel};
use crate::shader::{ShaderDecl, each_like_or_f32};
use crate::tensor::Tensor;

pub static SHADER: ShaderDecl = ShaderDecl {
    name: "layernorm",
    source: include_str!("../../shaders/layernorm.wgsl"),
    structs: &[Params::WGSL],
    // Every storage combination these kernels may run with: activations (`x`, `y`, `dy`, `dx`)
    // in any storage, with parameters (`weight`, `bias`) in the same storage or f32; statistics
    // and parameter gradients f32.
    variants: |shader| each_like_or_f32(shader, &["x", "y", "dy", "dx"], &["weight", "bias"]),
};
const ROW_WG: u32 = 64;
const WG: u32 = 256;
/// Fewest rows per chunk of the parameter-gradient first pass.
const MIN_CHUNK_ROWS: usize = 32;
/// Most chunks (the second pass sums this many partials per column).
const MAX_CHUNKS: usize = 256;

/// `[rows, C]` of a 2-D tensor, with C > 0 and rows·C < 2^32.
fn rows_cols(op: &'static str, x: &Tensor) -> Result<(usize, usize)> {
    let &[rows, cols] = x.shape() else {
        return Err(Error::shape(
            op,
            format!(
                "x must be a 2-D view [rows, C], not {:?} (reshape [B, T, C] to [B·T, C])",
                x.shape()
            ),
        ));
    };
    if cols == 0 {
        return Err(Error::shape(op, "x has no columns (C = 0)"));
    }
    if u32::try_from(rows * cols).is_err() {
        return Err(Error::shape(op, format!("{rows}×{cols} is over 2^32")));
    }
    Ok((rows, cols))
}

fn check_len(op: &'static str, what: &str, t: &Tensor, n: usize) -> Result<()> {
    if t.numel() != n {
        return Err(Error::shape(
            op,
            format!("{what} {:?} must hold {n} elements", t.shape()),
        ));
    }
    Ok(())
}

fn check_same(op: &'static str, what: &str, t: &Tensor, x: &Tensor) -> Result<()> {
    if t.shape() != x.shape() {
        return Err(Error::shape(
            op,
            format!("{what} {:?} differs from x {:?}", t.shape(), x.shape()),
        ));
    }
    Ok(())
}

/// Rows per chunk and number of chunks of the parameter-gradient reduction (depends on the
/// number of rows only, so the summation order, hence the bits, are fixed for a shape).
fn chunking(rows: usize) -> (usize, usize) {
    let chunk_rows = rows.div_ceil(MAX_CHUNKS).max(MIN_CHUNK_ROWS);
    (chunk_rows, rows.div_ceil(chunk_rows))
}

fn row_grid(rows: usize) -> [u32; 3] {
    if rows == 0 {
        [0, 0, 0]
    } else {
        grid_1d(rows * ROW_WG as usize, ROW_WG)
    }
}

crate::wgsl_struct! {
    struct Params {
        rows: u32,
        cols: u32,
        eps: f32,
        has_bias: u32,
        /// rows per chunk of the parameter-gradient first pass
        chunk_rows: u32,
        /// ceil(rows / chunk_rows)
        chunks: u32,
        /// 1: the input gradient is added onto what `dx` holds (f32 `dx` only)
        accumulate: u32,
        _pad1: u32,
    }
}

/// `y[r, :] = (x[r, :] − mean_r) · rstd_r · weight + bias` over the rows `r` of `x [rows, C]`;
/// also writes `mean [rows]` and `rstd [rows]` (f32) for the backward. `weight`, `bias`: `[C]`
/// (any storage); `y`: the shape of `x` (any storage). One kernel.
#[allow(clippy::too_many_arguments)]
pub fn layernorm_forward(
    ctx: &GpuContext,
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    y: &Tensor,
    mean: &Tensor,
    rstd: &Tensor,
    eps: f32,
) -> Result<Kernel> {
    let op = "layernorm_forward";
    let (rows, cols) = rows_cols(op, x)?;
    check_len(op, "weight", weight, cols)?;
    if let Some(b) = bias {
        check_len(op, "bias", b, cols)?;
    }
    check_same(op, "y", y, x)?;
    check_len(op, "mean", mean, rows)?;
    check_len(op, "rstd", rstd, rows)?;
    check_f32(op, "mean", mean)?;
    check_f32(op, "rstd", rstd)?;
    if !(eps >= 0.0 && eps.is_finite()) {
        return Err(Error::InvalidArgument(format!(
            "{op}: eps must be finite and >= 0, not {eps}"
        )));
    }
    let params = Params {
        rows: rows as u32,
        cols: cols as u32,
        eps,
        has_bias: bias.is_some() as u32,
        ..Default::default()
    };
    ctx.kernel(
        &KernelDesc::new(&SHADER, "layernorm_forward"),
        &[
            ("params", Arg::Uniform(bytemuck::bytes_of(&params))),
            ("x", x.arg()),
            ("weight", weight.arg()),
            // Without a bias the shader never reads this binding; `weight` fills it.
            ("bias", bias.unwrap_or(weight).arg()),
            ("y", y.arg()),
            ("mean_out", mean.arg()),
            ("rstd_out", rstd.arg()),
        ],
        row_grid(rows),
    )
}

/// Backward of [`layernorm_forward`]: `dx` (the shape of `x`, any storage) is overwritten with
/// the input gradient; `dweight += Σ_r dy·x̂` and `dbias += Σ_r dy` (f32 `[C]`, accumulated,
/// e.g. into views of the flat gradient buffer), with `x̂ = (x − mean)·rstd` from the forward's
/// statistics. The parameter gradients are deterministic (fixed-order chunked sums, no float
/// atomics). Returns three kernels (input gradient, per-chunk partial sums, final sums), or one
/// when `x` has no rows.
#[allow(clippy::too_many_arguments)]
pub fn layernorm_backward(
    ctx: &GpuContext,
    dy: &Tensor,
    x: &Tensor,
    weight: &Tensor,
    mean: &Tensor,
    rstd: &Tensor,
    dx: &Tensor,
    dweight: &Tensor,
    dbias: Option<&Tensor>,
) -> Result<Vec<Kernel>> {
    layernorm_backward_into(ctx, dy, x, weight, mean, rstd, (dx, false), dweight, dbias)
}

/// [`layernorm_backward`], with `dx.1` set: the input gradient is added onto what `dx.0`
/// already holds (f32 only: the sum rounds once, as a separate accumulate does), which
/// saves a residual's accumulate kernel.
#[allow(clippy::too_many_arguments)]
pub fn layernorm_backward_into(
    ctx: &GpuContext,
    dy: &Tensor,
    x: &Tensor,
    weight: &Tensor,
    mean: &Tensor,
    rstd: &Tensor,
    (dx, accumulate): (&Tensor, bool),
    dweight: &Tensor,
    dbias: Option<&Tensor>,
) -> Result<Vec<Kernel>> {
    let op = "layernorm_backward";
    if accumulate {
        check_f32(op, "an accumulated dx", dx)?;
    }
    let (rows, cols) = rows_cols(op, x)?;
    check_same(op, "dy", dy, x)?;
    check_same(op, "dx", dx, x)?;
    check_len(op, "weight", weight, cols)?;
    check_len(op, "mean", mean, rows)?;
    check_len(op, "rstd", rstd, rows)?;
    check_f32(op, "mean", mean)?;
    check_f32(op, "rstd", rstd)?;
    check_len(op, "dweight", dweight, cols)?;
    check_f32(op, "dweight", dweight)?;
    if let Some(db) = dbias {
        check_len(op, "dbias", db, cols)?;
        check_f32(op, "dbias", db)?;
    }
    let (chunk_rows, chunks) = chunking(rows);
    let has_bias = dbias.is_some();
    let params = Params {
        rows: rows as u32,
        cols: cols as u32,
        has_bias: has_bias as u32,
        chunk_rows: chunk_rows as u32,
        chunks: chunks as u32,
        accumulate: accumulate as u32,
        ..Default::default()
    };
    let uniform = bytemuck::bytes_of(&params);
    let dx_kernel = ctx.kernel(
        &KernelDesc::new(&SHADER, "layernorm_backward_dx"),
        &[
            ("params", Arg::Uniform(uniform)),
            ("dy", dy.arg()),
            ("x", x.arg()),
            ("weight", weight.arg()),
            ("mean", mean.arg()),
            ("rstd", rstd.arg()),
            ("dx", dx.arg()),
        ],
        row_grid(rows),
    )?;
    if rows == 0 {
        // Nothing to add: leave the parameter gradients untouched.
        return Ok(vec![dx_kernel]);
    }
    let floats = chunks * cols * (1 + has_bias as usize);
    let partials = ctx.alloc_storage("layernorm gradient partials", 4 * floats as u64);
    let partial_kernel = ctx.kernel(
        &KernelDesc::new(&SHADER, "layernorm_param_partials"),
        &[
            ("params", Arg::Uniform(uniform)),
            ("dy", dy.arg()),
            ("x", x.arg()),
            ("mean", mean.arg()),
            ("rstd", rstd.arg()),
            ("partials", Arg::Buffer(&partials)),
        ],
        grid_1d(chunks * cols, WG),
    )?;
    // Without a bias the shader never touches `dbias`, but WebGPU refuses two writable
    // bindings of one buffer range in a dispatch (Chromium's validation does; wgpu's native
    // one does not), so `dweight` cannot fill it: a one-word buffer of its own does.
    let unused;
    let dbias = match dbias {
        Some(db) => db,
        None => {
            unused = Tensor::zeros(ctx, &[1], dweight.dtype());
            &unused
        }
    };
    let final_kernel = ctx.kernel(
        &KernelDesc::new(&SHADER, "layernorm_param_final"),
        &[
            ("params", Arg::Uniform(uniform)),
            ("partials", Arg::Buffer(&partials)),
            ("dweight", dweight.arg()),
            ("dbias", dbias.arg()),
        ],
        grid_1d(cols, WG),
    )?;
    Ok(vec![dx_kernel, partial_kernel, final_kernel])
}
