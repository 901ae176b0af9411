//! Shape checks of a convolution: NCHW input, OIHW weight and output against each other; its
//! stride and padding ([`Conv2dParams`]) and output size.

use crate::error::{Error, Result};
use crate::tensor::Tensor;

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

/// Checked dimensions of one convolution.
pub(super) struct Dims {
    pub(super) n: usize,
    pub(super) c: usize,
    pub(super) h: usize,
    pub(super) w: usize,
    pub(super) o: usize,
    pub(super) kh: usize,
    pub(super) kw: usize,
    pub(super) ho: usize,
    pub(super) wo: usize,
}

pub(super) fn dims4(op: &'static str, what: &str, t: &Tensor) -> Result<[usize; 4]> {
    match *t.shape() {
        [a, b, c, d] => Ok([a, b, c, d]),
        ref s => Err(Error::shape(
            op,
            format!("{what} must be 4-D (NCHW), got {s:?}"),
        )),
    }
}

/// Check x `[N,C,H,W]`, weight `[O,C,kh,kw]` and the output `[N,O,Ho,Wo]` against each other.
pub(super) fn check(
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
