//! Reductions (`shaders/reduce.wgsl`): sum and mean of a whole tensor, and the bias gradient
//! of Linear and Conv2d. Fixed reduction order (no float atomics), so results are
//! bit-reproducible run after run; accumulation is f32 whatever the storage.

use std::sync::Arc;

use super::Accumulate;
use crate::error::{Error, Result};
use crate::gpu::{Arg, GpuBuffer, GpuContext, Kernel, KernelDesc, grid_1d};
use crate::shader::{ShaderDecl, each_like_or_f32};
use crate::tensor::Tensor;

pub static SHADER: ShaderDecl = ShaderDecl {
    name: "reduce",
    source: include_str!("../../shaders/reduce.wgsl"),
    structs: &[Params::WGSL],
    consts: &[],
    // Every storage combination these kernels may run with: inputs (`x`, `dy`) in any storage,
    // outputs (`out`, `db`) in f32 or the input's storage.
    variants: |shader| each_like_or_f32(shader, &["x", "dy"], &["out", "db"]),
};
const WG: u32 = 256;
/// Element pairs each thread of the first pass sums (before the grid is capped).
const PAIRS_PER_THREAD: usize = 4;
/// Most workgroups of the first pass: the second pass (one workgroup) reads this many partials.
const MAX_GROUPS: usize = 1024;

fn count_u32(op: &'static str, n: usize) -> Result<u32> {
    u32::try_from(n).map_err(|_| Error::shape(op, format!("{n} elements is over 2^32")))
}

/// Workgroups of the first pass of a whole-tensor reduction of `n` elements (two per
/// thread). Depends on `n` only, so the summation order (and the result) is reproducible.
pub(crate) fn first_pass_groups(n: usize) -> usize {
    n.div_ceil(2)
        .div_ceil(WG as usize * PAIRS_PER_THREAD)
        .clamp(1, MAX_GROUPS)
}

crate::wgsl_struct! {
    struct Params {
        /// sum/mean: elements of x
        n: u32,
        /// sum/mean: workgroups of the first pass (1: it writes out directly)
        groups: u32,
        /// sum/mean: factor of the final result (1 or 1/n)
        scale: f32,
        /// bias_grad: 1 to add to db, 0 to overwrite it
        accumulate: u32,
        /// bias_grad: size of dim 0 of dy
        batch: u32,
        /// bias_grad: size of dim 1 of dy
        channels: u32,
        /// bias_grad: product of the dims after dim 1
        inner: u32,
        /// bias_grad: round_grad's `to` before accumulating
        round_to: u32,
    }
}

fn reduce_all(
    ctx: &GpuContext,
    op: &'static str,
    x: &Tensor,
    out: &Tensor,
    scale: f32,
) -> Result<Vec<Kernel>> {
    if out.numel() != 1 {
        return Err(Error::shape(
            op,
            format!("out must hold one element, not {:?}", out.shape()),
        ));
    }
    let groups = first_pass_groups(x.numel());
    let params = Params {
        n: count_u32(op, x.numel())?,
        groups: groups as u32,
        scale,
        ..Default::default()
    };
    let partials: Arc<GpuBuffer> = ctx.alloc_storage("reduce partials", 4 * groups as u64);
    let args = [
        ("params", Arg::Uniform(bytemuck::bytes_of(&params))),
        ("x", x.arg()),
        ("out", out.arg()),
        ("partials", Arg::Buffer(&partials)),
    ];
    let first = ctx.kernel(
        &KernelDesc::new(&SHADER, "sum_partials"),
        &args,
        [groups as u32, 1, 1],
    )?;
    if groups == 1 {
        return Ok(vec![first]);
    }
    let second = ctx.kernel(&KernelDesc::new(&SHADER, "sum_final"), &args, [1, 1, 1])?;
    Ok(vec![first, second])
}

/// `out[0]` (a one-element tensor, normally f32) = the sum of every element of `x` (any
/// storage), accumulated in f32. One kernel up to 2048 elements, two above.
pub fn sum(ctx: &GpuContext, x: &Tensor, out: &Tensor) -> Result<Vec<Kernel>> {
    reduce_all(ctx, "sum", x, out, 1.0)
}

/// `out[0]` = the mean of every element of `x` (NaN for an empty `x`, as in PyTorch).
pub fn mean(ctx: &GpuContext, x: &Tensor, out: &Tensor) -> Result<Vec<Kernel>> {
    reduce_all(ctx, "mean", x, out, 1.0 / x.numel() as f32)
}

/// `db[C]` (+)= the sum of `dy[N, C, ...]` over every dim except dim 1: the bias gradient of
/// Linear (`dy` [N, F]) and Conv2d (`dy` [N, C, H, W]). With [`Accumulate::Add`] the sum is
/// added to `db` (gradient accumulation), else it overwrites it; `round_to` rounds the sum to
/// the forward's dtype first (see [`super::round_code`]). `db` is usually f32, `dy` any
/// storage.
pub fn bias_grad(
    ctx: &GpuContext,
    dy: &Tensor,
    db: &Tensor,
    accumulate: Accumulate,
    round_to: Option<crate::dtype::DType>,
) -> Result<Kernel> {
    let shape = dy.shape();
    if shape.len() < 2 || db.shape() != [shape[1]] {
        return Err(Error::shape(
            "bias_grad",
            format!(
                "db {:?} does not match dim 1 of dy {:?} (want dy [N, C, ...] and db [C])",
                db.shape(),
                shape
            ),
        ));
    }
    count_u32("bias_grad", dy.numel())?;
    let params = Params {
        accumulate: accumulate.flag(),
        batch: shape[0] as u32,
        channels: shape[1] as u32,
        inner: shape[2..].iter().product::<usize>().max(1) as u32,
        round_to: super::round_code(round_to),
        ..Default::default()
    };
    let grid = if shape[1] == 0 {
        [0, 0, 0]
    } else {
        grid_1d(shape[1] * WG as usize, WG)
    };
    ctx.kernel(
        &KernelDesc::new(&SHADER, "bias_grad"),
        &[
            ("params", Arg::Uniform(bytemuck::bytes_of(&params))),
            ("dy", dy.arg()),
            ("db", db.arg()),
        ],
        grid,
    )
}
