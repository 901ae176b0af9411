//! 2-D convolution (`shaders/conv.wgsl`): forward, backward-input and backward-weight, each
//! an implicit GEMM tiled in workgroup memory (see the shader's header for the mapping). The
//! forward and the input gradient are one pixel-row GEMM in the shader (`src` gathered into
//! `dst`), differing only in the gather and the weight layout.
//!
//! Layouts are PyTorch's: x `[N, C, H, W]`, weight `[O, C, kh, kw]`, bias `[O]`,
//! y `[N, O, Ho, Wo]`. Every tensor may have its own storage (f16 activations with f32 weight
//! gradients, ...); the kernels are specialised per storage and accumulate in f32. The kernel
//! size is a compile-time constant of the shader (one pipeline per kernel size).

use super::Accumulate;
use crate::dtype::{DType, Storage};
use crate::error::{Error, Result};
use crate::gpu::{Arg, GpuContext, Kernel, KernelDesc, grid_1d};
use crate::shader::Variant;
use crate::tensor::Tensor;

const SHADER: &str = "conv";
/// Output tile of one workgroup (rows x columns of the GEMM), as in the shader.
const TILE_R: usize = 32;
const TILE_C: usize = 32;

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

#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    batch: u32,
    in_ch: u32,
    in_h: u32,
    in_w: u32,
    out_ch: u32,
    out_h: u32,
    out_w: u32,
    stride: u32,
    pad: u32,
    has_bias: u32,
    accumulate: u32,
    rows: u32,
    cols: u32,
    depth: u32,
    row_tiles: u32,
    col_tiles: u32,
    splits: u32,
    split_len: u32,
    round_to: u32,
    _pad: [u32; 3],
}

/// Checked dimensions of one convolution.
struct Dims {
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    o: usize,
    kh: usize,
    kw: usize,
    ho: usize,
    wo: usize,
}

fn dims4(op: &'static str, what: &str, t: &Tensor) -> Result<[usize; 4]> {
    match *t.shape() {
        [a, b, c, d] => Ok([a, b, c, d]),
        ref s => Err(Error::shape(
            op,
            format!("{what} must be 4-D (NCHW), got {s:?}"),
        )),
    }
}

/// Check x `[N,C,H,W]`, weight `[O,C,kh,kw]` and the output `[N,O,Ho,Wo]` against each other.
fn check(
    op: &'static str,
    x_shape: [usize; 4],
    w: &Tensor,
    y_shape: [usize; 4],
    p: Conv2dParams,
) -> Result<Dims> {
    let [n, c, h, wd] = x_shape;
    let [o, wc, kh, kw] = dims4(op, "weight", w)?;
    if wc != c {
        return Err(Error::shape(
            op,
            format!(
                "weight {:?} expects {wc} input channels, input has {c}",
                w.shape()
            ),
        ));
    }
    let (ho, wo) = conv2d_output_hw(h, wd, kh, kw, p)?;
    if y_shape != [n, o, ho, wo] {
        return Err(Error::shape(
            op,
            format!(
                "output gradient / output is {y_shape:?}, expected {:?} for input {x_shape:?}, weight {:?}, {p:?}",
                [n, o, ho, wo],
                w.shape()
            ),
        ));
    }
    let d = Dims {
        n,
        c,
        h,
        w: wd,
        o,
        kh,
        kw,
        ho,
        wo,
    };
    // Flat indices are u32 in the shader.
    let biggest = [n * c * h * wd, n * o * ho * wo, o * c * kh * kw]
        .into_iter()
        .max()
        .unwrap_or(0);
    if biggest >= u32::MAX as usize / 2 {
        return Err(Error::shape(
            op,
            "tensor too large for 32-bit indexing".to_string(),
        ));
    }
    Ok(d)
}

