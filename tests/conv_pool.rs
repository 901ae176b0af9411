//! conv2d and max-pool 2d kernels against f64 CPU references, on every storage (f32, native
//! f16, packed f16, bf16), forward and backward, with the backward references themselves
//! checked by finite differences. The weight gradient's accumulation, long reductions and
//! rounding are in `conv_pool/weight_gradient.rs`, max pool in `conv_pool/maxpool.rs`.

mod common;
#[path = "conv_pool/maxpool.rs"]
mod maxpool;
#[path = "conv_pool/weight_gradient.rs"]
mod weight_gradient;

use common::{ctx_native, ctx_packed, rand_vec};
use webgpu_amp::ops::Accumulate;
use webgpu_amp::ops::conv::{self, Conv2dParams};
use webgpu_amp::{DType, GpuContext, Storage, Tensor};

// ---- CPU references (f64) ------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
struct Shape {
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    o: usize,
    k: usize,
    stride: usize,
    pad: usize,
}

impl Shape {
    fn params(&self) -> Conv2dParams {
        Conv2dParams {
            stride: self.stride,
            padding: self.pad,
        }
    }
    fn out_hw(&self) -> (usize, usize) {
        conv::conv2d_output_hw(self.h, self.w, self.k, self.k, self.params()).unwrap()
    }
    fn x_shape(&self) -> [usize; 4] {
        [self.n, self.c, self.h, self.w]
    }
    fn w_shape(&self) -> [usize; 4] {
        [self.o, self.c, self.k, self.k]
    }
    fn y_shape(&self) -> [usize; 4] {
        let (ho, wo) = self.out_hw();
        [self.n, self.o, ho, wo]
    }
    /// Input coordinate read by output (oy, ox) at tap (ky, kx), if inside the input.
    fn tap(&self, oy: usize, ox: usize, ky: usize, kx: usize) -> Option<(usize, usize)> {
        let iy = (oy * self.stride + ky).checked_sub(self.pad)?;
        let ix = (ox * self.stride + kx).checked_sub(self.pad)?;
        (iy < self.h && ix < self.w).then_some((iy, ix))
    }
}

