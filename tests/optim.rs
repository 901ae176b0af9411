//! Fused SGD, Adam and AdamW against a CPU re-implementation of torch.optim's single-tensor
//! formulas (f32 tensors, f64 Python-float scalars), skipped steps, state and checkpoints.
//!
//! Tolerance: parameters within 4 f32 ulp of the reference or 1e-6 of `lr * steps` (the GPU
//! computes the bias corrections `1 - beta^step` in f32 where PyTorch uses f64, and WGSL
//! allows a few ulp in division and sqrt); moments within 2e-6 relative. SGD comes out
//! bit-identical.

mod common;
#[path = "optim/reference.rs"]
mod reference;

use common::values::{download, ulp_of, upload_f32, write_f32};
use common::{ctx, rand_vec};
use reference::Reference;
use webgpu_amp::GpuContext;
use webgpu_amp::amp::{GradScaler, ScalerConfig};
use webgpu_amp::gpu::GpuBuffer;
use webgpu_amp::optim::{Optimizer, OptimizerConfig, OptimizerState};

fn raw(ctx: &GpuContext, b: &GpuBuffer) -> Vec<u8> {
    ctx.read_bytes(b, 0, b.size()).unwrap()
}

/// Parameters after `steps` steps of learning rate at most `lr`: within 4 ulp of the
/// reference, or within 1e-6 of the total movement bound `lr * steps` (a parameter near zero
/// has tiny ulps, while the GPU's f32 bias corrections are only a few ulp of the update).
/// Returns the worst error in units of `lr * steps`.
#[track_caller]
fn assert_params(what: &str, got: &[f32], want: &[f32], lr: f32, steps: usize) -> f32 {
    let scale = lr * steps as f32;
    let mut worst = 0.0f32;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let err = (g - w).abs();
        assert!(
            err <= 4.0 * ulp_of(w) + 1e-6 * scale,
            "{what}: element {i}: got {g}, want {w} ({} ulp)",
            err / ulp_of(w)
        );
        worst = worst.max(err / scale);
    }
    worst
}

#[track_caller]
fn assert_rel(what: &str, got: &[f32], want: &[f32], rtol: f32) {
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let tol = rtol * w.abs() + 1e-30;
        assert!(
            (g - w).abs() <= tol,
            "{what}: element {i}: got {g}, want {w}"
        );
    }
}

fn configs() -> Vec<OptimizerConfig> {
    vec![
        OptimizerConfig::sgd(0.1),
        OptimizerConfig::Sgd {
            lr: 0.05,
            momentum: 0.9,
            dampening: 0.0,
            nesterov: false,
            weight_decay: 1e-2,
        },
        OptimizerConfig::Sgd {
            lr: 0.05,
            momentum: 0.9,
            dampening: 0.1,
            nesterov: false,
            weight_decay: 0.0,
        },
        OptimizerConfig::Sgd {
            lr: 0.05,
            momentum: 0.8,
            dampening: 0.0,
            nesterov: true,
            weight_decay: 1e-4,
        },
        OptimizerConfig::adam(1e-2),
        OptimizerConfig::Adam {
            lr: 3e-2,
            beta1: 0.8,
            beta2: 0.99,
            eps: 1e-6,
            weight_decay: 1e-2,
        },
        OptimizerConfig::Adam {
            lr: 1e-2,
            beta1: 0.0,
            beta2: 0.9999,
            eps: 1e-8,
            weight_decay: 0.0,
        },
        OptimizerConfig::adamw(1e-2),
        OptimizerConfig::AdamW {
            lr: 2e-2,
            beta1: 0.5,
            beta2: 0.9,
            eps: 1e-7,
            weight_decay: 0.1,
        },
    ]
}

fn disabled_scaler(ctx: &GpuContext) -> GradScaler {
    GradScaler::new(
        ctx,
        ScalerConfig {
            enabled: false,
            ..ScalerConfig::default()
        },
    )
    .unwrap()
}

