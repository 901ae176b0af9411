//! The weights' compute-dtype copy written by the optimizer's step (`Optimizer::write_low_copy`)
//! instead of a separate master → f16/bf16 cast each step: after every step (applied or
//! skipped) it holds exactly the bits a fresh cast of the master weights gives, in native f16,
//! packed f16 and bf16; the separate cast runs on the first step and after an upload of the
//! weights (and only then), and a step after an upload computes its forward from the
//! uploaded weights.

mod common;

use common::values::contexts;
use webgpu_amp::amp::policy::Precision;
use webgpu_amp::amp::scaler::ScalerConfig;
use webgpu_amp::nn::{LossKind, ModelSpec};
use webgpu_amp::ops::elementwise;
use webgpu_amp::optim::OptimizerConfig;
use webgpu_amp::train::{BatchTargets, StepConfig, Trainer};
use webgpu_amp::{GpuContext, Tensor};

// 40·48 + 48 + 48·3 + 3 = 2115 parameters: three workgroups of the step and an odd end.
const MLP: &str =
    r#"{"input": [40], "layers": [{"linear": {"out": 48}}, {"relu": {}}, {"linear": {"out": 3}}]}"#;
const BATCH: usize = 4;

/// The compute copy's bytes, and those of a fresh cast of the master weights.
fn copy_and_fresh_cast(ctx: &GpuContext, t: &Trainer) -> (Vec<u8>, Vec<u8>) {
    let low = t.store.low_flat(ctx).unwrap().expect("a compute copy");
    let storage = low.storage();
    let bytes = storage.bytes_for(low.numel());
    let fresh = ctx.alloc_storage("test.fresh_cast", bytes);
    let fresh = Tensor::view(ctx, fresh, 0, &[low.numel()], storage).unwrap();
    let master = t.store.master_flat(ctx).unwrap();
    ctx.run(&[&elementwise::cast(ctx, &master, &fresh).unwrap()]);
    (
        ctx.read_bytes(low.buffer(), 0, bytes).unwrap(),
        ctx.read_bytes(fresh.buffer(), 0, bytes).unwrap(),
    )
}

/// The weight casts among a step's kernels (the forward's activation casts included).
fn casts(ctx: &GpuContext, t: &mut Trainer) -> usize {
    let kernels = t.step_kernels(ctx, BATCH).unwrap();
    kernels
        .iter()
        .filter(|k| k.label == "elementwise::cast_forward")
        .count()
}

fn config(precision: Precision, optimizer: OptimizerConfig) -> StepConfig {
    let scaler = ScalerConfig {
        init_scale: 1.0,
        ..ScalerConfig::default()
    };
    StepConfig::new(precision, LossKind::Mse, optimizer)
        .scaler(scaler)
        .clip_grad_norm(Some(1.0))
}

/// One step on inputs from `seed` (a NaN among them when `poisoned`): (loss, skipped).
fn step(ctx: &GpuContext, t: &mut Trainer, seed: u64, poisoned: bool) -> (f32, bool) {
    let mut x = common::rand_vec(BATCH * 40, seed);
    if poisoned {
        x[5] = f32::NAN;
    }
    let y = common::rand_vec(BATCH * 3, seed + 1);
    t.train_batch(ctx, BATCH, &x, BatchTargets::Values(&y))
        .unwrap();
    let stats = t.finish(ctx).unwrap();
    (stats[0].loss, stats[0].skipped)
}

fn check(name: &str, ctx: &GpuContext, precision: Precision, optimizer: OptimizerConfig) {
    let what = format!("{name} {precision} {}", optimizer.name());
    let spec = ModelSpec::from_json(MLP).unwrap();
    let mut t = Trainer::new(
        ctx,
        spec.clone(),
        config(precision, optimizer),
        3,
        &spec.init_params(1),
    )
    .unwrap();
    assert!(
        t.optimizer.writes_low_copy(),
        "{what}: the step writes the copy"
    );
    let first = casts(ctx, &mut t);
    let same = |t: &Trainer, when: &str| {
        let (copy, fresh) = copy_and_fresh_cast(ctx, t);
        assert!(
            copy == fresh,
            "{what}: the copy differs from a fresh cast {when}"
        );
    };
    assert!(
        !step(ctx, &mut t, 10, false).1,
        "{what}: a clean step is applied"
    );
    same(&t, "after an applied step");
    assert_eq!(
        casts(ctx, &mut t) + 1,
        first,
        "{what}: no weight cast once fresh"
    );
    assert!(
        step(ctx, &mut t, 20, true).1,
        "{what}: a NaN input skips the step"
    );
    same(&t, "after a skipped step");
    assert!(!step(ctx, &mut t, 30, false).1, "{what}: applied again");
    same(&t, "after the step after a skipped one");

    // An upload (what a checkpoint load or a broadcast does) makes the copy stale: the next
    // step casts again and its forward sees the uploaded weights, as a fresh trainer's does.
    let uploaded = spec.init_params(2);
    t.store.upload(ctx, &uploaded).unwrap();
    assert_eq!(
        casts(ctx, &mut t),
        first,
        "{what}: the cast is back after an upload"
    );
    let mut fresh = Trainer::new(ctx, spec, config(precision, optimizer), 3, &uploaded).unwrap();
    let (loss, _) = step(ctx, &mut t, 40, false);
    let (want, _) = step(ctx, &mut fresh, 40, false);
    assert_eq!(
        loss.to_bits(),
        want.to_bits(),
        "{what}: the forward after an upload"
    );
    same(&t, "after the step after an upload");
    assert_eq!(
        casts(ctx, &mut t) + 1,
        first,
        "{what}: and no cast after it"
    );
}

#[test]
fn the_optimizer_writes_the_compute_copy_a_fresh_cast_gives() {
    let mut momentum = OptimizerConfig::sgd(0.05);
    if let OptimizerConfig::Sgd { momentum: m, .. } = &mut momentum {
        *m = 0.9;
    }
    for (name, ctx) in contexts() {
        for precision in [Precision::AmpF16, Precision::AmpBf16] {
            for optimizer in [OptimizerConfig::adamw(1e-2), momentum] {
                check(name, ctx, precision, optimizer);
            }
        }
    }
}

#[test]
fn pure_f16_and_f32_keep_their_casts() {
    let ctx = common::ctx();
    let spec = ModelSpec::from_json(MLP).unwrap();
    let init = spec.init_params(3);
    let adamw = OptimizerConfig::adamw(1e-2);
    // Pure f16 rounds the parameters after the optimizer: the cast stays in every step (at
    // its start, so the copy lags the parameters between steps, as before).
    let mut t = Trainer::new(ctx, spec.clone(), config(Precision::F16, adamw), 3, &init);
    let t = t.as_mut().unwrap();
    assert!(!t.optimizer.writes_low_copy());
    let first = casts(ctx, t);
    step(ctx, t, 50, false);
    assert_eq!(casts(ctx, t), first, "pure f16: the weight cast stays");
    // f32 has no copy at all.
    let t = Trainer::new(ctx, spec, config(Precision::F32, adamw), 3, &init).unwrap();
    assert!(!t.optimizer.writes_low_copy() && t.store.low.is_none());
}
