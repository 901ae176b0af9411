//! Where a step's time goes (`--profile`): every phase of the step is in the GPU profile with
//! its kernels, the times are real, and host times are reported; and a planned step creates
//! no GPU buffers and no bind groups, counted by the crate's one allocation layer.

mod common;

use webgpu_amp::amp::policy::Precision;
use webgpu_amp::data::{Normalization, embedded};
use webgpu_amp::gpu::KernelTimer;
use webgpu_amp::nn::LossKind;
use webgpu_amp::nn::preset;
use webgpu_amp::optim::OptimizerConfig;
use webgpu_amp::train::profile::profile_steps;
use webgpu_amp::train::{Phase, StepConfig, Trainer};

const BATCH: usize = 32;

/// amp-f16 with clipping, so the first step has every phase: setup (found-inf reset, weight
/// cast), forward, loss, backward, unscale, clip, optimizer, scale update. A step after it has
/// an empty setup: the optimizer wrote the weights' f16 copy and the scale update reset
/// found-inf.
fn trainer(ctx: &webgpu_amp::GpuContext, model: &str) -> Trainer {
    let spec = preset(model, &[1, 28, 28], 10).unwrap();
    let init = spec.init_params(0);
    let config = StepConfig::new(
        Precision::AmpF16,
        LossKind::CrossEntropy,
        OptimizerConfig::adam(1e-3),
    )
    .clip_grad_norm(Some(1.0));
    Trainer::new(ctx, spec, config, 10, &init).unwrap()
}

#[test]
fn profile_has_every_phase_with_kernels_and_host_times() {
    let ctx = common::ctx_owned();
    let split = embedded::mnist_split(Some(Normalization::MNIST)).unwrap();
    let batch = split.train.gather(&(0..BATCH).collect::<Vec<_>>()).unwrap();
    let mut t = trainer(&ctx, "mnist-cnn");
    let phases: Vec<Phase> = t
        .step_phases(&ctx, BATCH)
        .unwrap()
        .iter()
        .map(|p| p.0)
        .collect();
    assert_eq!(phases.len(), t.step_kernels(&ctx, BATCH).unwrap().len());
    for p in Phase::ALL {
        assert!(phases.contains(&p), "no {} kernel in the step", p.name());
    }
    let y = || batch.targets();
    t.train_batch(&ctx, BATCH, batch.input(), y()).unwrap();
    let profile = profile_steps(&ctx, &mut t, BATCH, batch.input(), y, 3).unwrap();
    let table = profile.table(5);
    println!("{table}");
    assert_eq!(profile.host.steps, 3);
    assert!(
        profile.host.encode_ms > 0.0 && profile.host.submit_ms > 0.0,
        "{table}"
    );
    assert!(table.contains("host time per step"), "{table}");
    match KernelTimer::unavailable(&ctx) {
        Some(why) => {
            // Said in the table, never an empty profile.
            assert!(profile.gpu.is_none());
            assert!(table.contains("NOT MEASURED"), "{table}");
            common::not_checked(&format!(
                "the profile's GPU times on `{}`: {why}",
                ctx.report.name
            ));
        }
        None => {
            let gpu = profile
                .gpu
                .as_ref()
                .expect("GPU times with timestamp queries");
            // A later step's kernels: the first step's less what the step before does for it
            // (the found-inf reset, the weight cast).
            let later = t.step_kernels(&ctx, BATCH).unwrap().len();
            assert_eq!(gpu.kernels.len(), later, "{table}");
            assert_eq!(gpu.phases.len(), Phase::ALL.len());
            for p in &gpu.phases {
                if p.phase == Phase::Setup.name() {
                    assert_eq!(p.kernels, 0, "a later step's setup: {table}");
                    continue;
                }
                assert!(p.kernels > 0, "phase {} has no kernels: {table}", p.phase);
                assert!(p.ms >= 0.0 && p.ms.is_finite(), "{table}");
            }
            let forward = gpu.phases.iter().find(|p| p.phase == "forward").unwrap();
            assert!(forward.ms > 0.0, "the forward took no GPU time: {table}");
            assert!(gpu.kernels_ms > 0.0, "{table}");
            // The span from the first kernel's start to the last one's end holds every
            // kernel of the step (each runs in its own pass, in order).
            let longest = gpu.kernels.iter().fold(0.0f64, |m, k| m.max(k.ms));
            assert!(
                gpu.whole_ms > 0.0 && gpu.whole_ms >= longest,
                "whole step {} ms, longest kernel {longest} ms: {table}",
                gpu.whole_ms
            );
            for phase in ["forward", "backward", "unscale", "optimizer"] {
                assert!(
                    table.contains(phase),
                    "{phase} missing from the table:\n{table}"
                );
            }
            let json = serde_json::to_value(&profile).unwrap();
            assert_eq!(json["gpu"]["phases"].as_array().unwrap().len(), 8);
        }
    }
}

#[test]
fn a_planned_step_creates_no_buffers_and_no_bind_groups() {
    let ctx = common::ctx_owned();
    let split = embedded::mnist_split(Some(Normalization::MNIST)).unwrap();
    let batch = split.train.gather(&(0..BATCH).collect::<Vec<_>>()).unwrap();
    for model in ["mlp", "mnist-cnn"] {
        let mut t = trainer(&ctx, model);
        let y = || batch.targets();
        // The first step plans the network for this batch size (buffers, bind groups).
        t.train_batch(&ctx, BATCH, batch.input(), y()).unwrap();
        t.finish(&ctx).unwrap();
        let (buffers, groups) = (ctx.memory().allocations, ctx.allocator.bind_groups());
        let live = ctx.memory().live_bytes;
        for _ in 0..10 {
            t.train_batch(&ctx, BATCH, batch.input(), y()).unwrap();
            t.poll_stats(&ctx);
        }
        t.finish(&ctx).unwrap();
        assert_eq!(
            ctx.memory().allocations,
            buffers,
            "{model}: buffers were created inside planned steps"
        );
        assert_eq!(
            ctx.allocator.bind_groups(),
            groups,
            "{model}: bind groups were created inside planned steps"
        );
        assert_eq!(ctx.memory().live_bytes, live, "{model}: live bytes changed");
        assert!(groups > 0 && buffers > 0, "the counters count");
    }
}
