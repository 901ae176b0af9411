//! Gradient clipping on the GPU against PyTorch's `clip_grad_norm_`: the total norm, clipping
//! only above max_norm, after unscaling in one submit, a NaN gradient poisoning all, and the
//! coefficient applied inside the optimizer's step (`Optimizer::clip_first`) giving the
//! bits of the separate apply kernel.

mod common;

use common::values::{download, upload_f32};
use common::{ctx, rand_vec};
use webgpu_amp::amp::{GradClipper, GradScaler, ScalerConfig};
use webgpu_amp::gpu::Kernel;
use webgpu_amp::optim::{Optimizer, OptimizerConfig};

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

/// Every optimizer path that reads a gradient: SGD plain and with the L2 term, with
/// (Nesterov) momentum, Adam with the L2 term, AdamW with parameter groups.
fn clipped_configs() -> Vec<(OptimizerConfig, bool)> {
    let sgd = |momentum, nesterov, weight_decay| OptimizerConfig::Sgd {
        lr: 0.05,
        momentum,
        dampening: 0.0,
        nesterov,
        weight_decay,
    };
    let adam = OptimizerConfig::Adam {
        lr: 3e-2,
        beta1: 0.8,
        beta2: 0.99,
        eps: 1e-6,
        weight_decay: 1e-2,
    };
    vec![
        (sgd(0.0, false, 0.0), false),
        (sgd(0.0, false, 1e-2), false),
        (sgd(0.9, true, 1e-4), false),
        (adam, false),
        (OptimizerConfig::adamw(1e-2), true),
    ]
}

#[test]
fn clipping_inside_the_optimizer_step_gives_the_apply_kernels_bits() {
    let ctx = ctx();
    let n = 5003; // several workgroups and a partial one
    let scaler = GradScaler::new(
        ctx,
        ScalerConfig {
            enabled: false,
            ..ScalerConfig::default()
        },
    )
    .unwrap();
    let state = scaler.state_buffer();
    for (c, (config, grouped)) in clipped_configs().into_iter().enumerate() {
        let p0 = rand_vec(n, 300 + c as u64);
        let decay: Vec<bool> = (0..n).map(|i| i % 3 != 0).collect();
        let decay = grouped.then_some(&decay[..]);
        // Separate: clip_partial, clip_reduce, clip_apply, then the step.
        let (params_a, grads_a) = (upload_f32(ctx, &p0), upload_f32(ctx, &vec![0.0; n]));
        let opt_a = Optimizer::new_grouped(ctx, config, &params_a, &grads_a, n, state, decay);
        let opt_a = opt_a.unwrap();
        let clip_a = GradClipper::new(ctx, &grads_a, n, 1.0).unwrap();
        // Folded: clip_partial, clip_reduce, then the step applying the coefficient.
        let (params_b, grads_b) = (upload_f32(ctx, &p0), upload_f32(ctx, &vec![0.0; n]));
        let clip_b = GradClipper::new(ctx, &grads_b, n, 1.0).unwrap();
        let opt_b = Optimizer::new_grouped(ctx, config, &params_b, &grads_b, n, state, decay);
        let opt_b = opt_b.unwrap().clip_first(ctx, &clip_b).unwrap();
        assert!(opt_b.clips() && !opt_a.clips());
        for step in 0..4u64 {
            // Norms far above max_norm 1 (clipped), and once below it (coefficient 1).
            let scale = if step == 2 { 1e-3 } else { 1.0 + step as f32 };
            let g: Vec<f32> = rand_vec(n, 900 + 10 * c as u64 + step)
                .iter()
                .map(|v| v * scale)
                .collect();
            common::values::write_f32(ctx, &grads_a, &g);
            common::values::write_f32(ctx, &grads_b, &g);
            let mut separate: Vec<&Kernel> = clip_a.kernels().iter().collect();
            separate.extend(opt_a.step_kernels());
            ctx.run(&separate);
            let mut folded: Vec<&Kernel> = clip_b.norm_kernels().iter().collect();
            folded.extend(opt_b.step_kernels());
            ctx.run(&folded);
            let what = format!("{config:?} step {step}");
            let clipped = download(ctx, &grads_a, n);
            assert_eq!(clipped != g, step != 2, "{what}: clipping applied");
            let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
            assert_eq!(
                bits(download(ctx, &params_a, n)),
                bits(download(ctx, &params_b, n)),
                "{what}: parameters"
            );
            assert_eq!(download(ctx, &grads_b, n), g, "{what}: gradients kept");
            let total = |c: &GradClipper| c.total_norm(ctx).unwrap().to_bits();
            assert_eq!(total(&clip_a), total(&clip_b), "{what}: total norm");
        }
        let (a, b) = (opt_a.state(ctx).unwrap(), opt_b.state(ctx).unwrap());
        assert_eq!(a, b, "{config:?}: optimizer state");
    }
}

#[test]
fn a_clipper_of_other_gradients_is_refused() {
    let ctx = ctx();
    let scaler = GradScaler::new(ctx, ScalerConfig::default()).unwrap();
    let (params, grads) = (upload_f32(ctx, &[0.0; 64]), upload_f32(ctx, &[0.0; 64]));
    let config = OptimizerConfig::adamw(1e-3);
    let opt = Optimizer::new_grouped(
        ctx,
        config,
        &params,
        &grads,
        64,
        scaler.state_buffer(),
        None,
    );
    let clipper = GradClipper::new(ctx, &grads, 32, 1.0).unwrap();
    assert!(opt.unwrap().clip_first(ctx, &clipper).is_err());
}
