//! Elementwise ops (`shaders/elementwise.wgsl`): casts, add, ReLU, forward and backward.

use super::{Arg, KernelDesc, grid_1d};
use crate::error::{Error, Result};
use crate::gpu::{GpuContext, Kernel};
use crate::shader::Variant;
use crate::tensor::{Storage, Tensor};

const SHADER: &str = "elementwise";
const WG: u32 = 256;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    alpha: f32,
    _pad: [u32; 2],
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
    let params = Params {
        n: out.numel() as u32,
        alpha,
        _pad: [0; 2],
    };
    let mut args = vec![
        ("params", Arg::Uniform(bytemuck::bytes_of(&params))),
        ("out", Arg::Tensor(out)),
    ];
    args.extend(inputs.iter().map(|(n, t)| (*n, Arg::Tensor(t))));
    ctx.kernel(
        &KernelDesc::new(SHADER, entry),
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

/// `out = max(x, 0)`.
pub fn relu_forward(ctx: &GpuContext, x: &Tensor, out: &Tensor) -> Result<Kernel> {
    same_len("relu", x, out)?;
    launch(ctx, "relu_forward", out, &[("x", x)], 0.0)
}

/// `grad_x = grad_y * (x > 0)`.
pub fn relu_backward(
    ctx: &GpuContext,
    x: &Tensor,
    grad_y: &Tensor,
    grad_x: &Tensor,
) -> Result<Kernel> {
    same_len("relu_backward", x, grad_y)?;
    same_len("relu_backward", x, grad_x)?;
    launch(
        ctx,
        "relu_backward",
        grad_x,
        &[("x", x), ("y", grad_y)],
        0.0,
    )
}

/// Every (x, y, out) storage combination these kernels may run with.
pub fn variants() -> Result<Vec<Variant>> {
    let mut v = Vec::new();
    for x in Storage::ALL {
        for out in Storage::ALL {
            v.push(Variant::new(
                SHADER,
                &[("x".into(), x), ("y".into(), x), ("out".into(), out)],
                &[],
            )?);
        }
    }
    Ok(v)
}
