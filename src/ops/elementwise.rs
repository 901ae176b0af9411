//! Elementwise ops (`shaders/elementwise.wgsl`): casts, add, mul, scale, bias add and
//! accumulate (the activations are [`super::unary`]'s table). Math is f32; every tensor may
//! have its own storage.

use crate::dtype::Storage;
use crate::error::{Error, Result};
use crate::gpu::{Arg, GpuContext, Kernel, KernelDesc, grid_1d};
use crate::shader::{Grid, ShaderDecl};
use crate::tensor::Tensor;

pub static SHADER: ShaderDecl = ShaderDecl {
    name: "elementwise",
    source: include_str!("../../shaders/elementwise.wgsl"),
    structs: &[Params::WGSL],
    consts: &[],
    // Every (x, y, b, out) storage combination these kernels may run with: inputs of one
    // storage, the output in any, the bias in the inputs' storage or f32; and an f32 `x`
    // with a low-precision `y` (a residual's add: the f32 stream and an f16 branch).
    variants: |shader| {
        let mixed = Grid::new()
            .each_of(&["x"], &[Storage::F32])
            .each_of(&["y"], &Storage::ALL[1..])
            .each(&["out"]);
        Grid::new()
            .each(&["x", "y"])
            .like_or_f32(&["b"], "x")
            .each(&["out"])
            .or(mixed)
            .one_f16_storage()
            .variants(shader, &[])
    },
};
const WG: u32 = 256;

crate::wgsl_struct! {
    struct Params {
        /// number of elements
        n: u32,
        /// scale factor (scale op)
        alpha: f32,
        /// bias_add: size of dim 1 and product of the dims after it.
        channels: u32,
        /// bias_add: product of the dims after dim 1
        inner: u32,
    }
}

fn same_len(op: &'static str, a: &Tensor, b: &Tensor) -> Result<()> {
    if a.numel() != b.numel() {
        return Err(Error::shape(
            op,
            format!("{:?} and {:?} differ in length", a.shape(), b.shape()),
        ));
    }
    Ok(())
}

fn launch(
    ctx: &GpuContext,
    entry: &'static str,
    out: &Tensor,
    inputs: &[(&'static str, &Tensor)],
    alpha: f32,
) -> Result<Kernel> {
    launch_with(ctx, entry, out, inputs, alpha, [1, 1])
}

fn launch_with(
    ctx: &GpuContext,
    entry: &'static str,
    out: &Tensor,
    inputs: &[(&'static str, &Tensor)],
    alpha: f32,
    [channels, inner]: [usize; 2],
) -> Result<Kernel> {
    let n = u32::try_from(out.numel())
        .map_err(|_| Error::shape(entry, format!("{:?} has over 2^32 elements", out.shape())))?;
    let params = Params {
        n,
        alpha,
        channels: channels as u32,
        inner: inner as u32,
    };
    let mut args = vec![
        ("params", Arg::Uniform(bytemuck::bytes_of(&params))),
        ("out", out.arg()),
    ];
    args.extend(inputs.iter().map(|(n, t)| (*n, t.arg())));
    ctx.kernel(
        &KernelDesc::new(&SHADER, entry),
        &args,
        grid_1d(out.numel().div_ceil(2), WG),
    )
}

/// `out = x` converted to `out`'s dtype (every pair of dtypes).
pub fn cast(ctx: &GpuContext, x: &Tensor, out: &Tensor) -> Result<Kernel> {
    same_len("cast", x, out)?;
    launch(ctx, "cast_forward", out, &[("x", x)], 0.0)
}

/// `out = x + y` (same shapes; mixed dtypes are computed in f32 and stored as `out`).
pub fn add(ctx: &GpuContext, x: &Tensor, y: &Tensor, out: &Tensor) -> Result<Kernel> {
    same_len("add", x, out)?;
    same_len("add", y, out)?;
    launch(ctx, "add", out, &[("x", x), ("y", y)], 0.0)
}

/// `out = x * y` (same shapes; computed in f32, stored as `out`).
pub fn mul(ctx: &GpuContext, x: &Tensor, y: &Tensor, out: &Tensor) -> Result<Kernel> {
    same_len("mul", x, out)?;
    same_len("mul", y, out)?;
    launch(ctx, "mul", out, &[("x", x), ("y", y)], 0.0)
}

/// `out = alpha * x`.
pub fn scale(ctx: &GpuContext, x: &Tensor, alpha: f32, out: &Tensor) -> Result<Kernel> {
    same_len("scale", x, out)?;
    launch(ctx, "scale", out, &[("x", x)], alpha)
}

/// `out[N, C, ...] = x + b[C]`, `b` broadcast along dim 1: Linear (`x` [N, F], bias [F]) and
/// Conv2d (`x` [N, C, H, W], bias [C]). Its backward for `b` is [`crate::ops::reduce::bias_grad`];
/// for `x` it is the identity.
pub fn bias_add(ctx: &GpuContext, x: &Tensor, b: &Tensor, out: &Tensor) -> Result<Kernel> {
    same_len("bias_add", x, out)?;
    let shape = x.shape();
    if shape.len() < 2 || b.shape() != [shape[1]] {
        return Err(Error::shape(
            "bias_add",
            format!(
                "bias {:?} does not match dim 1 of {:?} (want x [N, C, ...] and b [C])",
                b.shape(),
                shape
            ),
        ));
    }
    // Empty tensors dispatch no element; keep the divisors non-zero anyway.
    let channels = shape[1].max(1);
    let inner = shape[2..].iter().product::<usize>().max(1);
    launch_with(
        ctx,
        "bias_add",
        out,
        &[("x", x), ("b", b)],
        0.0,
        [channels, inner],
    )
}

/// `acc += x` (residual-stream gradients). `acc` is read and written; the two may have
/// different storages (the sum is f32, rounded into acc's storage).
pub fn accumulate(ctx: &GpuContext, x: &Tensor, acc: &Tensor) -> Result<Kernel> {
    same_len("accumulate", x, acc)?;
    if std::sync::Arc::ptr_eq(x.buffer(), acc.buffer()) {
        return Err(Error::shape(
            "accumulate",
            "x and acc share a buffer (a tensor cannot be read and written in one dispatch)",
        ));
    }
    launch(ctx, "accumulate", acc, &[("x", x)], 0.0)
}
