//! The backward of LayerNorm and RMSNorm: the input gradient and the per-chunk parameter
//! sums in one kernel, then the chunk sums added in order (the module's header has the
//! algorithm).

use super::{
    Norm, Params, ROW_WG, WG, check_len, check_same, check_stats, chunking, desc, rows_cols,
};
use crate::error::Result;
use crate::gpu::{Arg, GpuContext, Kernel, grid_1d};
use crate::ops::check_f32;
use crate::tensor::Tensor;

/// Backward of [`layernorm_forward`]: `dx` (the shape of `x`, any storage) is overwritten with
/// the input gradient; `dweight += Σ_r dy·x̂` and `dbias += Σ_r dy` (f32 `[C]`, accumulated,
/// e.g. into views of the flat gradient buffer), with `x̂ = (x − mean)·rstd` from the forward's
/// statistics. The parameter gradients are deterministic (fixed-order chunked sums, no float
/// atomics). Returns two kernels (the input gradient with the per-chunk partial sums, then
/// the final sums), or none when `x` has no rows.
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
    let dx = InputGrad {
        dx,
        accumulate: false,
        low_copy: None,
    };
    layernorm_backward_into(ctx, dy, x, weight, (mean, rstd), dx, dweight, dbias)
}

/// Where [`layernorm_backward_into`] puts the input gradient.
pub struct InputGrad<'t> {
    pub dx: &'t Tensor,
    /// Added onto what `dx` holds (f32 only: the sum rounds once, as a separate accumulate
    /// does), which saves a residual's accumulate kernel.
    pub accumulate: bool,
    /// Also written here, in its storage (with the rounding of [`super::elementwise::cast`]):
    /// a residual branch's gradient in the branch's low dtype, which saves its cast kernel.
    pub low_copy: Option<&'t Tensor>,
}

/// [`layernorm_backward`], with the input gradient placed as `dx` says.
#[allow(clippy::too_many_arguments)]
pub fn layernorm_backward_into(
    ctx: &GpuContext,
    dy: &Tensor,
    x: &Tensor,
    weight: &Tensor,
    (mean, rstd): (&Tensor, &Tensor),
    dx: InputGrad<'_>,
    dweight: &Tensor,
    dbias: Option<&Tensor>,
) -> Result<Vec<Kernel>> {
    let stats = (Some(mean), rstd);
    backward(
        ctx,
        Norm::Layer,
        (dy, x, weight),
        stats,
        dx,
        (dweight, dbias),
    )
}

/// Backward of [`rmsnorm_forward`]: the input gradient placed as `dx` says (overwritten,
/// or added onto an f32 `dx`, and its low copy); `dweight += Σ_r dy · x̂.to(x.dtype)` (f32
/// `[C]`), deterministic as LayerNorm's. Two kernels, or none when `x` has no rows.
pub fn rmsnorm_backward_into(
    ctx: &GpuContext,
    (dy, x, weight): (&Tensor, &Tensor, &Tensor),
    rstd: &Tensor,
    dx: InputGrad<'_>,
    dweight: &Tensor,
) -> Result<Vec<Kernel>> {
    backward(
        ctx,
        Norm::Rms,
        (dy, x, weight),
        (None, rstd),
        dx,
        (dweight, None),
    )
}

fn backward(
    ctx: &GpuContext,
    norm: Norm,
    (dy, x, weight): (&Tensor, &Tensor, &Tensor),
    (mean, rstd): (Option<&Tensor>, &Tensor),
    dx: InputGrad<'_>,
    (dweight, dbias): (&Tensor, Option<&Tensor>),
) -> Result<Vec<Kernel>> {
    let op = norm.op("backward");
    let InputGrad {
        dx,
        accumulate,
        low_copy,
    } = dx;
    if accumulate {
        check_f32(op, "an accumulated dx", dx)?;
    }
    let (rows, cols) = rows_cols(op, x)?;
    check_same(op, "dy", dy, x)?;
    check_same(op, "dx", dx, x)?;
    if let Some(low) = low_copy {
        check_len(op, "the low copy of dx", low, x.numel())?;
    }
    check_len(op, "weight", weight, cols)?;
    check_stats(op, (mean, rstd), rows)?;
    check_len(op, "dweight", dweight, cols)?;
    check_f32(op, "dweight", dweight)?;
    if let Some(db) = dbias {
        check_len(op, "dbias", db, cols)?;
        check_f32(op, "dbias", db)?;
    }
    if rows == 0 {
        // No input gradient to write, nothing to add to the parameter gradients.
        return Ok(Vec::new());
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
        x_round: norm.x_round(x),
        ..Default::default()
    };
    let uniform = bytemuck::bytes_of(&params);
    let floats = chunks * cols * (1 + has_bias as usize);
    let partials = ctx.alloc_storage("layernorm gradient partials", 4 * floats as u64);
    let mut args = vec![
        ("params", Arg::Uniform(uniform)),
        ("dy", dy.arg()),
        ("x", x.arg()),
        ("weight", weight.arg()),
        ("rstd", rstd.arg()),
        ("dx", dx.arg()),
        ("partials", Arg::Buffer(&partials)),
    ];
    args.extend(mean.map(|m| ("mean", m.arg())));
    if let Some(low) = low_copy {
        args.push(("dx_low", low.arg()));
    }
    let rows_kernel = ctx.kernel(
        &desc("layernorm_backward", norm, false, low_copy.is_some()),
        &args,
        grid_1d(chunks * ROW_WG as usize, ROW_WG),
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
    // The final sums are one kernel for both normalisations.
    let final_kernel = ctx.kernel(
        &desc("layernorm_param_final", Norm::Layer, false, false),
        &[
            ("params", Arg::Uniform(uniform)),
            ("partials", Arg::Buffer(&partials)),
            ("dweight", dweight.arg()),
            ("dbias", dbias.arg()),
        ],
        grid_1d(cols, WG),
    )?;
    Ok(vec![rows_kernel, final_kernel])
}
