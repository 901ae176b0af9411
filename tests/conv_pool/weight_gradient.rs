//! The conv weight gradient: accumulation into an existing gradient, long reductions split
//! into runs, and the weight and bias gradients rounded to the forward dtype.

use webgpu_amp::ops::Accumulate;
use webgpu_amp::ops::conv;
use webgpu_amp::{DType, Storage, Tensor};

use super::common::ctx_native;
use super::{
    Reference, assert_matches, check_conv, conv_backward_weight_ref, ctx_for, quantised, shape,
    unit_roundoff, upload,
};

#[test]
fn conv_weight_gradient_accumulates() {
    // Odd tap count (C=1, 3x3: 9 taps per output channel), so dw words straddle channels.
    let s = shape(2, 1, (6, 7), 3, (3, 1, 1));
    let nw: usize = s.w_shape().iter().product();
    let ny: usize = s.y_shape().iter().product();
    let nx: usize = s.x_shape().iter().product();
    for (storage, dw_storage) in [
        (Storage::F32, Storage::F32),
        (Storage::F16, Storage::F32),
        (Storage::F16Packed, Storage::F16Packed),
        (Storage::BF16, Storage::BF16),
    ] {
        let ctx = ctx_for(storage);
        let xv = quantised(storage, nx, 5);
        let dyv = quantised(storage, ny, 6);
        let before = quantised(dw_storage, nw, 7);
        let x = upload(ctx, &xv, &s.x_shape(), storage);
        let dy = upload(ctx, &dyv, &s.y_shape(), storage);
        let dw = upload(ctx, &before, &s.w_shape(), dw_storage);
        let k = conv::conv2d_backward_weight(ctx, &x, &dy, &dw, s.params(), Accumulate::Add, None)
            .unwrap();
        // Twice: dw = before + 2 * grad.
        let twice: Vec<_> = k.iter().chain(&k).collect();
        ctx.run(&twice);
        let grad = conv_backward_weight_ref(&s, &xv, &dyv);
        let want = Reference {
            value: grad
                .value
                .iter()
                .zip(&before)
                .map(|(g, b)| *b as f64 + 2.0 * g)
                .collect(),
            magnitude: grad
                .magnitude
                .iter()
                .zip(&before)
                .map(|(m, b)| b.abs() as f64 + 2.0 * m)
                .collect(),
        };
        // Two roundings of the output (one per step) for low-precision dw.
        let got = dw.read_f32(ctx).unwrap();
        let twice = Reference {
            magnitude: want
                .magnitude
                .iter()
                .map(|m| m * (1.0 + 2e5 * unit_roundoff(dw_storage)))
                .collect(),
            value: want.value.clone(),
        };
        assert_matches(
            &format!("accumulate {storage:?}/{dw_storage:?}"),
            &got,
            &twice,
            dw_storage,
        );
    }
}

#[test]
fn conv_weight_gradient_is_right_over_long_reductions() {
    // conv1 of mnist-cnn at batch 26 and 48: the weight gradient's reduction runs over
    // batch × 28 × 28 = 20,384 and 37,632 output pixels (on lavapipe it was wrong from 20,160
    // on: now split into runs of at most 16,384, two and three splits here), with packed and
    // bf16 weight gradients (pairs of a word added in the reduce) and accumulation.
    for n in [26, 48] {
        let s = shape(n, 1, (28, 28), 32, (3, 1, 1));
        check_conv(&s, Storage::F32, Storage::F32, true, 41);
    }
    let s = shape(26, 1, (28, 28), 3, (3, 1, 1));
    check_conv(&s, Storage::F16Packed, Storage::F16Packed, false, 42);
    check_conv(&s, Storage::BF16, Storage::F32, false, 43);
}

#[test]
fn weight_and_bias_gradients_round_to_the_forward_dtype() {
    // A 1x1 convolution over one 1x2 image: dw = Σ x·dy, db = Σ dy, each rounded to f16
    // before it is added to the f32 gradient (PyTorch's f16 gradients under autocast); both
    // the unsplit path and (batch 26 of 28x28, on CPU adapters) the split-K reduce.
    let ctx = ctx_native();
    let s = shape(1, 1, (1, 2), 1, (1, 1, 0));
    let x = Tensor::from_f32(ctx, &[1.0, 2f32.powi(-12)], &s.x_shape(), DType::F32).unwrap();
    let dy = Tensor::from_f32(ctx, &[1.0, 1.0], &s.y_shape(), DType::F32).unwrap();
    let dw = Tensor::from_f32(ctx, &[0.5], &s.w_shape(), DType::F32).unwrap();
    let db = Tensor::from_f32(ctx, &[0.25], &[1], DType::F32).unwrap();
    let mut ks = conv::conv2d_backward_weight(
        ctx,
        &x,
        &dy,
        &dw,
        s.params(),
        Accumulate::Add,
        Some(DType::F16),
    )
    .unwrap();
    ks.push(
        webgpu_amp::ops::reduce::bias_grad(ctx, &dy, &db, Accumulate::Add, Some(DType::F16))
            .unwrap(),
    );
    ctx.run(&ks.iter().collect::<Vec<_>>());
    // 1 + 2^-12 rounds to 1 in f16; 2 is exact.
    assert_eq!(dw.read_f32(ctx).unwrap(), [1.5]);
    assert_eq!(db.read_f32(ctx).unwrap(), [2.25]);

    // Split-K: x all 2^-9 · (1 + 2^-4), dy all 1 over 26·784 pixels: the f32 sum is
    // 20,384 · 2^-9 · 1.0625 = 42.3 (not an f16 value); rounded once, after the splits.
    let s = shape(26, 1, (28, 28), 1, (1, 1, 0));
    let n: usize = s.x_shape().iter().product();
    let v = 2f32.powi(-9) * 1.0625;
    let x = Tensor::from_f32(ctx, &vec![v; n], &s.x_shape(), DType::F32).unwrap();
    let dy = Tensor::from_f32(ctx, &vec![1.0; n], &s.y_shape(), DType::F32).unwrap();
    let dw = Tensor::from_f32(ctx, &[0.0], &s.w_shape(), DType::F32).unwrap();
    let ks = conv::conv2d_backward_weight(
        ctx,
        &x,
        &dy,
        &dw,
        s.params(),
        Accumulate::Overwrite,
        Some(DType::F16),
    )
    .unwrap();
    ctx.run(&ks.iter().collect::<Vec<_>>());
    let exact = n as f32 * v;
    assert_eq!(dw.read_f32(ctx).unwrap(), [DType::F16.round(exact)]);
    assert_ne!(DType::F16.round(exact), exact);
}