/// Visit every (y index, x index, w index) product of the convolution.
fn for_each_product(s: &Shape, mut f: impl FnMut(usize, usize, usize)) {
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
struct Reference {
    value: Vec<f64>,
    magnitude: Vec<f64>,
}

fn conv_forward_ref(s: &Shape, x: &[f32], w: &[f32], bias: Option<&[f32]>) -> Reference {
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

fn conv_backward_input_ref(s: &Shape, dy: &[f32], w: &[f32]) -> Reference {
    let nx: usize = s.x_shape().iter().product();
    let (mut value, mut magnitude) = (vec![0.0f64; nx], vec![0.0f64; nx]);
    for_each_product(s, |yi, xi, wi| {
        let t = dy[yi] as f64 * w[wi] as f64;
        value[xi] += t;
        magnitude[xi] += t.abs();
    });
    Reference { value, magnitude }
}

fn conv_backward_weight_ref(s: &Shape, x: &[f32], dy: &[f32]) -> Reference {
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
fn quantised(storage: Storage, n: usize, seed: u64) -> Vec<f32> {
    rand_vec(n, seed)
        .into_iter()
        .map(|v| storage.dtype().round(v))
        .collect()
}

/// Relative error of one rounding to the dtype of `storage`.
fn unit_roundoff(storage: Storage) -> f64 {
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
fn assert_matches(what: &str, got: &[f32], want: &Reference, out: Storage) {
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

// ---- GPU runs --------------------------------------------------------------------------------

/// The context a storage is tested on: packed f16 on the packed context, the rest native.
fn ctx_for(storage: Storage) -> &'static GpuContext {
    if storage == Storage::F16Packed {
        ctx_packed()
    } else {
        ctx_native()
    }
}

/// Native f16 becomes the context's f16 storage: on adapters without shader-f16 (GL, run with
/// WEBGPU_AMP_EXPECT_NO_F16=1) `ctx_native()` is the packed context, so the case runs packed.
fn upload(ctx: &GpuContext, data: &[f32], shape: &[usize], storage: Storage) -> Tensor {
    let storage = if storage == Storage::F16 {
        ctx.storage_for(DType::F16)
    } else {
        storage
    };
    Tensor::from_f32_with_storage(ctx, data, shape, storage).unwrap()
}

/// Run forward, backward-input and backward-weight of one shape with activations and weights
/// in `storage` and the weight gradient in `dw_storage`, and compare each to the reference.
fn check_conv(s: &Shape, storage: Storage, dw_storage: Storage, with_bias: bool, seed: u64) {
    let ctx = ctx_for(storage);
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

const fn shape(
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
const ODD_SHAPES: [Shape; 5] = [
    shape(2, 3, (7, 9), 5, (3, 1, 1)),
    shape(2, 3, (7, 9), 5, (1, 2, 0)),
    shape(2, 3, (7, 9), 5, (5, 2, 2)),
    shape(2, 3, (7, 9), 5, (3, 2, 0)),
    shape(1, 2, (5, 5), 3, (5, 1, 2)),
];

#[test]
fn conv_matches_reference_on_every_storage_and_odd_shapes() {
    for (i, s) in ODD_SHAPES.iter().enumerate() {
        for storage in Storage::ALL {
            // AMP's layout (f32 weight gradient) everywhere, the storage's own dtype too once.
            check_conv(s, storage, Storage::F32, i % 2 == 0, 10 + i as u64);
            if i == 0 && storage != Storage::F32 {
                check_conv(s, storage, storage, true, 20);
            }
        }
    }
}

#[test]
fn conv_matches_reference_on_mnist_cnn_shapes() {
    // mnist-cnn's two convolutions with a batch of 2, and a channel count that is not a
    // multiple of the 32-wide tiles.
    let shapes = [
        shape(2, 1, (28, 28), 32, (3, 1, 1)),
        shape(2, 32, (14, 14), 64, (3, 1, 1)),
        shape(1, 3, (32, 32), 6, (5, 1, 0)),
    ];
    for s in &shapes {
        for storage in Storage::ALL {
            check_conv(s, storage, Storage::F32, true, 40);
        }
    }
}

/// Finite differences of the f64 CPU forward against the CPU analytic gradients, then the GPU
/// gradients (f32) against the same analytic ones.
#[test]
fn conv_backward_matches_finite_differences() {
    for s in [
        shape(1, 2, (5, 4), 3, (3, 2, 1)),
        shape(2, 1, (4, 5), 2, (3, 1, 2)),
    ] {
        let nx: usize = s.x_shape().iter().product();
        let nw: usize = s.w_shape().iter().product();
        let ny: usize = s.y_shape().iter().product();
        let (xv, wv, bv, g) = (
            rand_vec(nx, 1),
            rand_vec(nw, 2),
            rand_vec(s.o, 3),
            rand_vec(ny, 4),
        );
        // L = sum(y * g): its gradient w.r.t. y is g.
        let loss = |x: &[f32], w: &[f32], b: &[f32]| -> f64 {
            conv_forward_ref(&s, x, w, Some(b))
                .value
                .iter()
                .zip(&g)
                .map(|(y, g)| y * *g as f64)
                .sum()
        };
        let eps = 1e-2f32; // L is linear in each argument: central differences are exact up to rounding
        let numeric = |which: usize, i: usize| -> f64 {
            let (mut xp, mut wp, mut bp) = (xv.clone(), wv.clone(), bv.clone());
            let (mut xm, mut wm, mut bm) = (xv.clone(), wv.clone(), bv.clone());
            match which {
                0 => {
                    xp[i] += eps;
                    xm[i] -= eps;
                }
                1 => {
                    wp[i] += eps;
                    wm[i] -= eps;
                }
                _ => {
                    bp[i] += eps;
                    bm[i] -= eps;
                }
            }
            (loss(&xp, &wp, &bp) - loss(&xm, &wm, &bm)) / (2.0 * eps as f64)
        };
        let dx = conv_backward_input_ref(&s, &g, &wv);
        let dw = conv_backward_weight_ref(&s, &xv, &g);
        for i in 0..nx {
            let d = numeric(0, i);
            assert!(
                (d - dx.value[i]).abs() < 1e-4,
                "{s:?} dx[{i}]: fd {d} vs {}",
                dx.value[i]
            );
        }
        for i in 0..nw {
            let d = numeric(1, i);
            assert!(
                (d - dw.value[i]).abs() < 1e-4,
                "{s:?} dw[{i}]: fd {d} vs {}",
                dw.value[i]
            );
        }
        // dL/dbias[o] = sum of g over channel o: the forward's bias term checked the same way.
        let plane = ny / (s.n * s.o);
        for o in 0..s.o {
            let d = numeric(2, o);
            let want: f64 = (0..ny)
                .filter(|i| (i / plane) % s.o == o)
                .map(|i| g[i] as f64)
                .sum();
            assert!(
                (d - want).abs() < 1e-4,
                "{s:?} dbias[{o}]: fd {d} vs {want}"
            );
        }

        let ctx = ctx_native();
        let dy = upload(ctx, &g, &s.y_shape(), Storage::F32);
        let w = upload(ctx, &wv, &s.w_shape(), Storage::F32);
        let x = upload(ctx, &xv, &s.x_shape(), Storage::F32);
        let gdx = Tensor::zeros_with_storage(ctx, &s.x_shape(), Storage::F32);
        let gdw = Tensor::zeros_with_storage(ctx, &s.w_shape(), Storage::F32);
        let k1 = conv::conv2d_backward_input(ctx, &dy, &w, &gdx, s.params()).unwrap();
        let k2 = conv::conv2d_backward_weight(
            ctx,
            &x,
            &dy,
            &gdw,
            s.params(),
            Accumulate::Overwrite,
            None,
        )
        .unwrap();
        let mut kernels = vec![&k1];
        kernels.extend(&k2);
        ctx.run(&kernels);
        assert_matches("gpu dx", &gdx.read_f32(ctx).unwrap(), &dx, Storage::F32);
        assert_matches("gpu dw", &gdw.read_f32(ctx).unwrap(), &dw, Storage::F32);
    }
}

#[test]
fn conv_rejects_bad_shapes() {
    let ctx = ctx_native();
    let x = Tensor::zeros_with_storage(ctx, &[1, 3, 8, 8], Storage::F32);
    let w = Tensor::zeros_with_storage(ctx, &[4, 2, 3, 3], Storage::F32); // wrong channels
    let y = Tensor::zeros_with_storage(ctx, &[1, 4, 6, 6], Storage::F32);
    let p = Conv2dParams {
        stride: 1,
        padding: 0,
    };
    common::expect_err(
        conv::conv2d_forward(ctx, &x, &w, None, &y, p),
        &["conv2d_forward", "expects 2 input channels, input has 3"],
    );
    let w = Tensor::zeros_with_storage(ctx, &[4, 3, 3, 3], Storage::F32);
    let bad_y = Tensor::zeros_with_storage(ctx, &[1, 4, 8, 8], Storage::F32);
    common::expect_err(
        conv::conv2d_forward(ctx, &x, &w, None, &bad_y, p),
        &["output is [1, 4, 8, 8], expected [1, 4, 6, 6]"],
    );
    let bad_bias = Tensor::zeros_with_storage(ctx, &[3], Storage::F32);
    common::expect_err(
        conv::conv2d_forward(ctx, &x, &w, Some(&bad_bias), &y, p),
        &["bias is [3], expected [4]"],
    );
    common::expect_err(
        conv::conv2d_output_hw(
            8,
            8,
            3,
            3,
            Conv2dParams {
                stride: 0,
                padding: 0,
            },
        ),
        &["stride must be at least 1"],
    );
    common::expect_err(
        conv::conv2d_output_hw(2, 2, 5, 5, p),
        &["kernel 5x5 is larger than the padded input 2x2"],
    );
    assert_eq!(
        conv::conv2d_output_hw(
            7,
            9,
            5,
            5,
            Conv2dParams {
                stride: 2,
                padding: 2
            }
        )
        .unwrap(),
        (4, 5)
    );
    assert!(conv::conv2d_forward(ctx, &x, &w, None, &y, p).is_ok());
}
