//! Elementwise kernels against CPU references, on every storage.

mod common;

use common::{assert_close, ctx, ctx_native, ctx_packed, rand_vec};
use webgpu_amp::ops::elementwise;
use webgpu_amp::{DType, GpuContext, Storage, Tensor};

fn contexts() -> [(&'static str, &'static GpuContext); 2] {
    [("native", ctx_native()), ("packed", ctx_packed())]
}

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
            let f = elementwise::relu_forward(ctx, &x, &y).unwrap();
            let b = elementwise::relu_backward(ctx, &x, &g, &gx).unwrap();
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
