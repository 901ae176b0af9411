//! 2-D max pooling (`shaders/pool.wgsl`), forward and backward. No padding, floor mode
//! (PyTorch's defaults). The forward records the flat index into x of each window's max in
//! a u32 buffer; the backward gathers dy through it (overlapping windows sum, no atomics).
//!
//! A ReLU right before the pool may run in the pool's kernels ([`maxpool2d_relu_forward`],
//! [`maxpool2d_relu_backward`]) where the windows tile the input ([`tiles`]): one dispatch
//! each way instead of two, every tensor of the two still written, bit for bit.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::gpu::{Arg, GpuBuffer, GpuContext, Kernel, KernelDesc, grid_1d};
use crate::shader::{Grid, ShaderDecl};
use crate::tensor::Tensor;

pub static SHADER: ShaderDecl = ShaderDecl {
    name: "pool",
    source: include_str!("../../shaders/pool.wgsl"),
    structs: &[Params::WGSL],
    consts: &[],
    // Every storage for x/y and for dy/dx (pooling runs in its input's dtype), and for a
    // fused ReLU's input, output and input gradient (the same dtype).
    variants: |shader| {
        Grid::new()
            .each(&["x", "y", "dy", "dx", "pre", "act", "dpre"])
            .variants(shader, &[])
    },
};
const WG: u32 = 64;

#[derive(Clone, Copy, Debug)]
pub struct Pool2dParams {
    pub kernel: usize,
    pub stride: usize,
}

/// Output height and width (floor mode, no padding).
pub fn pool2d_output_hw(h: usize, w: usize, p: Pool2dParams) -> Result<(usize, usize)> {
    if p.kernel == 0 || p.stride == 0 {
        return Err(Error::shape(
            "maxpool2d",
            format!("kernel and stride must be at least 1, got {p:?}"),
        ));
    }
    if h < p.kernel || w < p.kernel {
        return Err(Error::shape(
            "maxpool2d",
            format!("input {h}x{w} is smaller than the kernel {}", p.kernel),
        ));
    }
    Ok(((h - p.kernel) / p.stride + 1, (w - p.kernel) / p.stride + 1))
}

/// Buffer for the argmax indices (one u32 per output element), allocated once by the caller.
pub fn indices_buffer(ctx: &GpuContext, output_numel: usize) -> Arc<GpuBuffer> {
    ctx.alloc_storage("maxpool indices", 4 * output_numel as u64)
}

crate::wgsl_struct! {
    struct Params {
        /// batch * channels
        planes: u32,
        in_h: u32,
        in_w: u32,
        out_h: u32,
        out_w: u32,
        kernel: u32,
        stride: u32,
        _pad0: u32,
    }
}

/// Check x `[N,C,H,W]` against y `[N,C,Ho,Wo]` and the indices buffer.
fn check(
    op: &'static str,
    x: &Tensor,
    y: &Tensor,
    indices: &GpuBuffer,
    p: Pool2dParams,
) -> Result<Params> {
    let [n, c, h, w] = *x.shape() else {
        return Err(Error::shape(
            op,
            format!("input must be 4-D (NCHW), got {:?}", x.shape()),
        ));
    };
    let (ho, wo) = pool2d_output_hw(h, w, p)?;
    if y.shape() != [n, c, ho, wo] {
        return Err(Error::shape(
            op,
            format!(
                "output is {:?}, expected {:?} for input {:?} and {p:?}",
                y.shape(),
                [n, c, ho, wo],
                x.shape()
            ),
        ));
    }
    if indices.size() < 4 * y.numel() as u64 {
        return Err(Error::shape(
            op,
            format!(
                "indices buffer holds {} bytes, {} outputs need {}",
                indices.size(),
                y.numel(),
                4 * y.numel()
            ),
        ));
    }
    if x.numel() >= u32::MAX as usize / 2 {
        return Err(Error::shape(op, "tensor too large for 32-bit indexing"));
    }
    Ok(Params {
        planes: (n * c) as u32,
        in_h: h as u32,
        in_w: w as u32,
        out_h: ho as u32,
        out_w: wo as u32,
        kernel: p.kernel as u32,
        stride: p.stride as u32,
        ..Default::default()
    })
}

/// y[N,C,Ho,Wo] = max over each window of x[N,C,H,W]; writes the flat index into x of each
/// max into `indices`. A window holding a NaN gives NaN (PyTorch).
pub fn maxpool2d_forward(
    ctx: &GpuContext,
    x: &Tensor,
    y: &Tensor,
    indices: &Arc<GpuBuffer>,
    p: Pool2dParams,
) -> Result<Kernel> {
    let params = check("maxpool2d_forward", x, y, indices, p)?;
    let rows = (params.planes * params.out_h) as usize;
    ctx.kernel(
        &KernelDesc::new(&SHADER, "maxpool_forward"),
        &[
            ("params", Arg::Uniform(bytemuck::bytes_of(&params))),
            ("x", x.arg()),
            ("y", y.arg()),
            ("indices", Arg::Buffer(indices)),
        ],
        if rows == 0 { [0; 3] } else { grid_1d(rows, WG) },
    )
}

