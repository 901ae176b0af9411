//! The three convolutions planned: shape checks, the body (SIMT or tensor cores) and its
//! launch. The public entry points (`super::conv2d_forward` and the two gradients) check a
//! loaded kernel table first; these do not, which is what the check itself runs.

use super::coop::{self, Kind};
use super::gemm::{
    self, Epilogue, Gemm, PIXEL_GEMM, STORE, Split, TILE_C, TILE_R, WEIGHT_GEMM, reduce_params,
};
use super::shape::{Conv2dParams, Dims, check, dims4};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::gpu::{Arg, GpuContext, Kernel, grid_1d};
use crate::ops::Accumulate;
use crate::ops::matmul::CoopGemm;
use crate::tensor::Tensor;

/// y[N,O,Ho,Wo] = conv(x[N,C,H,W], w[O,C,kh,kw]) (+ bias[O]); NCHW, PyTorch semantics
/// (cross-correlation, zero padding).
pub(crate) fn forward(
    ctx: &GpuContext,
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    y: &Tensor,
    p: Conv2dParams,
) -> Result<Kernel> {
    let op = "conv2d_forward";
    let d = check(op, dims4(op, "input", x)?, w, dims4(op, "output", y)?, p)?;
    if let Some(b) = bias
        && b.shape() != [d.o]
    {
        return Err(Error::shape(
            op,
            format!("bias is {:?}, expected [{}]", b.shape(), d.o),
        ));
    }
    let (pixels, depth) = (d.n * d.ho * d.wo, d.c * d.kh * d.kw);
    let epilogue = Epilogue {
        bias: bias.is_some(),
        ..STORE
    };
    if let Some(config) = coop::config(ctx, &[x.storage(), w.storage()]) {
        let gemm = Gemm::unsplit(d.o, pixels, depth);
        let (dw, partials) = coop::untouched(ctx, y.storage());
        let args = coop::args([x, w, bias.unwrap_or(w), y], [x, x, &dw, &partials]);
        let tile = coop::gemm(ctx, config, Kind::Forward, d.o, pixels);
        let body = Body::Coop(tile, Kind::Forward);
        return launch(ctx, body, &d, p, gemm, epilogue, args);
    }
    let gemm = Gemm::unsplit(pixels, d.o, depth);
    let args = gemm::bind(PIXEL_GEMM, [x, w, bias.unwrap_or(w), y]);
    launch(ctx, Body::Simt("conv_forward"), &d, p, gemm, epilogue, args)
}

/// dx[N,C,H,W] = gradient of the convolution with respect to its input (overwrites dx).
pub(crate) fn backward_input(
    ctx: &GpuContext,
    dy: &Tensor,
    w: &Tensor,
    dx: &Tensor,
    p: Conv2dParams,
) -> Result<Kernel> {
    let op = "conv2d_backward_input";
    let d = check(op, dims4(op, "dx", dx)?, w, dims4(op, "dy", dy)?, p)?;
    let (pixels, depth) = (d.n * d.h * d.w, d.o * d.kh * d.kw);
    if let Some(config) = coop::config(ctx, &[dy.storage(), w.storage()]) {
        let gemm = Gemm::unsplit(d.c, pixels, depth);
        let (dw, partials) = coop::untouched(ctx, dx.storage());
        let args = coop::args([dy, w, w, dx], [dy, dy, &dw, &partials]);
        let tile = coop::gemm(ctx, config, Kind::InputGrad, d.c, pixels);
        let body = Body::Coop(tile, Kind::InputGrad);
        return launch(ctx, body, &d, p, gemm, STORE, args);
    }
    let gemm = Gemm::unsplit(pixels, d.c, depth);
    // The epilogue it shares with the forward names a bias; it is never read here.
    let args = gemm::bind(PIXEL_GEMM, [dy, w, w, dx]);
    let body = Body::Simt("conv_backward_input");
    launch(ctx, body, &d, p, gemm, STORE, args)
}

