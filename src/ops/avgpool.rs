//! 2-D average pooling (`shaders/avgpool.wgsl`), forward and backward: `nn.AvgPool2d(kernel,
//! stride)` (no padding, floor mode, PyTorch's defaults; stride defaults to the kernel) and
//! `nn.AdaptiveAvgPool2d((Ho, Wo))` (PyTorch's bins: output row o averages input rows
//! `floor(o·H/Ho) .. ceil((o+1)·H/Ho)`, which overlap where H is not a multiple of Ho;
//! `AdaptiveAvgPool2d(1)` is global average pooling). Pooling runs in its input's dtype: math
//! in f32, x and y (dy and dx) in any storage. The backward gathers, so overlapping windows sum
//! in a fixed order without atomics.

use crate::error::{Error, Result};
use crate::gpu::{Arg, GpuContext, Kernel, KernelDesc, grid_1d};
use crate::shader::{Grid, ShaderDecl};
use crate::tensor::Tensor;

pub static SHADER: ShaderDecl = ShaderDecl {
    name: "avgpool",
    source: include_str!("../../shaders/avgpool.wgsl"),
    structs: &[Params::WGSL],
    consts: &[],
    // Input and output (and their gradients) in one storage, any.
    variants: |shader| {
        Grid::new()
            .each(&["x", "y", "dy", "dx"])
            .variants(shader, &[])
    },
};
const WG: u32 = 256;

/// Which average pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AvgPool {
    /// `nn.AvgPool2d(kernel, stride)`: windows of kernel × kernel every `stride`.
    Window { kernel: usize, stride: usize },
    /// `nn.AdaptiveAvgPool2d((height, width))`: that output size, PyTorch's bins.
    Adaptive { height: usize, width: usize },
}

impl AvgPool {
    /// `nn.AvgPool2d(kernel)`: stride = kernel.
    pub fn window(kernel: usize) -> Self {
        AvgPool::Window {
            kernel,
            stride: kernel,
        }
    }

    /// Output height and width for an `h` × `w` input.
    pub fn output_hw(&self, h: usize, w: usize) -> Result<(usize, usize)> {
        match *self {
            AvgPool::Window { kernel, stride } => {
                if kernel == 0 || stride == 0 {
                    return Err(Error::shape(
                        "avgpool2d",
                        format!("kernel and stride must be at least 1, got {self:?}"),
                    ));
                }
                if h < kernel || w < kernel {
                    return Err(Error::shape(
                        "avgpool2d",
                        format!("input {h}x{w} is smaller than the kernel {kernel}"),
                    ));
                }
                Ok(((h - kernel) / stride + 1, (w - kernel) / stride + 1))
            }
            AvgPool::Adaptive { height, width } => {
                if height == 0 || width == 0 {
                    return Err(Error::shape(
                        "adaptive_avgpool2d",
                        format!("output size {height}x{width} must be at least 1x1"),
                    ));
                }
                if h == 0 || w == 0 {
                    return Err(Error::shape(
                        "adaptive_avgpool2d",
                        format!("input {h}x{w} is empty"),
                    ));
                }
                Ok((height, width))
            }
        }
    }
}

crate::wgsl_struct! {
    struct Params {
        /// batch · channels
        planes: u32,
        in_h: u32,
        in_w: u32,
        out_h: u32,
        out_w: u32,
        kernel: u32,
        stride: u32,
        /// 1: adaptive bins; 0: kernel windows every stride
        adaptive: u32,
        /// elements written: the output's (forward) or the input's (backward)
        n: u32,
        _pad0: u32,
        _pad1: u32,
        _pad2: u32,
    }
}

/// Check x `[N, C, H, W]` against y `[N, C, Ho, Wo]`.
fn check(op: &'static str, x: &Tensor, y: &Tensor, pool: AvgPool) -> Result<Params> {
    let [n, c, h, w] = *x.shape() else {
        return Err(Error::shape(
            op,
            format!("input must be 4-D (NCHW), got {:?}", x.shape()),
        ));
    };
    let (ho, wo) = pool.output_hw(h, w)?;
    if y.shape() != [n, c, ho, wo] {
        return Err(Error::shape(
            op,
            format!(
                "output is {:?}, expected {:?} for input {:?} and {pool:?}",
                y.shape(),
                [n, c, ho, wo],
                x.shape()
            ),
        ));
    }
    if x.storage() != y.storage() {
        return Err(Error::shape(
            op,
            format!(
                "input and output storages differ ({} and {})",
                x.storage().name(),
                y.storage().name()
            ),
        ));
    }
    // The adaptive bins multiply an index by a size in u32.
    if u32::try_from(x.numel().max(y.numel()) * h.max(w).max(ho).max(wo)).is_err() {
        return Err(Error::shape(op, "tensor too large for 32-bit indexing"));
    }
    let (kernel, stride, adaptive) = match pool {
        AvgPool::Window { kernel, stride } => (kernel, stride, 0),
        AvgPool::Adaptive { .. } => (0, 0, 1),
    };
    Ok(Params {
        planes: (n * c) as u32,
        in_h: h as u32,
        in_w: w as u32,
        out_h: ho as u32,
        out_w: wo as u32,
        kernel: kernel as u32,
        stride: stride as u32,
        adaptive,
        ..Default::default()
    })
}

/// `y [N, C, Ho, Wo]` = the mean of each window (bin) of `x [N, C, H, W]`.
pub fn forward(ctx: &GpuContext, x: &Tensor, y: &Tensor, pool: AvgPool) -> Result<Kernel> {
    let params = Params {
        n: y.numel() as u32,
        ..check("avgpool2d_forward", x, y, pool)?
    };
    ctx.kernel(
        &KernelDesc::new(&SHADER, "avgpool_forward"),
        &[
            ("params", Arg::Uniform(bytemuck::bytes_of(&params))),
            ("x", x.arg()),
            ("y", y.arg()),
        ],
        grid_1d(y.numel().div_ceil(2), WG),
    )
}

/// `dx` (overwritten, the input's shape) = Σ `dy / divisor` over the windows holding each
/// input element (zero for the rows and columns floor mode drops).
pub fn backward(ctx: &GpuContext, dy: &Tensor, dx: &Tensor, pool: AvgPool) -> Result<Kernel> {
    let params = Params {
        n: dx.numel() as u32,
        ..check("avgpool2d_backward", dx, dy, pool)?
    };
    ctx.kernel(
        &KernelDesc::new(&SHADER, "avgpool_backward"),
        &[
            ("params", Arg::Uniform(bytemuck::bytes_of(&params))),
            ("dy", dy.arg()),
            ("dx", dx.arg()),
        ],
        grid_1d(dx.numel().div_ceil(2), WG),
    )
}
