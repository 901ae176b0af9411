//! The GPT training recipe: AdamW parameter groups (decay on the elements of one group only,
//! inside the one fused dispatch; nanoGPT's grouping for a GPT), the learning-rate schedule
//! (nanoGPT's get_lr, written ahead of each step, advancing on skipped steps, reported with
//! each step's stats); the CLI's GPT defaults and recipe flags in `gpt_recipe/cli.rs`.

#[path = "gpt_recipe/cli.rs"]
mod cli;
mod common;

use common::{bits, ctx, rand_vec};
use webgpu_amp::amp::policy::Precision;
use webgpu_amp::amp::{GradScaler, ScalerConfig};
use webgpu_amp::data::DataSource;
use webgpu_amp::nn::params::ParamLayout;
use webgpu_amp::nn::{LossKind, ModelSpec};
use webgpu_amp::optim::{LrSchedule, Optimizer, OptimizerConfig, widen};
use webgpu_amp::train::trainer::weight_decay_mask;
use webgpu_amp::train::{BatchTargets, ModelChoice, StepConfig, Trainer, model_and_data};

const MLP: &str =
    r#"{"input": [4], "layers": [{"linear": {"out": 8}}, {"relu": {}}, {"linear": {"out": 3}}]}"#;

fn gpt_tiny() -> ModelSpec {
    let source: DataSource = "hamlet".parse().unwrap();
    model_and_data(Some(&ModelChoice::Preset("gpt-tiny".into())), &source, true)
        .unwrap()
        .0
}

// ---- parameter groups ------------------------------------------------------------------------

/// One optimizer step with zero gradients isolates weight decay: AdamW multiplies decayed
/// elements by exactly `1 - lr * wd` (its moment update is 0), SGD's L2 term subtracts
/// `lr * wd * p`; elements outside the group keep their bits. One group (`new`) decays all.
#[test]
fn weight_decay_applies_to_the_masked_elements_only() {
    let ctx = ctx();
    let n = 1000; // 31 full mask words and a partial one, several workgroups
    let p0 = rand_vec(n, 7);
    let mask: Vec<bool> = (0..n).map(|i| i % 3 != 0 && i != 999).collect();
    let scaler = GradScaler::new(
        ctx,
        ScalerConfig {
            enabled: false,
            ..Default::default()
        },
    )
    .unwrap();
    let (lr, wd) = (0.1f32, 0.5f32);
    let adamw = OptimizerConfig::AdamW {
        lr,
        beta1: 0.9,
        beta2: 0.99,
        eps: 1e-8,
        weight_decay: wd,
    };
    let sgd = OptimizerConfig::Sgd {
        lr,
        momentum: 0.0,
        dampening: 0.0,
        nesterov: false,
        weight_decay: wd,
    };
    let adamw_factor = (1.0 - widen(lr) * widen(wd)) as f32;
    for (config, grouped) in [(adamw, true), (adamw, false), (sgd, true), (sgd, false)] {
        let params = ctx.alloc_storage("test.params", 4 * n as u64);
        ctx.queue
            .write_buffer(params.raw(), 0, bytemuck::cast_slice(&p0));
        let grads = ctx.alloc_storage("test.grads", 4 * n as u64);
        let groups = grouped.then_some(mask.as_slice());
        let opt = Optimizer::new_grouped(
            ctx,
            config,
            &params,
            &grads,
            n,
            scaler.state_buffer(),
            groups,
        )
        .unwrap();
        assert_eq!(opt.grouped(), grouped);
        ctx.run(&opt.step_kernels());
        let got: Vec<f32> =
            bytemuck::pod_collect_to_vec(&ctx.read_bytes(&params, 0, 4 * n as u64).unwrap());
        for i in 0..n {
            let p = p0[i];
            let want = match (mask[i] || !grouped, config) {
                (false, _) => p,
                (true, OptimizerConfig::AdamW { .. }) => p * adamw_factor,
                (true, _) => p + (-lr) * (wd * p),
            };
            assert_eq!(
                got[i].to_bits(),
                want.to_bits(),
                "{} grouped={grouped} element {i}: {} want {want} (from {p})",
                config.name(),
                got[i]
            );
        }
    }
    // A mask of the wrong length is an error, not a panic.
    let params = ctx.alloc_storage("test.params", 4 * n as u64);
    let e = Optimizer::new_grouped(
        ctx,
        adamw,
        &params,
        &params,
        n,
        scaler.state_buffer(),
        Some(&mask[..10]),
    )
    .err()
    .expect("short mask");
    assert!(
        e.to_string().contains("mask of 10 elements for 1000"),
        "{e}"
    );
}