#[test]
fn every_optimizer_matches_pytorchs_formulas_over_ten_steps() {
    let ctx = ctx();
    let n = 5003; // several workgroups and a partial one
    let scaler = disabled_scaler(ctx);
    for (c, config) in configs().into_iter().enumerate() {
        let p0 = rand_vec(n, 100 + c as u64);
        let params = upload_f32(ctx, &p0);
        let grads = upload_f32(ctx, &vec![0.0; n]);
        let opt =
            Optimizer::new_grouped(ctx, config, &params, &grads, n, scaler.state_buffer(), None)
                .unwrap();
        let mut reference = Reference::new(config, &p0);
        let mut worst = 0.0f32;
        for step in 0..10u64 {
            // Gradients of varied magnitude, some exactly zero.
            let mut g: Vec<f32> = rand_vec(n, 1000 * c as u64 + step)
                .iter()
                .map(|v| v * (1.0 + step as f32))
                .collect();
            g[7] = 0.0;
            if step == 6 {
                // A learning-rate change takes effect at the next step.
                let lr = config.lr() * 0.5;
                opt.set_lr(ctx, lr).unwrap();
                reference.set_lr(lr);
            }
            write_f32(ctx, &grads, &g);
            ctx.run(&opt.step_kernels());
            reference.step(&g);
            let got = download(ctx, &params, n);
            worst = worst.max(assert_params(
                &format!("{config:?} step {step} params"),
                &got,
                &reference.p,
                config.lr(),
                step as usize + 1,
            ));
        }
        let state = opt.state(ctx).unwrap();
        assert_eq!(state.step, 10, "{config:?}");
        match config {
            OptimizerConfig::Sgd { momentum: 0.0, .. } => {
                assert_eq!(
                    state,
                    OptimizerState {
                        step: 10,
                        ..Default::default()
                    }
                );
            }
            OptimizerConfig::Sgd { .. } => {
                let buf = state.momentum_buffer.as_ref().expect("momentum_buffer");
                assert_rel("momentum_buffer", buf, &reference.buf, 2e-6);
            }
            _ => {
                assert_rel(
                    "exp_avg",
                    state.exp_avg.as_ref().unwrap(),
                    &reference.m,
                    2e-6,
                );
                assert_rel(
                    "exp_avg_sq",
                    state.exp_avg_sq.as_ref().unwrap(),
                    &reference.v,
                    2e-6,
                );
            }
        }
        println!("{config:?}: worst parameter error {worst:e} x lr x steps");
    }
}

/// The bias corrections at large step counts (where 1 - beta^step leaves the series branch
/// and approaches 1) stay within the same tolerance.
#[test]
fn adam_bias_correction_is_accurate_at_every_step_count() {
    let ctx = ctx();
    let n = 1000;
    let scaler = disabled_scaler(ctx);
    for config in [
        OptimizerConfig::adam(1e-2),
        OptimizerConfig::Adam {
            lr: 1e-2,
            beta1: 0.9,
            beta2: 0.9999,
            eps: 1e-8,
            weight_decay: 0.0,
        },
    ] {
        for step in [
            1u32, 2, 7, 21, 22, 100, 999, 1000, 1001, 5000, 100_000, 3_000_000,
        ] {
            let p0 = rand_vec(n, 5);
            let m0: Vec<f32> = rand_vec(n, 6).iter().map(|v| v * 0.1).collect();
            let v0: Vec<f32> = rand_vec(n, 7).iter().map(|v| v * v * 0.01).collect();
            let g = rand_vec(n, 8);
            let params = upload_f32(ctx, &p0);
            let grads = upload_f32(ctx, &g);
            let mut opt = Optimizer::new_grouped(
                ctx,
                config,
                &params,
                &grads,
                n,
                scaler.state_buffer(),
                None,
            )
            .unwrap();
            opt.load_state(
                ctx,
                &OptimizerState {
                    step,
                    exp_avg: Some(m0.clone()),
                    exp_avg_sq: Some(v0.clone()),
                    ..Default::default()
                },
            )
            .unwrap();
            let mut reference = Reference::new(config, &p0);
            reference.step = step;
            reference.m = m0;
            reference.v = v0;
            ctx.run(&opt.step_kernels());
            reference.step(&g);
            let got = download(ctx, &params, n);
            // Look at the update itself (p - p0), where an error in the bias correction shows.
            let upd: Vec<f32> = got.iter().zip(&p0).map(|(a, b)| a - b).collect();
            let want: Vec<f32> = reference.p.iter().zip(&p0).map(|(a, b)| a - b).collect();
            for (i, (u, w)) in upd.iter().zip(&want).enumerate() {
                // p - p0 is exact in f32 here, so a relative bound on it is meaningful up to
                // the ulps of p.
                let tol = 3e-6 * w.abs() + 4.0 * ulp_of(p0[i]);
                assert!(
                    (u - w).abs() <= tol,
                    "{config:?} step {step}: element {i}: update {u}, want {w}"
                );
            }
            assert_eq!(opt.state(ctx).unwrap().step, step + 1);
        }
    }
}

