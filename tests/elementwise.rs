//! Elementwise kernels against CPU references, on every storage.

mod common;

use common::values::{contexts, quantised, ulp, upload};
use common::{assert_close, ctx, ctx_packed, rand_vec};
use webgpu_amp::ops::{elementwise, unary};
use webgpu_amp::{DType, Storage, Tensor};

#[test]
fn cast_between_every_pair_of_dtypes_rounds_like_half() {
    for (name, ctx) in contexts() {
        for n in [1usize, 2, 7, 1000] {
            let mut data = rand_vec(n, 3);
            for v in data.iter_mut() {
                *v *= 1000.0;
            }
            for from in DType::ALL {
                for to in DType::ALL {
                    let x = Tensor::from_f32(ctx, &data, &[n], from).unwrap();
                    let y = Tensor::zeros(ctx, &[n], to);
                    let k = elementwise::cast(ctx, &x, &y).unwrap();
                    ctx.run(&[&k]);
                    let got = y.read_f32(ctx).unwrap();
                    let want: Vec<f32> = data.iter().map(|&v| to.round(from.round(v))).collect();
                    assert_close(
                        &format!("{name} cast {from}->{to} n={n}"),
                        &got,
                        &want,
                        0.0,
                        0.0,
                    );
                }
            }
        }
    }
}

#[test]
fn f16_overflow_becomes_inf_and_nan_survives_on_every_path() {
    let data = [
        65504.0f32,
        65519.0,
        65520.0,
        70000.0,
        -1e9,
        f32::INFINITY,
        f32::NAN,
        1e-8,
        3e-8,
        6e-8,
        -2.98e-8,
        5.96e-8,
    ];
    let n = data.len();
    for (name, ctx) in contexts() {
        let x = Tensor::from_f32(ctx, &data, &[n], DType::F32).unwrap();
        for to in [DType::F16, DType::BF16] {
            let y = Tensor::zeros(ctx, &[n], to);
            let k = elementwise::cast(ctx, &x, &y).unwrap();
            ctx.run(&[&k]);
            let got = y.read_f32(ctx).unwrap();
            for (i, (&g, &d)) in got.iter().zip(&data).enumerate() {
                let want = to.round(d);
                assert!(
                    g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
                    "{name} f32->{to} of {d}: got {g}, want {want} (element {i})"
                );
            }
        }
    }
}

/// A network's input is converted on the host as it is written (`Storage::encode`, in the
/// dtype its first layer computes in) where a cast kernel used to convert it: the same bits,
/// ties, subnormals, overflow and f32's quiet NaN included.
#[test]
fn the_host_encoding_of_a_batch_is_the_cast_kernel_bit_for_bit() {
    let mut data: Vec<f32> = rand_vec(997, 5)
        .iter()
        .enumerate()
        .map(|(i, v)| v * [1.0, 1e3, 1e-5, 6e4][i % 4])
        .collect();
    data.extend([
        1.0 + 2f32.powi(-11), // f16 ties, to even down and up
        1.0 + 3.0 * 2f32.powi(-11),
        1.0 + 2f32.powi(-8), // a bf16 tie
        65504.0,
        65519.99,
        65520.0,
        2f32.powi(-25), // half the smallest f16 subnormal
        3.0 * 2f32.powi(-26),
        1e-8,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        3.4e38,
    ]);
    let n = data.len();
    for (name, ctx) in contexts() {
        for storage in [ctx.storage_for(DType::F16), Storage::BF16] {
            let x = Tensor::from_f32_with_storage(ctx, &data, &[n], Storage::F32).unwrap();
            let cast = Tensor::zeros_with_storage(ctx, &[n], storage);
            ctx.run(&[&elementwise::cast(ctx, &x, &cast).unwrap()]);
            let host = Tensor::from_f32_with_storage(ctx, &data, &[n], storage).unwrap();
            let bytes = |t: &Tensor| ctx.read_bytes(t.buffer(), 0, 2 * n as u64).unwrap();
            let (got, want) = (bytes(&cast), bytes(&host));
            let first = got.iter().zip(&want).position(|(a, b)| a != b);
            assert!(
                first.is_none(),
                "{name} {storage:?}: the cast kernel and the host differ at element {} ({})",
                first.unwrap_or(0) / 2,
                data[first.unwrap_or(0) / 2]
            );
        }
    }
}