/// nanoGPT's configure_optimizers on gpt-tiny prints "num decayed parameter tensors: 10, with
/// 106,560 parameters" and "num non-decayed parameter tensors: 5, with 320 parameters" (the
/// tied lm_head is wte); the trainer hands exactly that mask to the optimizer. Other models
/// keep one group.
#[test]
fn a_gpt_decays_its_matrices_and_embeddings_only() {
    let ctx = ctx();
    let spec = gpt_tiny();
    let named: Vec<(String, Vec<usize>)> = spec
        .parameters()
        .into_iter()
        .map(|p| (p.name, p.shape))
        .collect();
    let layout = ParamLayout::new(&named, ParamLayout::element_alignment(ctx));
    let mask = weight_decay_mask(&spec, &layout).expect("a GPT has parameter groups");
    let (mut decayed, mut kept) = ((0, 0), (0, 0));
    for e in &layout.entries {
        let on = &mask[e.offset..e.offset + e.numel()];
        assert!(on.iter().all(|&b| b == on[0]), "{} is split", e.name);
        let group = if on[0] { &mut decayed } else { &mut kept };
        group.0 += 1;
        group.1 += e.numel();
        assert_eq!(on[0], e.shape.len() >= 2, "{} {:?}", e.name, e.shape);
    }
    assert_eq!(decayed, (10, 106_560));
    assert_eq!(kept, (5, 320));

    let mlp = ModelSpec::from_json(MLP).unwrap();
    let mlp_layout = ParamLayout::new(
        &mlp.parameters()
            .into_iter()
            .map(|p| (p.name, p.shape))
            .collect::<Vec<_>>(),
        2,
    );
    assert!(weight_decay_mask(&mlp, &mlp_layout).is_none());

    // The planned trainer's optimizer holds that mask, one bit per element.
    let init = spec.init_params(0);
    let config = StepConfig {
        loss: LossKind::CrossEntropy,
        ..step_config(
            Precision::F32,
            OptimizerConfig::adamw(1e-3),
            LrSchedule::Constant,
        )
    };
    let trainer = Trainer::new(ctx, spec, config, 65, &init).unwrap();
    assert!(trainer.optimizer.grouped());
    let words = trainer.optimizer.decay_mask_words(ctx).unwrap();
    for (i, &on) in mask.iter().enumerate() {
        assert_eq!((words[i / 32] >> (i % 32)) & 1 == 1, on, "element {i}");
    }
}

// ---- learning-rate schedule -------------------------------------------------------------------

fn step_config(
    precision: Precision,
    optimizer: OptimizerConfig,
    lr_schedule: LrSchedule,
) -> StepConfig {
    StepConfig::new(precision, LossKind::Mse, optimizer)
        .scaler(ScalerConfig {
            enabled: precision.scaler_enabled_by_default(),
            init_scale: 4_194_304.0, // 2^22: f16 gradients overflow for the first steps
            ..Default::default()
        })
        .grad_accum(2)
        .lr_schedule(lr_schedule)
}

fn mlp_trainer(config: StepConfig) -> Trainer {
    let spec = ModelSpec::from_json(MLP).unwrap();
    let init = spec.init_params(3);
    Trainer::new(ctx(), spec, config, 3, &init).unwrap()
}

/// Two micro-batches per step, a fixed pair of batches.
fn train_steps(t: &mut Trainer, steps: usize, before_step: &mut dyn FnMut(&Trainer, usize)) {
    let ctx = ctx();
    let x = rand_vec(8 * 4, 11);
    let y = rand_vec(8 * 3, 12);
    for s in 0..steps {
        before_step(t, s);
        for m in 0..2 {
            t.train_batch(
                ctx,
                4,
                &x[16 * m..16 * m + 16],
                BatchTargets::Values(&y[12 * m..12 * m + 12]),
            )
            .unwrap();
        }
    }
}

const COSINE: LrSchedule = LrSchedule::Cosine {
    warmup_steps: 2,
    decay_steps: 6,
    min_lr: 1e-4,
};

