//! conv2d and max-pool 2d kernels against f64 CPU references, on every storage (f32, native
//! f16, packed f16, bf16), forward and backward, with the backward references themselves
//! checked by finite differences. The weight gradient's accumulation, long reductions and
//! rounding are in `conv_pool/weight_gradient.rs`, max pool in `conv_pool/maxpool.rs`, ReLU fused into max pool in
//! `conv_pool/relu_pool.rs`.

mod common;
#[path = "conv_pool/maxpool.rs"]
mod maxpool;
#[path = "conv_pool/relu_pool.rs"]
mod relu_pool;
#[path = "conv_pool/weight_gradient.rs"]
mod weight_gradient;

use common::conv_ref::{
    self, ODD_SHAPES, Reference, Shape, assert_matches, conv_backward_input_ref,
    conv_backward_weight_ref, conv_forward_ref, quantised, shape, unit_roundoff, upload,
};
use common::{ctx_native, ctx_packed, rand_vec};
use webgpu_amp::ops::Accumulate;
use webgpu_amp::ops::conv::{self, Conv2dParams};
use webgpu_amp::{GpuContext, Storage, Tensor};

// ---- GPU runs --------------------------------------------------------------------------------

/// The context a storage is tested on: packed f16 on the packed context, the rest native.
fn ctx_for(storage: Storage) -> &'static GpuContext {
    if storage == Storage::F16Packed {
        ctx_packed()
    } else {
        ctx_native()
    }
}

/// [`conv_ref::check_conv`] on the context of `storage`.
fn check_conv(s: &Shape, storage: Storage, dw_storage: Storage, with_bias: bool, seed: u64) {
    conv_ref::check_conv(ctx_for(storage), s, storage, dw_storage, with_bias, seed);
}

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
