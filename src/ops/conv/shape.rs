//! Shape checks of a convolution: NCHW input, OIHW weight and output against each other.

use super::{Conv2dParams, conv2d_output_hw};
use crate::error::{Error, Result};
use crate::tensor::Tensor;

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
