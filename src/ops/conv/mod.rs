//! 2-D convolution (`shaders/conv.wgsl`): forward, backward-input and backward-weight, each
//! an implicit GEMM tiled in workgroup memory (see the shader's header for the mapping). The
//! forward and the input gradient are one pixel-row GEMM in the shader (`src` gathered into
//! `dst`), differing only in the gather and the weight layout.
//!
//! Layouts are PyTorch's: x `[N, C, H, W]`, weight `[O, C, kh, kw]`, bias `[O]`,
//! y `[N, O, Ho, Wo]`. Every tensor may have its own storage (f16 activations with f32 weight
//! gradients, ...); the kernels are specialised per storage and accumulate in f32. The kernel
//! size is a compile-time constant of the shader (one pipeline per kernel size).

mod gemm;
mod shape;

use super::Accumulate;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::gpu::{Arg, GpuContext, Kernel, KernelDesc, grid_1d};
use crate::shader::{Grid, ShaderDecl};
use crate::tensor::Tensor;
use gemm::{Epilogue, Gemm, STORE, Split, TILE_C, TILE_R, launch, reduce_params};
use shape::{check, dims4};

pub static SHADER: ShaderDecl = ShaderDecl {
    name: "conv",
    source: include_str!("../../../shaders/conv.wgsl"),
    structs: &[gemm::Params::WGSL],
    // The variants training uses: every storage for the activations and weights, with bias and
    // weight gradient either in that storage or in f32 (AMP's f32 weight gradients), for the
    // kernel sizes 1, 3 and 5. Other kernel sizes compile the same source with other constants.
    variants: |shader| {
        Grid::new()
            .each(&["src", "w", "dst", "x", "dy"])
            .like_or_f32(&["bias", "dw"], "src")
            .variants_with(shader, |_| {
                [1, 3, 5]
                    .map(|k| vec![("KH", k.to_string()), ("KW", k.to_string())])
                    .to_vec()
            })
    },
};

#[derive(Clone, Copy, Debug)]
pub struct Conv2dParams {
    pub stride: usize,
    pub padding: usize,
}

impl Default for Conv2dParams {
    fn default() -> Self {
        Self {
            stride: 1,
            padding: 0,
        }
    }
}

/// Output height and width of a convolution (PyTorch's formula, dilation 1).
pub fn conv2d_output_hw(
    h: usize,
    w: usize,
    kh: usize,
    kw: usize,
    p: Conv2dParams,
) -> Result<(usize, usize)> {
    if p.stride == 0 {
        return Err(Error::shape("conv2d", "stride must be at least 1"));
    }
    if kh == 0 || kw == 0 {
        return Err(Error::shape("conv2d", "kernel size must be at least 1"));
    }
    let (hp, wp) = (h + 2 * p.padding, w + 2 * p.padding);
    if hp < kh || wp < kw {
        return Err(Error::shape(
            "conv2d",
            format!(
                "kernel {kh}x{kw} is larger than the padded input {hp}x{wp} ({h}x{w} with padding {})",
                p.padding
            ),
        ));
    }
    Ok(((hp - kh) / p.stride + 1, (wp - kw) / p.stride + 1))
}

/// y[N,O,Ho,Wo] = conv(x[N,C,H,W], w[O,C,kh,kw]) (+ bias[O]); NCHW, PyTorch semantics
/// (cross-correlation, zero padding).
pub fn conv2d_forward(
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
    // Without a bias the shader never reads it; bind the weight in its place (same storage
    // variant as a real bias of the weight's dtype, so no extra pipeline).
    let args = vec![
        ("src", x.arg()),
        ("w", w.arg()),
        ("dst", y.arg()),
        ("bias", bias.unwrap_or(w).arg()),
    ];
    launch(
        ctx,
        "conv_forward",
        &d,
        p,
        Gemm::unsplit(d.n * d.ho * d.wo, d.o, d.c * d.kh * d.kw),
        Epilogue {
            bias: bias.is_some(),
            ..STORE
        },
        args,
    )
}

/// dx[N,C,H,W] = gradient of the convolution with respect to its input (overwrites dx).
pub fn conv2d_backward_input(
    ctx: &GpuContext,
    dy: &Tensor,
    w: &Tensor,
    dx: &Tensor,
    p: Conv2dParams,
) -> Result<Kernel> {
    let op = "conv2d_backward_input";
    let d = check(op, dims4(op, "dx", dx)?, w, dims4(op, "dy", dy)?, p)?;
    launch(
        ctx,
        "conv_backward_input",
        &d,
        p,
        Gemm::unsplit(d.n * d.h * d.w, d.c, d.o * d.kh * d.kw),
        STORE,
        // The epilogue it shares with the forward names a bias; it is never read here.
        vec![
            ("src", dy.arg()),
            ("w", w.arg()),
            ("dst", dx.arg()),
            ("bias", w.arg()),
        ],
    )
}

/// dw[O,C,kh,kw] = (or, with [`Accumulate::Add`], +=) gradient with respect to the weight,
/// rounded to `round_to` first when given (the dtype the forward ran in: PyTorch's f16
/// weight gradient, cast to f32). dw is usually f32 while x and dy are f16. One kernel, or two
/// when the reduction over the batch's pixels is split (split-K: partial sums in a scratch
/// buffer made here, then added in a fixed order).
pub fn conv2d_backward_weight(
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
    let tiles = taps.div_ceil(TILE_R) * d.o.div_ceil(TILE_C);
    let split = Split::plan(ctx.device_type(), pixels, tiles);
    let gemm = Gemm {
        rows: taps,
        cols: d.o,
        depth: pixels,
        split,
    };
    let epilogue = Epilogue {
        accumulate,
        round_to: crate::ops::round_code(round_to),
        ..STORE
    };
    if split.splits == 1 {
        // dw stands in for the partial sums the kernel never writes with one split.
        let args = vec![
            ("x", x.arg()),
            ("dy", dy.arg()),
            ("dw", dw.arg()),
            ("partials", dw.arg()),
        ];
        return Ok(vec![launch(
            ctx,
            "conv_backward_weight",
            &d,
            p,
            gemm,
            epilogue,
            args,
        )?]);
    }
    let partials = Tensor::zeros(ctx, &[split.splits, d.o, taps], DType::F32);
    let args = |with_inputs: bool| {
        let mut args = vec![("dw", dw.arg()), ("partials", partials.arg())];
        if with_inputs {
            args.extend([("x", x.arg()), ("dy", dy.arg())]);
        }
        args
    };
    let partial_sums = launch(
        ctx,
        "conv_backward_weight",
        &d,
        p,
        gemm,
        epilogue,
        args(true),
    )?;
    // One thread per pair of dw elements.
    let reduce_groups = grid_1d((d.o * taps).div_ceil(2), 256);
    let params = reduce_params(&d, gemm, epilogue);
    let mut reduce_args = vec![("params", Arg::Uniform(bytemuck::bytes_of(&params)))];
    reduce_args.extend(args(false));
    let reduce = ctx.kernel(
        &KernelDesc::new(&SHADER, "conv_weight_reduce")
            .with_const("KH", d.kh)
            .with_const("KW", d.kw),
        &reduce_args,
        reduce_groups,
    )?;
    Ok(vec![partial_sums, reduce])
}