#[test]
fn a_step_with_found_inf_changes_nothing_and_the_next_clean_step_applies() {
    let ctx = ctx();
    let n = 3001;
    for (c, config) in configs().into_iter().enumerate() {
        let p0 = rand_vec(n, 200 + c as u64);
        let params = upload_f32(ctx, &p0);
        let grads = upload_f32(ctx, &vec![0.0; n]);
        let mut scaler = GradScaler::new(
            ctx,
            ScalerConfig {
                init_scale: 1024.0,
                ..ScalerConfig::default()
            },
        )
        .unwrap();
        let opt =
            Optimizer::new_grouped(ctx, config, &params, &grads, n, scaler.state_buffer(), None)
                .unwrap();
        let mut reference = Reference::new(config, &p0);
        let snapshot = |ctx: &GpuContext| {
            let mut bufs = vec![raw(ctx, &params)];
            bufs.extend(opt.counters_buffers().into_iter().map(|b| raw(ctx, b)));
            bufs.extend(opt.moment_buffers().iter().map(|(_, b)| raw(ctx, b)));
            bufs
        };
        for (step, inf) in [false, false, true, false, true, true, false]
            .into_iter()
            .enumerate()
        {
            let g = rand_vec(n, 300 + step as u64);
            // The loss was scaled: gradients arrive multiplied by the current scale.
            let scale = scaler.get_scale(ctx).unwrap();
            let mut scaled: Vec<f32> = g.iter().map(|v| v * scale).collect();
            if inf {
                scaled[n / 3] = f32::INFINITY;
            }
            write_f32(ctx, &grads, &scaled);
            let before = snapshot(ctx);
            scaler.unscale(ctx, &grads, n).unwrap();
            ctx.run(&opt.step_kernels());
            scaler.update(ctx).unwrap();
            if inf {
                let after = snapshot(ctx);
                for (k, (a, b)) in after.iter().zip(&before).enumerate() {
                    assert!(
                        a == b,
                        "{config:?} step {step}: buffer {k} changed on a skipped step"
                    );
                }
            } else {
                reference.step(&g);
                let got = download(ctx, &params, n);
                assert_params(
                    &format!("{config:?} step {step}"),
                    &got,
                    &reference.p,
                    config.lr(),
                    step + 1,
                );
            }
        }
        assert_eq!(
            opt.state(ctx).unwrap().step,
            4,
            "{config:?}: only applied steps count"
        );
    }
}