/// nanoGPT's `get_lr(it)` (train.py), written here apart from the library's schedule, in
/// Python's f64 arithmetic: what a step's rate must be, rounded to f32 as the GPU gets it.
fn nanogpt_lr(
    learning_rate: f64,
    min_lr: f64,
    warmup_iters: u64,
    lr_decay_iters: u64,
    it: u64,
) -> f32 {
    let lr = if it < warmup_iters {
        learning_rate * (it + 1) as f64 / (warmup_iters + 1) as f64
    } else if it > lr_decay_iters {
        min_lr
    } else {
        let decay_ratio = (it - warmup_iters) as f64 / (lr_decay_iters - warmup_iters) as f64;
        let coeff = 0.5 * (1.0 + (std::f64::consts::PI * decay_ratio).cos());
        min_lr + coeff * (learning_rate - min_lr)
    };
    lr as f32
}

/// [`COSINE`]'s rate at step `it` for a base rate of 1e-2.
fn cosine_lr(it: u64) -> f32 {
    nanogpt_lr(1e-2, 1e-4, 2, 6, it)
}

/// A cosine schedule trains exactly like a constant one whose rate is set by hand to
/// get_lr(step) before each step (so the rate reached the GPU ahead of the step), differs from
/// a constant rate, and every step's stats carry the rate it used.
#[test]
fn the_schedule_is_written_ahead_of_each_step_and_reported_with_it() {
    let ctx = ctx();
    let base = 1e-2;
    let steps = 8; // warm-up, decay and two steps past its end
    let mut scheduled = mlp_trainer(step_config(
        Precision::F32,
        OptimizerConfig::adam(base),
        COSINE,
    ));
    train_steps(&mut scheduled, steps, &mut |_, _| {});
    let stats = scheduled.finish(ctx).unwrap();

    let mut by_hand = mlp_trainer(step_config(
        Precision::F32,
        OptimizerConfig::adam(base),
        LrSchedule::Constant,
    ));
    train_steps(&mut by_hand, steps, &mut |t, s| {
        t.optimizer.set_lr(ctx, cosine_lr(s as u64)).unwrap()
    });
    let by_hand_stats = by_hand.finish(ctx).unwrap();

    let mut constant = mlp_trainer(step_config(
        Precision::F32,
        OptimizerConfig::adam(base),
        LrSchedule::Constant,
    ));
    train_steps(&mut constant, steps, &mut |_, _| {});
    let constant_stats = constant.finish(ctx).unwrap();

    assert_eq!(stats.len(), steps);
    for (s, st) in stats.iter().enumerate() {
        assert_eq!(
            st.lr.to_bits(),
            cosine_lr(s as u64).to_bits(),
            "step {}",
            st.step
        );
        assert_eq!(st.lr.to_bits(), by_hand_stats[s].lr.to_bits());
        assert_eq!(
            st.loss.to_bits(),
            by_hand_stats[s].loss.to_bits(),
            "step {}",
            st.step
        );
        assert_eq!(constant_stats[s].lr, base);
    }
    assert_eq!(stats[0].lr, (1e-2f64 / 3.0) as f32, "warm-up: lr * 1/3");
    assert_eq!(stats[7].lr, 1e-4, "past the decay: min_lr");
    let params = |t: &Trainer| t.store.download(ctx).unwrap();
    for ((name, a), (_, b)) in params(&scheduled).iter().zip(params(&by_hand)) {
        assert_eq!(bits(a), bits(&b), "{name}");
    }
    assert_ne!(
        bits(&params(&scheduled)[0].1),
        bits(&params(&constant)[0].1),
        "the schedule changed nothing"
    );
}

/// As a PyTorch scheduler stepped after every `scaler.step(optimizer)`, the schedule counts
/// the steps the GradScaler skipped; Adam's own step count does not.
#[test]
fn the_schedule_advances_on_skipped_steps() {
    let ctx = ctx();
    let base = 1e-2;
    let mut t = mlp_trainer(step_config(
        Precision::AmpF16,
        OptimizerConfig::adam(base),
        COSINE,
    ));
    train_steps(&mut t, 8, &mut |_, _| {});
    let stats = t.finish(ctx).unwrap();
    let skipped = stats.iter().filter(|s| s.skipped).count();
    assert!(
        (1..8).contains(&skipped),
        "want some skipped steps, got {skipped}: {stats:?}"
    );
    for (s, st) in stats.iter().enumerate() {
        assert_eq!(st.lr.to_bits(), cosine_lr(s as u64).to_bits(), "{st:?}");
    }
    assert_eq!(t.optimizer.state(ctx).unwrap().step as usize, 8 - skipped);
}
