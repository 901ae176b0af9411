//! The convolution reference the conv tests share (tests/conv_pool.rs on every storage,
//! tests/conv_coop.rs on tensor cores): f64 forward and gradients with the magnitude bound
//! of any summation order, and one shape's three GPU kernels checked against them.

use webgpu_amp::ops::Accumulate;
use webgpu_amp::ops::conv::{self, Conv2dParams};
use webgpu_amp::{DType, GpuContext, Storage, Tensor};

use super::rand_vec;

#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub n: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub o: usize,
    pub k: usize,
    pub stride: usize,
    pub pad: usize,
}

impl Shape {
    pub fn params(&self) -> Conv2dParams {
        Conv2dParams {
            stride: self.stride,
            padding: self.pad,
        }
    }
    pub fn out_hw(&self) -> (usize, usize) {
        conv::conv2d_output_hw(self.h, self.w, self.k, self.k, self.params()).unwrap()
    }
    pub fn x_shape(&self) -> [usize; 4] {
        [self.n, self.c, self.h, self.w]
    }
    pub fn w_shape(&self) -> [usize; 4] {
        [self.o, self.c, self.k, self.k]
    }
    pub fn y_shape(&self) -> [usize; 4] {
        let (ho, wo) = self.out_hw();
        [self.n, self.o, ho, wo]
    }
    /// Input coordinate read by output (oy, ox) at tap (ky, kx), if inside the input.
    pub fn tap(&self, oy: usize, ox: usize, ky: usize, kx: usize) -> Option<(usize, usize)> {
        let iy = (oy * self.stride + ky).checked_sub(self.pad)?;
        let ix = (ox * self.stride + kx).checked_sub(self.pad)?;
        (iy < self.h && ix < self.w).then_some((iy, ix))
    }
}

