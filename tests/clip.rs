//! Gradient clipping on the GPU against PyTorch's `clip_grad_norm_`: the total norm, clipping
//! only above max_norm, after unscaling in one submit, and a NaN gradient poisoning all.

mod common;

use common::values::{download, upload_f32};
use common::{ctx, rand_vec};
use webgpu_amp::amp::{GradClipper, GradScaler, ScalerConfig};

fn cpu_norm(data: &[f32]) -> f64 {
    data.iter()
        .map(|&v| (v as f64) * (v as f64))
        .sum::<f64>()
        .sqrt()
}

#[test]
fn clip_total_norm_matches_cpu_and_clips_only_above_max_norm() {
    let ctx = ctx();
    for n in [1usize, 3, 1025, 100_003] {
        let data = rand_vec(n, 7 + n as u64);
        let norm = cpu_norm(&data);
        for (ratio, clips) in [(0.5f64, true), (2.0, false)] {
            let max_norm = (norm * ratio) as f32;
            let grads = upload_f32(ctx, &data);
            let clipper = GradClipper::new(ctx, &grads, n, max_norm).unwrap();
            clipper.clip(ctx);
            let total = clipper.total_norm(ctx).unwrap() as f64;
            assert!(
                ((total - norm) / norm).abs() < 2e-6,
                "n {n}: GPU norm {total}, CPU {norm}"
            );
            let got = download(ctx, &grads, n);
            if clips {
                let coef = max_norm / (total as f32 + 1e-6);
                for (i, (&g, &d)) in got.iter().zip(&data).enumerate() {
                    let want = d * coef;
                    assert!(
                        (g - want).abs() <= 1e-6 * want.abs() + 1e-12,
                        "n {n} element {i}: {g} vs {want}"
                    );
                }
                assert!(((cpu_norm(&got) - max_norm as f64) / max_norm as f64).abs() < 1e-5);
            } else {
                for (g, d) in got.iter().zip(&data) {
                    assert_eq!(g.to_bits(), d.to_bits(), "n {n}: below max_norm, untouched");
                }
            }
            // Deterministic: the same gradients give the same bits again.
            let again = upload_f32(ctx, &data);
            let c2 = GradClipper::new(ctx, &again, n, max_norm).unwrap();
            c2.clip(ctx);
            assert_eq!(
                c2.total_norm(ctx).unwrap().to_bits(),
                (total as f32).to_bits()
            );
        }
    }
}

#[test]
fn clipping_after_unscale_sees_unscaled_gradients() {
    let ctx = ctx();
    let n = 20_000;
    let data = rand_vec(n, 11);
    let norm = cpu_norm(&data);
    let scaled: Vec<f32> = data.iter().map(|v| v * 65536.0).collect();
    let grads = upload_f32(ctx, &scaled);
    let scaler = GradScaler::new(ctx, ScalerConfig::default()).unwrap();
    let clipper = GradClipper::new(ctx, &grads, n, 1.0).unwrap();
    // One submit, as a training step records it.
    let begin = scaler.begin_step_kernel(ctx).unwrap();
    let unscale = scaler.unscale_kernel(ctx, &grads, n).unwrap();
    let mut step = vec![&begin, &unscale];
    step.extend(clipper.kernels());
    ctx.run(&step);
    let total = clipper.total_norm(ctx).unwrap() as f64;
    assert!(((total - norm) / norm).abs() < 2e-6, "{total} vs {norm}");
    let got = download(ctx, &grads, n);
    assert!((cpu_norm(&got) - 1.0).abs() < 1e-5, "clipped to max_norm 1");
}

#[test]
fn clipping_a_nan_gradient_poisons_every_gradient_as_pytorch_does() {
    let ctx = ctx();
    let mut data = rand_vec(5000, 13);
    data[77] = f32::NAN;
    let grads = upload_f32(ctx, &data);
    let clipper = GradClipper::new(ctx, &grads, 5000, 1.0).unwrap();
    clipper.clip(ctx);
    assert!(clipper.total_norm(ctx).unwrap().is_nan());
    assert!(download(ctx, &grads, 5000).iter().all(|v| v.is_nan()));
    common::expect_err(
        GradClipper::new(ctx, &grads, 5000, 0.0),
        &["max_norm must be finite and > 0, got 0"],
    );
    common::expect_err(
        GradClipper::new(ctx, &grads, 5001, 1.0),
        &["buffer of 20000 bytes cannot hold 5001 f32"],
    );
}