#[test]
fn relu_forward_and_backward() {
    for (name, ctx) in contexts() {
        for dtype in DType::ALL {
            let n = 33;
            let xv: Vec<f32> = rand_vec(n, 5).iter().map(|&v| dtype.round(v)).collect();
            let gv: Vec<f32> = rand_vec(n, 6).iter().map(|&v| dtype.round(v)).collect();
            let x = Tensor::from_f32(ctx, &xv, &[n], dtype).unwrap();
            let g = Tensor::from_f32(ctx, &gv, &[n], dtype).unwrap();
            let y = Tensor::zeros(ctx, &[n], dtype);
            let gx = Tensor::zeros(ctx, &[n], dtype);
            let f = unary::forward(ctx, &unary::RELU, &x, &y).unwrap();
            let b = unary::backward(ctx, &unary::RELU, &x, &g, &gx).unwrap();
            ctx.run(&[&f, &b]);
            let want_y: Vec<f32> = xv.iter().map(|&v| v.max(0.0)).collect();
            let want_g: Vec<f32> = xv
                .iter()
                .zip(&gv)
                .map(|(&v, &g)| if v > 0.0 { g } else { 0.0 })
                .collect();
            assert_close(
                &format!("{name} relu {dtype}"),
                &y.read_f32(ctx).unwrap(),
                &want_y,
                0.0,
                0.0,
            );
            assert_close(
                &format!("{name} relu' {dtype}"),
                &gx.read_f32(ctx).unwrap(),
                &want_g,
                0.0,
                0.0,
            );
        }
    }
}

#[test]
fn storage_follows_context() {
    assert_eq!(ctx_packed().storage_for(DType::F16), Storage::F16Packed);
    assert_eq!(ctx().storage_for(DType::F32), Storage::F32);
}

// ---- mul, scale, bias_add, GELU ---------------------------------------------------------------

/// Smallest spacing near zero (subnormal f16 steps; f32 and bf16 have none that matter here).
fn atol(dtype: DType) -> f32 {
    match dtype {
        DType::F16 => 2f32.powi(-24),
        _ => 1e-30,
    }
}

#[test]
fn mul_and_scale_match_cpu_on_every_storage() {
    for (name, ctx) in contexts() {
        for dtype in DType::ALL {
            for n in [1usize, 7, 1001] {
                let xv = quantised(n, 11, 3.0, dtype);
                let yv = quantised(n, 12, 3.0, dtype);
                let x = upload(ctx, &xv, &[n], dtype);
                let y = upload(ctx, &yv, &[n], dtype);
                let prod = Tensor::zeros(ctx, &[n], dtype);
                let scaled = Tensor::zeros(ctx, &[n], dtype);
                let k1 = elementwise::mul(ctx, &x, &y, &prod).unwrap();
                let k2 = elementwise::scale(ctx, &x, -0.37, &scaled).unwrap();
                ctx.run(&[&k1, &k2]);
                let want: Vec<f32> = xv.iter().zip(&yv).map(|(a, b)| a * b).collect();
                assert_close(
                    &format!("{name} mul {dtype} n={n}"),
                    &prod.read_f32(ctx).unwrap(),
                    &want,
                    atol(dtype),
                    ulp(dtype),
                );
                let want: Vec<f32> = xv.iter().map(|a| -0.37 * a).collect();
                assert_close(
                    &format!("{name} scale {dtype} n={n}"),
                    &scaled.read_f32(ctx).unwrap(),
                    &want,
                    atol(dtype),
                    ulp(dtype),
                );
            }
        }
    }
}

#[test]
fn mul_with_mixed_storages_promotes_to_f32_math() {
    let ctx = ctx_packed();
    let n = 7;
    let xv = quantised(n, 1, 2.0, DType::F16);
    let yv = rand_vec(n, 2);
    let x = upload(ctx, &xv, &[n], DType::F16);
    let y = upload(ctx, &yv, &[n], DType::F32);
    let out = Tensor::zeros(ctx, &[n], DType::F32);
    let k = elementwise::mul(ctx, &x, &y, &out).unwrap();
    ctx.run(&[&k]);
    let want: Vec<f32> = xv.iter().zip(&yv).map(|(a, b)| a * b).collect();
    assert_close("mixed mul", &out.read_f32(ctx).unwrap(), &want, 0.0, 0.0);
}

