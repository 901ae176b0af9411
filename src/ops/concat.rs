//! Concatenation along the last dimension (`shaders/concat.wgsl`), one part at a time: a
//! composition's concat join writes each input into its columns of the output, and its
//! backward reads each input's gradient back out of the output's (`torch.cat(xs, dim=-1)`
//! and its autograd). Values are converted to the destination's storage on the way.

use crate::error::{Error, Result};
use crate::gpu::{Arg, GpuContext, Kernel, KernelDesc, grid_1d};
use crate::shader::{Grid, ShaderDecl};
use crate::tensor::Tensor;

pub static SHADER: ShaderDecl = ShaderDecl {
    name: "concat",
    source: include_str!("../../shaders/concat.wgsl"),
    structs: &[Params::WGSL],
    consts: &[],
    // Every (x, out) storage pair within one f16 world (a part may be cast on the way).
    variants: |shader| {
        Grid::new()
            .each(&["x"])
            .each(&["out"])
            .one_f16_storage()
            .variants(shader, &[])
    },
};
const WG: u32 = 256;

crate::wgsl_struct! {
    struct Params {
        /// Elements of the part.
        n: u32,
        /// The part's last dimension.
        width: u32,
        /// The whole's last dimension.
        total: u32,
        /// The part's first column in the whole.
        offset: u32,
    }
}

/// The sizes of part `part` at column `offset` of `whole` (same leading dimensions).
fn params(op: &'static str, part: &Tensor, whole: &Tensor, offset: usize) -> Result<Params> {
    let (p, w) = (part.shape(), whole.shape());
    let (Some(&width), Some(&total)) = (p.last(), w.last()) else {
        return Err(Error::shape(op, "scalars have no last dimension"));
    };
    if p[..p.len() - 1] != w[..w.len() - 1] || offset + width > total {
        return Err(Error::shape(
            op,
            format!("{p:?} is not a part of {w:?} at column {offset}"),
        ));
    }
    let n = u32::try_from(part.numel())
        .map_err(|_| Error::shape(op, format!("{p:?} has over 2^32 elements")))?;
    Ok(Params {
        n,
        width: width.max(1) as u32,
        total: total as u32,
        offset: offset as u32,
    })
}

fn launch(
    ctx: &GpuContext,
    entry: &'static str,
    p: Params,
    x: &Tensor,
    out: &Tensor,
) -> Result<Kernel> {
    ctx.kernel(
        &KernelDesc::new(&SHADER, entry),
        &[
            ("params", Arg::Uniform(bytemuck::bytes_of(&p))),
            ("x", x.arg()),
            ("out", out.arg()),
        ],
        grid_1d(p.n as usize, WG),
    )
}

/// `whole[..., offset .. offset + width] = part` (the forward of one input of a concat).
pub fn write_part(
    ctx: &GpuContext,
    part: &Tensor,
    whole: &Tensor,
    offset: usize,
) -> Result<Kernel> {
    let p = params("concat", part, whole, offset)?;
    launch(ctx, "concat_part", p, part, whole)
}

/// `part = whole[..., offset .. offset + width]` (the backward of one input of a concat).
pub fn read_part(ctx: &GpuContext, whole: &Tensor, part: &Tensor, offset: usize) -> Result<Kernel> {
    let p = params("concat slice", part, whole, offset)?;
    launch(ctx, "concat_slice", p, whole, part)
}
