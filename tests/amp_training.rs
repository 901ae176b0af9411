//! The AMP layer end to end on the GPU: planned steps under every precision mode against a
//! CPU reference, overflow skips, underflow without scaling, pure-f16 lost updates,
//! accumulation, clipping, the per-step host-wait counter and the precision map; evaluation
//! in `amp_training/evaluation.rs`.

mod common;
#[path = "amp_training/cpu_mlp.rs"]
mod cpu_mlp;
#[path = "amp_training/evaluation.rs"]
mod evaluation;

use common::{ctx, rand_vec};
use cpu_mlp::{CpuMlp, MLP};
use webgpu_amp::amp::policy::{CastRule, Op, Policy, Precision};
use webgpu_amp::nn::LossKind;
use webgpu_amp::nn::ModelSpec;
use webgpu_amp::optim::OptimizerConfig;
use webgpu_amp::tensor::DType;
use webgpu_amp::train::evaluate::predict;
use webgpu_amp::train::{BatchTargets, StepConfig, StepStats, Trainer};

/// The MLP (4 → 8 → 3) initialised from `seed`, planned under `cfg`.
fn mlp_trainer(ctx: &webgpu_amp::GpuContext, seed: u64, cfg: StepConfig) -> Trainer {
    let spec = ModelSpec::from_json(MLP).unwrap();
    let init = spec.init_params(seed);
    Trainer::new(ctx, spec, cfg, 3, &init).unwrap()
}

fn data(n: usize, seed: u64) -> (Vec<f32>, Vec<f32>) {
    (rand_vec(n * 4, seed), rand_vec(n * 3, seed + 100))
}

fn train_mse(
    precision: Precision,
    steps: usize,
    lr: f32,
) -> (Vec<StepStats>, Vec<(String, Vec<f32>)>) {
    let ctx = ctx();
    let mut t = mlp_trainer(
        ctx,
        7,
        StepConfig::new(precision, LossKind::Mse, OptimizerConfig::sgd(lr)),
    );
    let n = 16;
    for s in 0..steps {
        let (x, y) = data(n, s as u64);
        t.train_batch(ctx, n, &x, BatchTargets::Values(&y)).unwrap();
    }
    let stats = t.finish(ctx).unwrap();
    (stats, t.store.download(ctx).unwrap())
}

#[test]
fn f32_training_matches_cpu_reference() {
    let steps = 12;
    let lr = 0.1;
    let (stats, params) = train_mse(Precision::F32, steps, lr);
    let spec = ModelSpec::from_json(MLP).unwrap();
    let mut cpu = CpuMlp::from_named(&spec.init_params(7));
    assert_eq!(stats.len(), steps);
    for (s, st) in stats.iter().enumerate() {
        let (x, y) = data(16, s as u64);
        let want = cpu.sgd_step(&x, &y, 16, lr);
        assert!(
            (st.loss - want).abs() <= 1e-4 * want.abs(),
            "step {s}: loss {} vs cpu {want}",
            st.loss
        );
        assert!(!st.skipped);
        assert_eq!(st.scale, 1.0, "f32 mode runs without a scaler");
    }
    let gpu = CpuMlp::from_named(&params);
    for (g, c) in [
        (&gpu.w1, &cpu.w1),
        (&gpu.b1, &cpu.b1),
        (&gpu.w2, &cpu.w2),
        (&gpu.b2, &cpu.b2),
    ] {
        for (a, b) in g.iter().zip(c.iter()) {
            assert!(
                (a - b).abs() <= 1e-4 * b.abs().max(1e-2),
                "param {a} vs cpu {b}"
            );
        }
    }
}

#[test]
fn amp_modes_track_f32_within_tolerance() {
    let (f32_stats, _) = train_mse(Precision::F32, 10, 0.1);
    for (precision, tol) in [(Precision::AmpF16, 0.01), (Precision::AmpBf16, 0.05)] {
        let (stats, _) = train_mse(precision, 10, 0.1);
        for (a, b) in stats.iter().zip(&f32_stats) {
            let rel = (a.loss - b.loss).abs() / b.loss.abs();
            assert!(
                rel <= tol,
                "{precision} step {}: loss {} vs f32 {} (rel {rel} > {tol})",
                a.step,
                a.loss,
                b.loss
            );
        }
    }
}