/// What a kernel's epilogue does besides storing its result.
#[derive(Clone, Copy)]
struct Epilogue {
    /// Rounding of the result before it is stored ([`super::round_code`]).
    round_to: u32,
    /// Add `bias[column]` (forward with a bias).
    bias: bool,
    /// Add to the output's values instead of overwriting them (weight gradient).
    accumulate: Accumulate,
}

const STORE: Epilogue = Epilogue {
    round_to: 0,
    bias: false,
    accumulate: Accumulate::Overwrite,
};

/// How the weight gradient's reduction over every output pixel is split (split-K).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Split {
    splits: usize,
    /// Pixels per split, a multiple of the shader's tile depth (16).
    len: usize,
}

impl Split {
    const NONE: Split = Split {
        splits: 1,
        len: u32::MAX as usize & !15,
    };

    /// CPU adapters (lavapipe, llvmpipe) stop a workgroup's tile loop early once it runs
    /// past about 1,260 steps of 16 pixels (measured: weight gradients were wrong from
    /// 20,160 pixels on), so there no workgroup walks more than this many; it keeps one
    /// split (today's bits) up to batch 20 of a 28×28 layer. GPUs split further, to give
    /// every multiprocessor work: the weight gradient has few output tiles.
    const CPU_LEN: usize = 16_384;
    /// Workgroups a GPU weight gradient aims for (a few per multiprocessor on large GPUs).
    const GPU_GROUPS: usize = 512;
    /// Fewest pixels a GPU split walks (below that the partial sums cost more than they save).
    const GPU_MIN_LEN: usize = 256;

    fn plan(device: wgpu::DeviceType, depth: usize, tiles: usize) -> Split {
        let len = if device == wgpu::DeviceType::Cpu {
            Self::CPU_LEN
        } else {
            let want = Self::GPU_GROUPS.div_ceil(tiles.max(1));
            depth.div_ceil(want).clamp(Self::GPU_MIN_LEN, Self::CPU_LEN)
        }
        .next_multiple_of(16);
        Split {
            splits: depth.div_ceil(len).max(1),
            len,
        }
    }
}

/// One implicit GEMM: its sizes and how its depth is split.
#[derive(Clone, Copy)]
struct Gemm {
    rows: usize,
    cols: usize,
    depth: usize,
    split: Split,
}

impl Gemm {
    fn unsplit(rows: usize, cols: usize, depth: usize) -> Self {
        Gemm {
            rows,
            cols,
            depth,
            split: Split::NONE,
        }
    }
}

fn launch(
    ctx: &GpuContext,
    entry: &'static str,
    d: &Dims,
    p: Conv2dParams,
    gemm: Gemm,
    epilogue: Epilogue,
    args: Vec<(&str, Arg<'_>)>,
) -> Result<Kernel> {
    let Gemm {
        rows,
        cols,
        depth,
        split,
    } = gemm;
    let row_tiles = rows.div_ceil(TILE_R);
    let col_tiles = cols.div_ceil(TILE_C);
    let params = Params {
        batch: d.n as u32,
        in_ch: d.c as u32,
        in_h: d.h as u32,
        in_w: d.w as u32,
        out_ch: d.o as u32,
        out_h: d.ho as u32,
        out_w: d.wo as u32,
        stride: p.stride as u32,
        pad: p.padding as u32,
        has_bias: epilogue.bias as u32,
        accumulate: epilogue.accumulate.flag(),
        rows: rows as u32,
        cols: cols as u32,
        depth: depth as u32,
        row_tiles: row_tiles as u32,
        col_tiles: col_tiles as u32,
        splits: split.splits as u32,
        split_len: split.len as u32,
        round_to: epilogue.round_to,
        _pad: [0; 3],
    };
    let mut all = vec![("params", Arg::Uniform(bytemuck::bytes_of(&params)))];
    all.extend(args);
    let [gx, gy, _] = grid_1d(row_tiles, 1);
    // An empty GEMM (a zero dimension) dispatches nothing; the kernel is still valid.
    let groups = if rows == 0 || cols == 0 {
        [0, 0, 0]
    } else {
        [gx, gy, (col_tiles * split.splits) as u32]
    };
    ctx.kernel(
        &KernelDesc::new(SHADER, entry)
            .with_const("KH", d.kh)
            .with_const("KW", d.kw),
        &all,
        groups,
    )
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
        round_to: super::round_code(round_to),
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
        &KernelDesc::new(SHADER, "conv_weight_reduce")
            .with_const("KH", d.kh)
            .with_const("KW", d.kw),
        &reduce_args,
        reduce_groups,
    )?;
    Ok(vec![partial_sums, reduce])
}

