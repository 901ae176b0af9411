//! The convolutions on tensor cores (`shaders/conv_coop.wgsl`, implicit GEMMs on cooperative
//! matrices) against the f64 reference of tests/conv_pool.rs, with both fragment shapes
//! (`--tensor-cores on:8x8` and `on:16x16`): forward with and without bias, input gradient,
//! and weight gradient over one split and over many (deterministic split-K), with AMP's f32
//! weight gradients and f16 mode's f16 ones, accumulation and rounding to f16. Where the
//! adapter has no f16 cooperative matrices the tests say NOT CHECKED; CI runs them on Mesa 26's
//! lavapipe (`scripts/lavapipe-coop.sh`).

mod common;

use common::conv_ref::{ODD_SHAPES, Shape, check_conv, shape, upload};
use common::{bits, coop_ctx, every_tile_ctx};
use webgpu_amp::ops::Accumulate;
use webgpu_amp::ops::conv;
use webgpu_amp::{DType, GpuContext, Storage, Tensor};

/// The odd shapes of tests/conv_pool.rs (planes of odd length, channel counts off the tiles,
/// every kernel size, stride and padding), then layer shapes of mnist-cnn and simple-cnn. The
/// weight gradients of the larger ones split their pixels (about 512 workgroups' worth, at
/// least 256 pixels each).
fn shapes() -> Vec<Shape> {
    let mut v = ODD_SHAPES.to_vec();
    v.extend([
        shape(2, 1, (28, 28), 32, (3, 1, 1)),
        shape(2, 32, (14, 14), 70, (3, 1, 1)),
        shape(3, 3, (32, 32), 32, (3, 1, 1)),
    ]);
    v
}

#[test]
fn tensor_core_convolutions_match_f64_reference_with_both_fragment_shapes() {
    for edge in [8, 16] {
        let Some(ctx) = coop_ctx(edge, "the tensor-core convolutions against f64") else {
            continue;
        };
        for (i, s) in shapes().iter().enumerate() {
            // AMP's f32 weight gradient everywhere; f16 mode's f16 one and bias alternately.
            check_conv(
                ctx,
                s,
                Storage::F16,
                Storage::F32,
                i % 2 == 0,
                10 + i as u64,
            );
            if i % 3 == 0 {
                check_conv(ctx, s, Storage::F16, Storage::F16, true, 20 + i as u64);
            }
        }
        // The layer shapes again on the tiles a GPU's table takes: their forward products
        // span 512 pixels or more over a few channels (the wide tile).
        let every_tile = every_tile_ctx(ctx);
        for (i, s) in shapes().iter().rev().take(2).enumerate() {
            check_conv(
                &every_tile,
                s,
                Storage::F16,
                Storage::F32,
                true,
                40 + i as u64,
            );
        }
    }
}

/// The kernels built really are the cooperative ones (and f32 convolutions are not).
#[test]
fn f16_convolutions_run_on_tensor_cores_and_f32_ones_do_not() {
    for edge in [8, 16] {
        let Some(ctx) = coop_ctx(edge, "which convolution kernels tensor cores get") else {
            continue;
        };
        let s = shapes()[5];
        let p = s.params();
        for (dt, want) in [(DType::F16, true), (DType::F32, false)] {
            let x = Tensor::zeros(ctx, &s.x_shape(), dt);
            let w = Tensor::zeros(ctx, &s.w_shape(), dt);
            let y = Tensor::zeros(ctx, &s.y_shape(), dt);
            let dw = Tensor::zeros(ctx, &s.w_shape(), DType::F32);
            let mut labels = vec![
                conv::conv2d_forward(ctx, &x, &w, None, &y, p)
                    .unwrap()
                    .label,
                conv::conv2d_backward_input(ctx, &y, &w, &x, p)
                    .unwrap()
                    .label,
            ];
            let wg = conv::conv2d_backward_weight(ctx, &x, &y, &dw, p, Accumulate::Add, None);
            labels.push(wg.unwrap()[0].label.clone());
            for label in labels {
                assert_eq!(label.starts_with("conv_coop::"), want, "{dt:?}: {label}");
            }
        }
    }
}

/// `dw (+)= round(Σ x·dy)` of shape `s` with x and dy from f32 values (stored f16) and dw
/// starting at `dw0` (f32): the result, and how many kernels ran (2 when the pixels split).
fn weight_gradient(
    ctx: &GpuContext,
    s: &Shape,
    (x, dy, dw0): (&[f32], &[f32], &[f32]),
    accumulate: Accumulate,
    round_to: Option<DType>,
) -> (Vec<f32>, usize) {
    let x = upload(ctx, x, &s.x_shape(), Storage::F16);
    let dy = upload(ctx, dy, &s.y_shape(), Storage::F16);
    let dw = Tensor::from_f32(ctx, dw0, &s.w_shape(), DType::F32).unwrap();
    let p = s.params();
    let ks = conv::conv2d_backward_weight(ctx, &x, &dy, &dw, p, accumulate, round_to).unwrap();
    ctx.run(&ks.iter().collect::<Vec<_>>());
    (dw.read_f32(ctx).unwrap(), ks.len())
}

/// dw += round_f16(Σ x·dy) on tensor cores: unsplit, and split over 80 runs of pixels whose
/// partial sums are added in order and rounded once; the same bits on a second run.
#[test]
fn tensor_core_weight_gradient_rounds_accumulates_and_repeats_bit_for_bit() {
    use Accumulate::{Add, Overwrite};
    let f16 = Some(DType::F16);
    for edge in [8, 16] {
        let Some(ctx) = coop_ctx(edge, "tensor-core weight-gradient rounding") else {
            continue;
        };
        // 1 + 2^-12 rounds to 1 in f16; the accumulated 0.5 is kept.
        let s = shape(1, 1, (1, 2), 1, (1, 1, 0));
        let x = [1.0, 2f32.powi(-12)];
        let (dw, kernels) = weight_gradient(ctx, &s, (&x, &[1.0; 2], &[0.5]), Add, f16);
        assert_eq!((dw, kernels), (vec![1.5], 1), "{edge}x{edge}: one split");

        // 26 × 28 × 28 pixels of x = 17·2^-13, dy = 1: every partial sum is exact in f32,
        // the total 42.3 is not an f16 value and is rounded once, after the splits.
        let s = shape(26, 1, (28, 28), 1, (1, 1, 0));
        let n: usize = s.x_shape().iter().product();
        let v = 17.0 * 2f32.powi(-13);
        let data = (&vec![v; n][..], &vec![1.0; n][..], &[0.0][..]);
        let (dw, kernels) = weight_gradient(ctx, &s, data, Overwrite, f16);
        let exact = n as f32 * v;
        assert_ne!(DType::F16.round(exact), exact);
        assert_eq!(kernels, 2, "split pixels, then the ordered reduce");
        assert_eq!(dw, [DType::F16.round(exact)]);

        // Random data over many splits: two runs, the same bits.
        let s = shape(8, 3, (28, 28), 16, (3, 1, 1));
        let x = common::rand_vec(s.x_shape().iter().product(), 5);
        let dy = common::rand_vec(s.y_shape().iter().product(), 6);
        let dw0 = vec![0.0; s.w_shape().iter().product()];
        let run = || {
            let (dw, kernels) = weight_gradient(ctx, &s, (&x, &dy, &dw0), Overwrite, None);
            assert_eq!(kernels, 2);
            bits(&dw)
        };
        assert_eq!(run(), run(), "{edge}x{edge}: two runs differ");
    }
}