/// Visit every (y index, x index, w index) product of the convolution.
pub fn for_each_product(s: &Shape, mut f: impl FnMut(usize, usize, usize)) {
    let (ho, wo) = s.out_hw();
    for n in 0..s.n {
        for o in 0..s.o {
            for oy in 0..ho {
                for ox in 0..wo {
                    let yi = ((n * s.o + o) * ho + oy) * wo + ox;
                    for c in 0..s.c {
                        for ky in 0..s.k {
                            for kx in 0..s.k {
                                if let Some((iy, ix)) = s.tap(oy, ox, ky, kx) {
                                    let xi = ((n * s.c + c) * s.h + iy) * s.w + ix;
                                    let wi = ((o * s.c + c) * s.k + ky) * s.k + kx;
                                    f(yi, xi, wi);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Reference value and the sum of |terms| (for a rounding-error bound) of each output.
pub struct Reference {
    pub value: Vec<f64>,
    pub magnitude: Vec<f64>,
}

pub fn conv_forward_ref(s: &Shape, x: &[f32], w: &[f32], bias: Option<&[f32]>) -> Reference {
    let ny: usize = s.y_shape().iter().product();
    let (mut value, mut magnitude) = (vec![0.0f64; ny], vec![0.0f64; ny]);
    for_each_product(s, |yi, xi, wi| {
        let t = x[xi] as f64 * w[wi] as f64;
        value[yi] += t;
        magnitude[yi] += t.abs();
    });
    if let Some(b) = bias {
        let plane = ny / (s.n * s.o);
        for (i, v) in value.iter_mut().enumerate() {
            let o = (i / plane) % s.o;
            *v += b[o] as f64;
            magnitude[i] += (b[o] as f64).abs();
        }
    }
    Reference { value, magnitude }
}

pub fn conv_backward_input_ref(s: &Shape, dy: &[f32], w: &[f32]) -> Reference {
    let nx: usize = s.x_shape().iter().product();
    let (mut value, mut magnitude) = (vec![0.0f64; nx], vec![0.0f64; nx]);
    for_each_product(s, |yi, xi, wi| {
        let t = dy[yi] as f64 * w[wi] as f64;
        value[xi] += t;
        magnitude[xi] += t.abs();
    });
    Reference { value, magnitude }
}

pub fn conv_backward_weight_ref(s: &Shape, x: &[f32], dy: &[f32]) -> Reference {
    let nw: usize = s.w_shape().iter().product();
    let (mut value, mut magnitude) = (vec![0.0f64; nw], vec![0.0f64; nw]);
    for_each_product(s, |yi, xi, wi| {
        let t = dy[yi] as f64 * x[xi] as f64;
        value[wi] += t;
        magnitude[wi] += t.abs();
    });
    Reference { value, magnitude }
}

/// Values quantised to a storage's dtype (the inputs every reference uses).
pub fn quantised(storage: Storage, n: usize, seed: u64) -> Vec<f32> {
    rand_vec(n, seed)
        .into_iter()
        .map(|v| storage.dtype().round(v))
        .collect()
}

/// Relative error of one rounding to the dtype of `storage`.
pub fn unit_roundoff(storage: Storage) -> f64 {
    match storage {
        Storage::F32 => 0.0,
        Storage::F16 | Storage::F16Packed => 1.0 / 2048.0,
        Storage::BF16 => 1.0 / 256.0,
        Storage::U32 => unreachable!("ids are not computed in"),
    }
}

/// got == want up to f32 accumulation error (bounded by the magnitude of the terms) plus one
/// rounding of the output to its storage.
#[track_caller]
pub fn assert_matches(what: &str, got: &[f32], want: &Reference, out: Storage) {
    assert_eq!(got.len(), want.value.len(), "{what}: length");
    for (i, &g) in got.iter().enumerate() {
        let (w, m) = (want.value[i], want.magnitude[i]);
        let tol = 1e-5 * m + unit_roundoff(out) * w.abs() * 1.01 + 1e-30;
        let err = (g as f64 - w).abs();
        assert!(
            err <= tol,
            "{what}: element {i} of {}: got {g}, want {w} (|err| {err:.3e} > tol {tol:.3e})",
            got.len()
        );
    }
}

/// Native f16 becomes the context's f16 storage: on adapters without shader-f16 (GL, run with
/// WEBGPU_AMP_EXPECT_NO_F16=1) `ctx_native()` is the packed context, so the case runs packed.
pub fn upload(ctx: &GpuContext, data: &[f32], shape: &[usize], storage: Storage) -> Tensor {
    let storage = if storage == Storage::F16 {
        ctx.storage_for(DType::F16)
    } else {
        storage
    };
    Tensor::from_f32_with_storage(ctx, data, shape, storage).unwrap()
}

/// Run forward, backward-input and backward-weight of one shape with activations and weights
/// in `storage` and the weight gradient in `dw_storage`, and compare each to the reference.
pub fn check_conv(
    ctx: &GpuContext,
    s: &Shape,
    storage: Storage,
    dw_storage: Storage,
    with_bias: bool,
    seed: u64,
) {
    let (nx, nw, ny) = (
        s.x_shape().iter().product::<usize>(),
        s.w_shape().iter().product::<usize>(),
        s.y_shape().iter().product::<usize>(),
    );
    let xv = quantised(storage, nx, seed);
    let wv = quantised(storage, nw, seed + 1);
    let bv = quantised(storage, s.o, seed + 2);
    let dyv = quantised(storage, ny, seed + 3);
    let x = upload(ctx, &xv, &s.x_shape(), storage);
    let w = upload(ctx, &wv, &s.w_shape(), storage);
    let b = upload(ctx, &bv, &[s.o], storage);
    let dy = upload(ctx, &dyv, &s.y_shape(), storage);
    // Outputs start as garbage: every element must be overwritten.
    let y = upload(ctx, &vec![7.0; ny], &s.y_shape(), storage);
    let dx = upload(ctx, &vec![7.0; nx], &s.x_shape(), storage);
    let dw = upload(ctx, &vec![7.0; nw], &s.w_shape(), dw_storage);
    let p = s.params();
    let fwd = conv::conv2d_forward(ctx, &x, &w, with_bias.then_some(&b), &y, p).unwrap();
    let bwd_in = conv::conv2d_backward_input(ctx, &dy, &w, &dx, p).unwrap();
    let bwd_w =
        conv::conv2d_backward_weight(ctx, &x, &dy, &dw, p, Accumulate::Overwrite, None).unwrap();
    let mut kernels = vec![&fwd, &bwd_in];
    kernels.extend(&bwd_w);
    ctx.run(&kernels);
    let label = format!("{s:?} {storage:?} dw {dw_storage:?} bias {with_bias}");
    assert_matches(
        &format!("forward {label}"),
        &y.read_f32(ctx).unwrap(),
        &conv_forward_ref(s, &xv, &wv, with_bias.then_some(&bv[..])),
        storage,
    );
    assert_matches(
        &format!("backward input {label}"),
        &dx.read_f32(ctx).unwrap(),
        &conv_backward_input_ref(s, &dyv, &wv),
        storage,
    );
    assert_matches(
        &format!("backward weight {label}"),
        &dw.read_f32(ctx).unwrap(),
        &conv_backward_weight_ref(s, &xv, &dyv),
        dw_storage,
    );
}

pub const fn shape(
    n: usize,
    c: usize,
    hw: (usize, usize),
    o: usize,
    ksp: (usize, usize, usize),
) -> Shape {
    Shape {
        n,
        c,
        h: hw.0,
        w: hw.1,
        o,
        k: ksp.0,
        stride: ksp.1,
        pad: ksp.2,
    }
}

/// Odd sizes everywhere (planes of odd length, so packed outputs straddle words), every
/// kernel size, stride and padding the brief lists.
pub const ODD_SHAPES: [Shape; 5] = [
    shape(2, 3, (7, 9), 5, (3, 1, 1)),
    shape(2, 3, (7, 9), 5, (1, 2, 0)),
    shape(2, 3, (7, 9), 5, (5, 2, 2)),
    shape(2, 3, (7, 9), 5, (3, 2, 0)),
    shape(1, 2, (5, 5), 3, (5, 1, 2)),
];
