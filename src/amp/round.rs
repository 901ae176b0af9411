//! In-place rounding of a flat f32 buffer to f16 or bf16 values (`shaders/round.wgsl`).

use std::sync::Arc;

use super::{f32_piece, in_order};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::gpu::{Arg, GpuBuffer, GpuContext, Kernel, KernelDesc, grid_1d};
use crate::shader::{ShaderDecl, f32_only};

pub static SHADER: ShaderDecl = ShaderDecl {
    name: "round",
    source: include_str!("../../shaders/round.wgsl"),
    structs: &[Params::WGSL],
    consts: &[],
    variants: f32_only,
};

crate::wgsl_struct! {
    struct Params {
        n: u32,
        /// 0: f16, 1: bf16
        dtype: u32,
        _pad0: u32,
        _pad1: u32,
    }
}

/// values[i] = round_to(dtype, values[i]) for the first `n` f32 of `values`.
pub fn round_inplace(
    ctx: &GpuContext,
    values: &Arc<GpuBuffer>,
    n: usize,
    dtype: DType,
) -> Result<Kernel> {
    let code = match dtype {
        DType::F16 => 0,
        DType::BF16 => 1,
        DType::F32 | DType::U32 => {
            return Err(Error::InvalidArgument(format!(
                "rounding f32 values to {dtype} is not a low-precision store"
            )));
        }
    };
    // One dispatch per piece where the buffer passes the binding limit (elementwise: the
    // same bits).
    let kernels = ctx.flat_pieces(n).into_iter().map(|piece| {
        let params = Params {
            n: piece.len() as u32,
            dtype: code,
            ..Default::default()
        };
        ctx.kernel(
            &KernelDesc::new(&SHADER, "round_inplace"),
            &[
                ("params", Arg::Uniform(bytemuck::bytes_of(&params))),
                ("values", f32_piece(values, &piece)),
            ],
            grid_1d(piece.len(), 256),
        )
    });
    in_order(kernels.collect::<Result<_>>()?)
}