#[test]
fn pure_f16_loses_small_updates_that_amp_keeps() {
    // lr·grad is far below half an f16 ulp of weights of size ~0.3, so `f16` (no master
    // weights) rounds every update away while `amp-f16` accumulates them in f32.
    let lr = 1e-5;
    let spec = ModelSpec::from_json(MLP).unwrap();
    let init = spec.init_params(7);
    let moved = |precision| {
        let (_, params) = train_mse(precision, 5, lr);
        params
            .iter()
            .zip(&init)
            .map(|((_, a), (_, b))| {
                a.iter()
                    .zip(b)
                    .filter(|(x, y)| DType::F16.round(**y) != **x)
                    .count()
            })
            .sum::<usize>()
    };
    let total: usize = init.iter().map(|(_, v)| v.len()).sum();
    let amp = moved(Precision::AmpF16);
    let pure = moved(Precision::F16);
    println!("of {total} parameters, amp-f16 moved {amp} and pure f16 moved {pure}");
    // Only parameters very close to zero (where f16's ulp is tiny) can move under pure f16.
    assert!(
        pure * 10 <= total,
        "pure f16 should lose nearly every tiny update (moved {pure} of {total})"
    );
    assert!(
        amp * 10 >= total * 7,
        "amp-f16 should keep the updates in its f32 master weights (moved {amp} of {total})"
    );
}

/// Overflow → skip on native f16 storage (`array<f16>`): the store helper must give inf
/// where WGSL would let a compiler assume none (see docs/guide/precision.md, "f16 storage").
#[test]
fn f16_overflow_skips_the_step_and_halves_the_scale_on_native_storage() {
    overflow_skips_the_step(common::ctx_native());
}

/// Overflow → skip on packed f16 storage (two halves per u32, what GL and the browser use).
#[test]
fn f16_overflow_skips_the_step_and_halves_the_scale_on_packed_storage() {
    overflow_skips_the_step(common::ctx_packed());
}

fn overflow_skips_the_step(ctx: &webgpu_amp::GpuContext) {
    eprintln!(
        "overflow → skip on `{}` ({}, {:?} f16 storage)",
        ctx.report.name, ctx.report.backend, ctx.f16_storage
    );
    let spec = ModelSpec::from_json(MLP).unwrap();
    let init = spec.init_params(3);
    let mut cfg = StepConfig::new(
        Precision::AmpF16,
        LossKind::Mse,
        OptimizerConfig::adam(1e-3),
    );
    cfg.scaler.growth_interval = 1000;
    let mut t = Trainer::new(ctx, spec, cfg, 3, &init).unwrap();
    let n = 8;
    let (x, y) = data(n, 1);
    t.train_batch(ctx, n, &x, BatchTargets::Values(&y)).unwrap();
    let before = t.store.download(ctx).unwrap();
    let moments_before = t.optimizer.state(ctx).unwrap();
    // An input of 1e5 makes the first Linear's f16 output overflow to inf.
    let mut big = x.clone();
    big[0] = 1e5;
    t.train_batch(ctx, n, &big, BatchTargets::Values(&y))
        .unwrap();
    let stats = t.finish(ctx).unwrap();
    assert_eq!(stats.len(), 2);
    assert!(!stats[0].skipped);
    assert!(stats[1].skipped, "overflowing step must be skipped");
    assert_eq!(stats[1].scale, 65536.0);
    let after = t.store.download(ctx).unwrap();
    for ((n, a), (_, b)) in after.iter().zip(&before) {
        assert!(
            a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()),
            "{n} changed on a skipped step"
        );
    }
    let moments_after = t.optimizer.state(ctx).unwrap();
    assert_eq!(
        moments_before, moments_after,
        "optimizer state changed on a skipped step"
    );
    assert_eq!(t.scaler.get_scale(ctx).unwrap(), 32768.0);
    assert_eq!(t.scaler.state_dict(ctx).unwrap().growth_tracker, Some(0));
    // The next clean steps apply.
    t.train_batch(ctx, n, &x, BatchTargets::Values(&y)).unwrap();
    let stats = t.finish(ctx).unwrap();
    assert!(!stats[0].skipped);
    assert_eq!(stats[0].scale, 32768.0);
    let moved = t.store.download(ctx).unwrap();
    assert_ne!(moved[0].1, after[0].1);
}