#[test]
fn bias_add_broadcasts_along_dim_1_for_linear_and_conv_shapes() {
    // Linear [N, F], conv [N, C, H, W] with odd sizes (pairs straddle channels), and [N, C, 1].
    let shapes: [&[usize]; 4] = [&[1, 1], &[7, 3], &[2, 3, 5, 7], &[3, 1001, 1]];
    for (name, ctx) in contexts() {
        for dtype in DType::ALL {
            for bias_dtype in [dtype, DType::F32] {
                for shape in shapes {
                    let n: usize = shape.iter().product();
                    let (c, inner) = (shape[1], shape[2..].iter().product::<usize>());
                    let xv = quantised(n, 21, 2.0, dtype);
                    let bv = quantised(c, 22, 2.0, bias_dtype);
                    let x = upload(ctx, &xv, shape, dtype);
                    let b = upload(ctx, &bv, &[c], bias_dtype);
                    let out = Tensor::zeros(ctx, shape, dtype);
                    let k = elementwise::bias_add(ctx, &x, &b, &out).unwrap();
                    ctx.run(&[&k]);
                    let want: Vec<f32> = (0..n).map(|i| xv[i] + bv[(i / inner) % c]).collect();
                    assert_close(
                        &format!("{name} bias_add x={dtype} b={bias_dtype} {shape:?}"),
                        &out.read_f32(ctx).unwrap(),
                        &want,
                        atol(dtype),
                        ulp(dtype),
                    );
                }
            }
        }
    }
}

#[test]
fn bias_add_rejects_a_bias_that_does_not_match_dim_1() {
    let ctx = ctx();
    let x = Tensor::zeros(ctx, &[4, 3], DType::F32);
    let out = Tensor::zeros(ctx, &[4, 3], DType::F32);
    for bad in [&[4usize][..], &[3, 1], &[12]] {
        let b = Tensor::zeros(ctx, bad, DType::F32);
        common::expect_err(
            elementwise::bias_add(ctx, &x, &b, &out),
            &["bias_add", "does not match dim 1"],
        );
    }
    let flat = Tensor::zeros(ctx, &[12], DType::F32);
    let b = Tensor::zeros(ctx, &[3], DType::F32);
    common::expect_err(
        elementwise::bias_add(ctx, &flat, &b, &flat),
        &["bias [3] does not match dim 1 of [12]"],
    );
}

const GELU_K0: f64 = 0.797_884_560_802_865_4; // sqrt(2 / pi)
const GELU_K1: f64 = 0.044715;

/// PyTorch's GELU(approximate='tanh'), in f64.
fn gelu_ref(x: f64) -> f64 {
    0.5 * x * (1.0 + (GELU_K0 * (x + GELU_K1 * x * x * x)).tanh())
}

/// Its analytic derivative, written from the tanh form (independently of the kernel's
/// sigmoid form).
fn gelu_grad_ref(x: f64) -> f64 {
    let t = (GELU_K0 * (x + GELU_K1 * x * x * x)).tanh();
    let du = GELU_K0 * (1.0 + 3.0 * GELU_K1 * x * x);
    0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du
}

#[test]
fn gelu_reference_derivative_matches_finite_differences() {
    for x in rand_vec(200, 31).iter().map(|&v| v as f64 * 6.0) {
        let h = 1e-5;
        let fd = (gelu_ref(x + h) - gelu_ref(x - h)) / (2.0 * h);
        let an = gelu_grad_ref(x);
        assert!(
            (fd - an).abs() < 1e-8,
            "gelu'({x}): fd {fd} vs analytic {an}"
        );
    }
}

#[test]
fn gelu_forward_and_backward_match_cpu_on_every_storage() {
    for (name, ctx) in contexts() {
        for dtype in DType::ALL {
            for n in [1usize, 7, 1001] {
                let mut xv = quantised(n, 41, 5.0, dtype);
                if n > 7 {
                    // Saturated tails: exactly x (or 0) and gradient 1 (or 0).
                    xv[3] = 12.0;
                    xv[4] = -12.0;
                    xv[5] = 300.0;
                    xv[6] = -300.0;
                }
                let gv = quantised(n, 42, 1.0, dtype);
                let x = upload(ctx, &xv, &[n], dtype);
                let g = upload(ctx, &gv, &[n], dtype);
                let y = Tensor::zeros(ctx, &[n], dtype);
                let gx = Tensor::zeros(ctx, &[n], dtype);
                let f = unary::forward(ctx, &unary::GELU_TANH, &x, &y).unwrap();
                let b = unary::backward(ctx, &unary::GELU_TANH, &x, &g, &gx).unwrap();
                ctx.run(&[&f, &b]);
                let want_y: Vec<f32> = xv.iter().map(|&v| gelu_ref(v as f64) as f32).collect();
                let want_g: Vec<f32> = xv
                    .iter()
                    .zip(&gv)
                    .map(|(&v, &g)| (gelu_ref_grad_times(v, g)) as f32)
                    .collect();
                // f32 math with exp: a few ulp of f32 on top of the output rounding.
                let rtol = ulp(dtype).max(4e-6);
                assert_close(
                    &format!("{name} gelu {dtype} n={n}"),
                    &y.read_f32(ctx).unwrap(),
                    &want_y,
                    atol(dtype).max(1e-7),
                    rtol,
                );
                assert_close(
                    &format!("{name} gelu' {dtype} n={n}"),
                    &gx.read_f32(ctx).unwrap(),
                    &want_g,
                    atol(dtype).max(1e-7),
                    rtol,
                );
            }
        }
    }
}