/// The reduce kernel's parameters: what it reads is `out_ch`, `rows` (taps), `splits` and
/// `accumulate`.
fn reduce_params(d: &Dims, gemm: Gemm, epilogue: Epilogue) -> Params {
    Params {
        out_ch: d.o as u32,
        rows: gemm.rows as u32,
        accumulate: epilogue.accumulate.flag(),
        splits: gemm.split.splits as u32,
        split_len: gemm.split.len as u32,
        round_to: epilogue.round_to,
        ..Params::default()
    }
}

/// The variants training uses: every storage for the activations and weights, with bias and
/// weight gradient either in that storage or in f32 (AMP's f32 weight gradients), for the
/// kernel sizes 1, 3 and 5. Other kernel sizes compile the same source with other constants.
pub fn variants() -> Result<Vec<Variant>> {
    let mut v = Vec::new();
    for k in [1usize, 3, 5] {
        let consts = [("KH", k.to_string()), ("KW", k.to_string())];
        for s in Storage::ALL {
            let auxes: &[Storage] = if s == Storage::F32 {
                &[Storage::F32]
            } else {
                &[s, Storage::F32]
            };
            for &aux in auxes {
                let storages: Vec<(String, Storage)> = [
                    ("src", s),
                    ("w", s),
                    ("dst", s),
                    ("x", s),
                    ("dy", s),
                    ("bias", aux),
                    ("dw", aux),
                ]
                .into_iter()
                .map(|(n, st)| (n.to_string(), st))
                .collect();
                v.push(Variant::new(SHADER, &storages, &consts)?);
            }
        }
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use wgpu::DeviceType;

    #[test]
    fn weight_gradient_splits() {
        // CPU adapters: one split up to 16,384 pixels (the bits of an unsplit reduction),
        // then runs of 16,384.
        let cpu = |depth| Split::plan(DeviceType::Cpu, depth, 1);
        assert_eq!(
            cpu(12_544),
            Split {
                splits: 1,
                len: 16_384
            }
        );
        assert_eq!(
            cpu(16_384),
            Split {
                splits: 1,
                len: 16_384
            }
        );
        assert_eq!(
            cpu(20_384),
            Split {
                splits: 2,
                len: 16_384
            }
        );
        // GPUs: about 512 workgroups over the output tiles, splits of at least 256 pixels.
        let gpu = |depth, tiles| Split::plan(DeviceType::DiscreteGpu, depth, tiles);
        // mnist-cnn conv1 at batch 64: 1 tile, 50,176 pixels -> 512 splits of 112 -> 256.
        assert_eq!(
            gpu(50_176, 1),
            Split {
                splits: 196,
                len: 256
            }
        );
        // conv2 at batch 64: 9 x 2 tiles, 12,544 pixels -> 29 splits of 433 -> 448.
        assert_eq!(
            gpu(12_544, 18),
            Split {
                splits: 28,
                len: 448
            }
        );
        // A huge reduction still caps a split at the CPU length.
        assert_eq!(
            gpu(10_000_000, 1_000),
            Split {
                splits: 611,
                len: 16_384
            }
        );
        // Tiny: one split.
        assert_eq!(
            gpu(100, 4),
            Split {
                splits: 1,
                len: 256
            }
        );
    }
}