#[test]
fn gradient_underflow_without_scaling_and_training_with_it() {
    // Targets a hair away from the outputs: the f16 output gradient 2(y−t)/N is below
    // 2^-24 and flushes to zero without scaling; ×65536 it is representable.
    let ctx = ctx();
    let spec = ModelSpec::from_json(MLP).unwrap();
    let init = spec.init_params(5);
    let n = 8;
    let (x, _) = data(n, 2);
    // Targets = the amp-f16 model's own outputs + 1e-7 (its forward, computed on the GPU).
    let mut probe = Trainer::new(
        ctx,
        spec.clone(),
        StepConfig::new(Precision::AmpF16, LossKind::Mse, OptimizerConfig::sgd(0.0)),
        3,
        &init,
    )
    .unwrap();
    let out = predict(ctx, &mut probe, n, &x).unwrap();
    let y: Vec<f32> = out.iter().map(|v| v + 1e-7).collect();
    let run = |enabled: bool| {
        let mut cfg = StepConfig::new(Precision::AmpF16, LossKind::Mse, OptimizerConfig::sgd(1.0));
        cfg.scaler.enabled = enabled;
        let mut t = Trainer::new(ctx, spec.clone(), cfg, 3, &init).unwrap();
        t.train_batch(ctx, n, &x, BatchTargets::Values(&y)).unwrap();
        t.finish(ctx).unwrap();
        let p = t.store.download(ctx).unwrap();
        p.iter()
            .zip(&init)
            .map(|((_, a), (_, b))| a.iter().zip(b).filter(|(u, v)| u != v).count())
            .sum::<usize>()
    };
    assert_eq!(
        run(false),
        0,
        "unscaled f16 gradients should underflow to zero"
    );
    assert!(
        run(true) > 0,
        "scaled gradients should survive and move the parameters"
    );
}

#[test]
fn host_waits_stay_zero_inside_the_step_loop() {
    // Its own context: other tests in this binary read back on the shared one concurrently.
    let owned = common::ctx_owned();
    let ctx = &owned;
    let cfg = StepConfig::new(Precision::AmpF16, LossKind::Mse, OptimizerConfig::sgd(0.01));
    let mut t = mlp_trainer(ctx, 1, cfg);
    let n = 8;
    let (x, y) = data(n, 4);
    // Plan the network first (planning may read nothing back, but keep it out of the loop).
    t.network(ctx, n).unwrap();
    for _ in 0..6 {
        let before = ctx.host_waits();
        t.train_batch(ctx, n, &x, BatchTargets::Values(&y)).unwrap();
        let _ = t.poll_stats(ctx);
        assert_eq!(ctx.host_waits(), before, "a step waited on the GPU");
    }
    t.finish(ctx).unwrap();
}

#[test]
fn scale_grows_after_growth_interval_clean_steps() {
    let ctx = ctx();
    let spec = ModelSpec::from_json(MLP).unwrap();
    let init = spec.init_params(2);
    let mut cfg = StepConfig::new(Precision::AmpF16, LossKind::Mse, OptimizerConfig::sgd(0.01));
    cfg.scaler.growth_interval = 3;
    cfg.scaler.init_scale = 1024.0;
    let mut t = Trainer::new(ctx, spec, cfg, 3, &init).unwrap();
    let (x, y) = data(8, 9);
    for _ in 0..7 {
        t.train_batch(ctx, 8, &x, BatchTargets::Values(&y)).unwrap();
    }
    let scales: Vec<f32> = t.finish(ctx).unwrap().iter().map(|s| s.scale).collect();
    assert_eq!(
        scales,
        vec![1024.0, 1024.0, 1024.0, 2048.0, 2048.0, 2048.0, 4096.0]
    );
}

#[test]
fn accumulation_of_two_halves_equals_one_full_batch() {
    let ctx = ctx();
    let spec = ModelSpec::from_json(MLP).unwrap();
    let init = spec.init_params(11);
    let (x, y) = data(8, 12);
    let mut full = Trainer::new(
        ctx,
        spec.clone(),
        StepConfig::new(Precision::F32, LossKind::Mse, OptimizerConfig::sgd(0.5)),
        3,
        &init,
    )
    .unwrap();
    full.train_batch(ctx, 8, &x, BatchTargets::Values(&y))
        .unwrap();
    full.finish(ctx).unwrap();
    let mut cfg = StepConfig::new(Precision::F32, LossKind::Mse, OptimizerConfig::sgd(0.5));
    cfg.grad_accum = 2;
    let mut acc = Trainer::new(ctx, spec, cfg, 3, &init).unwrap();
    acc.train_batch(ctx, 4, &x[..16], BatchTargets::Values(&y[..12]))
        .unwrap();
    assert_eq!(
        acc.steps_submitted(),
        0,
        "no optimizer step after the first micro-batch"
    );
    acc.train_batch(ctx, 4, &x[16..], BatchTargets::Values(&y[12..]))
        .unwrap();
    let stats = acc.finish(ctx).unwrap();
    assert_eq!(stats.len(), 1);
    let (a, b) = (
        acc.store.download(ctx).unwrap(),
        full.store.download(ctx).unwrap(),
    );
    for ((n, p), (_, q)) in a.iter().zip(&b) {
        for (u, v) in p.iter().zip(q) {
            assert!((u - v).abs() <= 1e-5 * v.abs().max(1.0), "{n}: {u} vs {v}");
        }
    }
}