#[test]
fn state_round_trips_and_training_continues_identically() {
    let ctx = ctx();
    let n = 2500;
    let scaler = disabled_scaler(ctx);
    for config in [
        OptimizerConfig::Sgd {
            lr: 0.1,
            momentum: 0.9,
            dampening: 0.0,
            nesterov: true,
            weight_decay: 0.0,
        },
        OptimizerConfig::adamw(1e-2),
    ] {
        let p0 = rand_vec(n, 9);
        let params = upload_f32(ctx, &p0);
        let grads = upload_f32(ctx, &rand_vec(n, 10));
        let opt =
            Optimizer::new_grouped(ctx, config, &params, &grads, n, scaler.state_buffer(), None)
                .unwrap();
        let fresh = opt.state(ctx).unwrap();
        assert_eq!(
            fresh,
            OptimizerState::default(),
            "empty before the first step"
        );
        for _ in 0..3 {
            ctx.run(&opt.step_kernels());
        }
        let state = opt.state(ctx).unwrap();
        let json = serde_json::to_value(&state).unwrap();
        let keys: Vec<&String> = json.as_object().unwrap().keys().collect();
        match config {
            OptimizerConfig::Sgd { .. } => assert_eq!(keys, ["momentum_buffer", "step"]),
            _ => assert_eq!(keys, ["exp_avg", "exp_avg_sq", "step"]),
        }
        let state: OptimizerState = serde_json::from_value(json).unwrap();

        // A second optimizer on a copy of the parameters, restored from the state.
        let params2 = upload_f32(ctx, &download(ctx, &params, n));
        let mut opt2 = Optimizer::new_grouped(
            ctx,
            config,
            &params2,
            &grads,
            n,
            scaler.state_buffer(),
            None,
        )
        .unwrap();
        opt2.load_state(ctx, &state).unwrap();
        for _ in 0..2 {
            ctx.run(&[opt.step_kernels(), opt2.step_kernels()].concat());
        }
        assert_eq!(raw(ctx, &params), raw(ctx, &params2), "{config:?}");
        assert_eq!(opt2.state(ctx).unwrap(), opt.state(ctx).unwrap());

        // Wrong sizes and foreign buffers are refused.
        let mut bad = state.clone();
        bad.step = 1;
        bad.exp_avg = Some(vec![0.0; 3]);
        common::expect_err(opt2.load_state(ctx, &bad), &["state: `exp_avg`"]);
    }
}

#[test]
fn invalid_configs_and_buffers_are_rejected() {
    let ctx = ctx();
    let bad = [
        OptimizerConfig::sgd(-1.0),
        OptimizerConfig::sgd(f32::NAN),
        OptimizerConfig::Sgd {
            lr: 0.1,
            momentum: 0.9,
            dampening: 0.1,
            nesterov: true,
            weight_decay: 0.0,
        },
        OptimizerConfig::Sgd {
            lr: 0.1,
            momentum: 0.0,
            dampening: 0.0,
            nesterov: true,
            weight_decay: 0.0,
        },
        OptimizerConfig::Adam {
            lr: 1e-3,
            beta1: 1.0,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
        },
        OptimizerConfig::AdamW {
            lr: 1e-3,
            beta1: 0.9,
            beta2: -0.1,
            eps: 1e-8,
            weight_decay: 0.0,
        },
        OptimizerConfig::Adam {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: -1e-8,
            weight_decay: 0.0,
        },
    ];
    for c in bad {
        let m = common::expect_err(c.validate(), &[&format!("{}: ", c.name())]);
        assert!(m.contains("Invalid") || m.contains("Nesterov"), "{m}");
    }
    let nesterov_err = bad[2].validate().unwrap_err().to_string();
    assert!(nesterov_err.contains("Nesterov"), "{nesterov_err}");
    for c in configs() {
        c.validate().unwrap();
    }
    let scaler = disabled_scaler(ctx);
    let small = upload_f32(ctx, &[0.0; 10]);
    let big = upload_f32(ctx, &[0.0; 100]);
    let adam = OptimizerConfig::adam(1e-3);
    common::expect_err(
        Optimizer::new_grouped(ctx, adam, &small, &big, 100, scaler.state_buffer(), None),
        &["buffer of 40 bytes cannot hold 100 f32"],
    );
    common::expect_err(
        Optimizer::new_grouped(ctx, adam, &big, &big, 0, scaler.state_buffer(), None),
        &["no parameters"],
    );
    let opt =
        Optimizer::new_grouped(ctx, adam, &big, &small, 10, scaler.state_buffer(), None).unwrap();
    common::expect_err(
        opt.set_lr(ctx, f32::INFINITY),
        &["Invalid learning rate: inf"],
    );
    assert_eq!(opt.lr(), 1e-3);
}