fn gelu_ref_grad_times(x: f32, g: f32) -> f64 {
    gelu_grad_ref(x as f64) * g as f64
}

#[test]
fn gelu_backward_turns_an_inf_or_nan_upstream_gradient_into_nan_where_the_derivative_is_0() {
    // 0 * inf = NaN (IEEE, and PyTorch): overflow upstream stays visible to the GradScaler.
    let xv = [-12.0f32, -12.0, -12.0, 12.0, 12.0];
    let gv = [f32::INFINITY, f32::NAN, 3.0, f32::NEG_INFINITY, 3.0];
    for (name, ctx) in contexts() {
        let x = upload(ctx, &xv, &[5], DType::F32);
        let g = upload(ctx, &gv, &[5], DType::F16);
        let gx = Tensor::zeros(ctx, &[5], DType::F16);
        let k = unary::backward(ctx, &unary::GELU_TANH, &x, &g, &gx).unwrap();
        ctx.run(&[&k]);
        let want = [f32::NAN, f32::NAN, 0.0, f32::NEG_INFINITY, 3.0];
        assert_close(
            &format!("{name} gelu' of inf/NaN grads"),
            &gx.read_f32(ctx).unwrap(),
            &want,
            0.0,
            0.0,
        );
    }
}

#[test]
fn relu_and_gelu_propagate_nan_and_handle_infinities() {
    let neg_nan = f32::from_bits(0xffc0_0000);
    let data = [
        f32::NAN,
        neg_nan,
        f32::INFINITY,
        f32::NEG_INFINITY,
        -0.0,
        0.0,
        -1.5,
        2.5,
    ];
    let n = data.len();
    for (name, ctx) in contexts() {
        for dtype in DType::ALL {
            let x = upload(ctx, &data, &[n], dtype);
            let ones = upload(ctx, &[1.0; 8], &[n], dtype);
            let outs: Vec<Tensor> = (0..4).map(|_| Tensor::zeros(ctx, &[n], dtype)).collect();
            let ks = [
                unary::forward(ctx, &unary::RELU, &x, &outs[0]).unwrap(),
                unary::backward(ctx, &unary::RELU, &x, &ones, &outs[1]).unwrap(),
                unary::forward(ctx, &unary::GELU_TANH, &x, &outs[2]).unwrap(),
                unary::backward(ctx, &unary::GELU_TANH, &x, &ones, &outs[3]).unwrap(),
            ];
            ctx.run(&ks.iter().collect::<Vec<_>>());
            let got: Vec<Vec<f32>> = outs.iter().map(|t| t.read_f32(ctx).unwrap()).collect();
            let what = |op: &str| format!("{name} {op} {dtype}");
            // relu: NaN stays NaN (either sign), inf stays, negatives and -0 become 0.
            let nan = f32::NAN;
            let relu_want = [nan, nan, f32::INFINITY, 0.0, 0.0, 0.0, 0.0, 2.5];
            assert_close(&what("relu"), &got[0], &relu_want, 0.0, 0.0);
            // PyTorch's threshold_backward on the NaN result passes the gradient.
            let relu_grad_want = [1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0];
            assert_close(&what("relu'"), &got[1], &relu_grad_want, 0.0, 0.0);
            // gelu as PyTorch's tanh formula evaluates it: NaN -> NaN, +inf -> inf,
            // -inf -> -inf * 0 = NaN; its derivative at +-inf has inf * 0 too: NaN.
            let gelu_want = [nan, nan, f32::INFINITY, nan, 0.0, 0.0];
            assert_close(&what("gelu"), &got[2][..6], &gelu_want, 0.0, 0.0);
            let gelu_grad_want = [nan, nan, nan, nan, 0.5, 0.5];
            assert_close(&what("gelu'"), &got[3][..6], &gelu_grad_want, 0.0, 0.0);
        }
    }
}