#[test]
fn clipping_runs_after_unscale() {
    // With a huge scale, clipping the still-scaled gradients would shrink them to the
    // max-norm *before* unscaling (→ tiny updates). After unscale, a max-norm far above the
    // true gradient norm leaves the update equal to the unclipped one.
    let ctx = ctx();
    let spec = ModelSpec::from_json(MLP).unwrap();
    let init = spec.init_params(13);
    let (x, y) = data(8, 14);
    let run = |clip: Option<f32>| {
        let mut cfg = StepConfig::new(Precision::AmpF16, LossKind::Mse, OptimizerConfig::sgd(0.1));
        cfg.clip_grad_norm = clip;
        let mut t = Trainer::new(ctx, spec.clone(), cfg, 3, &init).unwrap();
        t.train_batch(ctx, 8, &x, BatchTargets::Values(&y)).unwrap();
        t.finish(ctx).unwrap();
        t.store.download(ctx).unwrap()
    };
    let plain = run(None);
    let loose = run(Some(1000.0));
    let tight = run(Some(1e-3));
    assert_eq!(
        plain, loose,
        "a loose clip after unscale must not change the update"
    );
    let dist = |a: &[(String, Vec<f32>)]| -> f32 {
        a.iter()
            .zip(&init)
            .flat_map(|((_, p), (_, q))| p.iter().zip(q).map(|(u, v)| (u - v) * (u - v)))
            .sum::<f32>()
            .sqrt()
    };
    let d = dist(&tight);
    let want = 0.1 * 1e-3;
    assert!(
        (d - want).abs() <= 0.02 * want,
        "clipped update norm {d} should be lr·max_norm = {want}"
    );
}

#[test]
fn precision_map_under_amp_f16_has_f16_linear_and_f32_loss() {
    let linear = Op::new("Linear", CastRule::LowPrecision);
    let policy = Policy::new(Precision::AmpF16);
    let rows = policy.precision_map(&[
        ("0".into(), linear, true),
        ("loss".into(), LossKind::Mse.op(), false),
    ]);
    assert_eq!(rows[0].compute_dtype, DType::F16);
    assert_eq!(rows[0].output_dtype, DType::F16);
    assert!(rows[0].casts.iter().any(|c| c.contains("input f32→f16")));
    assert_eq!(rows[1].compute_dtype, DType::F32);
    assert_eq!(rows[1].output_dtype, DType::F32);
    assert!(rows[1].casts.iter().any(|c| c.contains("input f16→f32")));
    let f32_rows = Policy::new(Precision::F32).precision_map(&[("0".into(), linear, true)]);
    assert_eq!(f32_rows[0].compute_dtype, DType::F32);
    // From a model: the mnist-cnn preset under amp-bf16.
    let spec = webgpu_amp::nn::preset("mnist-cnn", &[1, 28, 28], 10).unwrap();
    let map = webgpu_amp::nn::precision_map(
        &spec,
        &Policy::new(Precision::AmpBf16),
        LossKind::CrossEntropy,
    );
    let conv1 = &map[0];
    assert_eq!(
        (conv1.name.as_str(), conv1.compute_dtype),
        ("conv1", DType::BF16)
    );
    let relu = &map[1];
    assert_eq!(
        (relu.compute_dtype, relu.output_dtype),
        (DType::BF16, DType::BF16),
        "relu runs in its input dtype"
    );
    let loss = map.last().unwrap();
    assert_eq!(
        (loss.op, loss.compute_dtype),
        (LossKind::CrossEntropy.op(), DType::F32)
    );
    let overridden = Policy::new(Precision::AmpF16).with_override(0, DType::F32);
    assert_eq!(overridden.compute_dtype(0, linear, DType::F32), DType::F32);
    // Per op: put Linear on the fp32 list.
    let by_op = Policy::new(Precision::AmpF16).with_op_rule("Linear", CastRule::F32);
    assert_eq!(by_op.compute_dtype(3, linear, DType::F16), DType::F32);
    assert_eq!(
        by_op.compute_dtype(3, Op::new("Conv2d", CastRule::LowPrecision), DType::F32),
        DType::F16
    );
}