/// dx = dy scattered to the argmax positions recorded by the forward (overwrites dx; zero
/// elsewhere; overlapping windows sum).
pub fn maxpool2d_backward(
    ctx: &GpuContext,
    dy: &Tensor,
    indices: &Arc<GpuBuffer>,
    dx: &Tensor,
    p: Pool2dParams,
) -> Result<Kernel> {
    let params = check("maxpool2d_backward", dx, dy, indices, p)?;
    let rows = (params.planes * params.in_h) as usize;
    ctx.kernel(
        &KernelDesc::new(&SHADER, "maxpool_backward"),
        &[
            ("params", Arg::Uniform(bytemuck::bytes_of(&params))),
            ("dy", dy.arg()),
            ("dx", dx.arg()),
            ("indices", Arg::Buffer(indices)),
        ],
        if rows == 0 { [0; 3] } else { grid_1d(rows, WG) },
    )
}

/// Whether `p`'s windows tile an `h`×`w` input exactly (stride = kernel, both sizes
/// divisible): each element in exactly one window, so a thread that owns an output row owns
/// the input rows under it, and the fused ReLU kernels apply.
pub fn tiles(h: usize, w: usize, p: Pool2dParams) -> bool {
    p.kernel > 0 && p.stride == p.kernel && h.is_multiple_of(p.kernel) && w.is_multiple_of(p.kernel)
}

/// Check the tensors of a fused ReLU (`pre` its input, `act` its output or their
/// gradients) against the pool's input `x` (`act` itself in the forward, dx in the
/// backward): one shape, one storage, windows that tile.
fn check_fused(op: &'static str, pre: &Tensor, act: &Tensor, p: Pool2dParams) -> Result<()> {
    if pre.shape() != act.shape() || pre.storage() != act.storage() {
        return Err(Error::shape(
            op,
            format!(
                "the ReLU's input {:?} ({:?}) and output {:?} ({:?}) differ in shape or storage",
                pre.shape(),
                pre.storage(),
                act.shape(),
                act.storage()
            ),
        ));
    }
    let &[.., h, w] = act.shape() else {
        return Err(Error::shape(op, "input must be 4-D (NCHW)"));
    };
    if !tiles(h, w, p) {
        return Err(Error::shape(
            op,
            format!("{p:?} does not tile {h}x{w}: run relu and maxpool2d separately"),
        ));
    }
    Ok(())
}

/// `act = relu(pre)` and maxpool2d_forward of `act` into `y` and `indices`, in one kernel:
/// the same bits as the two kernels. The windows must tile the input ([`tiles`]).
pub fn maxpool2d_relu_forward(
    ctx: &GpuContext,
    pre: &Tensor,
    act: &Tensor,
    y: &Tensor,
    indices: &Arc<GpuBuffer>,
    p: Pool2dParams,
) -> Result<Kernel> {
    const OP: &str = "maxpool2d_relu_forward";
    let params = check(OP, act, y, indices, p)?;
    check_fused(OP, pre, act, p)?;
    let rows = (params.planes * params.out_h) as usize;
    ctx.kernel(
        &KernelDesc::new(&SHADER, "maxpool_relu_forward"),
        &[
            ("params", Arg::Uniform(bytemuck::bytes_of(&params))),
            ("pre", pre.arg()),
            ("act", act.arg()),
            ("y", y.arg()),
            ("indices", Arg::Buffer(indices)),
        ],
        if rows == 0 { [0; 3] } else { grid_1d(rows, WG) },
    )
}

/// maxpool2d_backward into `dx` (the gradient of the ReLU's output) and the ReLU's backward
/// of it into `dpre` (`pre` the ReLU's input), in one kernel: the same bits as the two
/// kernels. The windows must tile the input ([`tiles`]).
pub fn maxpool2d_relu_backward(
    ctx: &GpuContext,
    dy: &Tensor,
    indices: &Arc<GpuBuffer>,
    pre: &Tensor,
    dx: &Tensor,
    dpre: &Tensor,
    p: Pool2dParams,
) -> Result<Kernel> {
    const OP: &str = "maxpool2d_relu_backward";
    let params = check(OP, dx, dy, indices, p)?;
    check_fused(OP, pre, dx, p)?;
    check_fused(OP, dpre, dx, p)?;
    let rows = (params.planes * params.in_h) as usize;
    ctx.kernel(
        &KernelDesc::new(&SHADER, "maxpool_relu_backward"),
        &[
            ("params", Arg::Uniform(bytemuck::bytes_of(&params))),
            ("dy", dy.arg()),
            ("indices", Arg::Buffer(indices)),
            ("pre", pre.arg()),
            ("dx", dx.arg()),
            ("dpre", dpre.arg()),
        ],
        if rows == 0 { [0; 3] } else { grid_1d(rows, WG) },
    )
}