/// dw[O,C,kh,kw] = (or, with [`Accumulate::Add`], +=) gradient with respect to the weight,
/// rounded to `round_to` first when given (the dtype the forward ran in: PyTorch's f16
/// weight gradient, cast to f32). dw is usually f32 while x and dy are f16. One kernel, or two
/// when the reduction over the batch's pixels is split (split-K: partial sums in a scratch
/// buffer made here, then added in a fixed order).
pub(crate) fn backward_weight(
    ctx: &GpuContext,
    x: &Tensor,
    dy: &Tensor,
    dw: &Tensor,
    p: Conv2dParams,
    accumulate: Accumulate,
    round_to: Option<DType>,
) -> Result<Vec<Kernel>> {
    let op = "conv2d_backward_weight";
    let d = check(op, dims4(op, "input", x)?, dw, dims4(op, "dy", dy)?, p)?;
    let (taps, pixels) = (d.c * d.kh * d.kw, d.n * d.ho * d.wo);
    let epilogue = Epilogue {
        accumulate,
        round_to: crate::ops::round_code(round_to),
        ..STORE
    };
    let coop = coop::config(ctx, &[x.storage(), dy.storage()])
        .map(|config| coop::gemm(ctx, config, Kind::WeightGrad, d.o, taps));
    let split = match coop {
        Some(t) => Split::for_gpu(
            pixels,
            d.o.div_ceil(t.bm() as usize) * taps.div_ceil(t.bn() as usize),
        ),
        None => {
            let tiles = taps.div_ceil(TILE_R) * d.o.div_ceil(TILE_C);
            Split::plan(ctx.device_type(), pixels, tiles)
        }
    };
    // With several splits the kernel writes partial sums (added in order by a second kernel);
    // with one it writes dw.
    let partials =
        (split.splits > 1).then(|| Tensor::zeros(ctx, &[split.splits, d.o, taps], DType::F32));
    let partial_sums = match coop {
        Some(tile) => {
            let gemm = Gemm {
                rows: d.o,
                cols: taps,
                depth: pixels,
                split,
            };
            let (dst, unsplit) = coop::untouched(ctx, dw.storage());
            let partials = partials.as_ref().unwrap_or(&unsplit);
            let args = coop::args([x, x, x, &dst], [x, dy, dw, partials]);
            let body = Body::Coop(tile, Kind::WeightGrad);
            launch(ctx, body, &d, p, gemm, epilogue, args)?
        }
        None => {
            let gemm = Gemm {
                rows: taps,
                cols: d.o,
                depth: pixels,
                split,
            };
            // With one split the kernel never touches `partials`, but the binding must exist,
            // and not as dw: WebGPU forbids two writable bindings of one buffer range in a
            // dispatch (Dawn rejects the bind group; wgpu's own validation lets it pass), so
            // a placeholder of dw's storage (the same pipeline variant) fills it.
            let placeholder;
            let partials = match &partials {
                Some(partials) => partials,
                None => {
                    placeholder =
                        Tensor::zeros_labelled(ctx, "unsplit conv partials", &[2], dw.storage());
                    &placeholder
                }
            };
            let args = gemm::bind(WEIGHT_GEMM, [x, dy, dw, partials]);
            let body = Body::Simt("conv_backward_weight");
            launch(ctx, body, &d, p, gemm, epilogue, args)?
        }
    };
    let Some(partials) = partials else {
        return Ok(vec![partial_sums]);
    };
    // One thread per pair of dw elements.
    let reduce_groups = grid_1d((d.o * taps).div_ceil(2), 256);
    let params = reduce_params(&d, taps, split, epilogue);
    let reduce_args = vec![
        ("params", Arg::Uniform(bytemuck::bytes_of(&params))),
        ("dw", dw.arg()),
        ("partials", partials.arg()),
    ];
    let reduce = ctx.kernel(
        &gemm::desc("conv_weight_reduce", &d),
        &reduce_args,
        reduce_groups,
    )?;
    Ok(vec![partial_sums, reduce])
}

/// Which body runs a GEMM: a SIMT entry point of conv.wgsl, or the tensor-core body.
enum Body {
    Simt(&'static str),
    Coop(CoopGemm, Kind),
}

/// Launch one GEMM (rows, columns and depth as the body's table has them).
fn launch(
    ctx: &GpuContext,
    body: Body,
    d: &Dims,
    p: Conv2dParams,
    gemm: Gemm,
    epilogue: Epilogue,
    args: Vec<(&str, Arg<'_>)>,
) -> Result<Kernel> {
    let Gemm {
        rows, cols, split, ..
    } = gemm;
    // The tile count the grid folds into x and y comes first: row tiles of the SIMT bodies,
    // column tiles (the output's contiguous dimension) of the tensor-core ones.
    let (desc, tiles) = match body {
        Body::Simt(entry) => (
            gemm::desc(entry, d),
            [rows.div_ceil(TILE_R), cols.div_ceil(TILE_C)],
        ),
        Body::Coop(tile, kind) => (
            coop::desc(&tile, kind, d),
            [
                cols.div_ceil(tile.bn() as usize),
                rows.div_ceil(tile.bm() as usize),
            ],
        ),
    };
    let params = gemm::params(d, p, gemm, epilogue, tiles);
    let grid = [tiles[0], tiles[1] * split.splits];
    gemm::dispatch(ctx, &desc, &params, args, rows * cols == 0, grid)
}
