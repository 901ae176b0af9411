//! The GradScaler's promise, as a property: a step whose gradients hold any inf or NaN
//! changes no parameter, no optimizer moment and no step count, whatever the scale (down to
//! a subnormal and to 0, where 1/scale is inf), under f32, amp-f16 and amp-bf16 (the scaler
//! switched on for each), with SGD (momentum), Adam and AdamW, with and without clipping and
//! gradient accumulation. Non-finite gradients come from the data: a NaN or an inf input, or
//! inputs so large that the forward overflows, at random steps. And the step after a skipped
//! one starts clean: the scale update resets found-inf (no begin dispatch), and an unscale
//! outside the step makes the next step record its own reset.

mod common;

use common::values::upload_f32;
use common::{ctx, rand_vec};
use webgpu_amp::amp::policy::Precision;
use webgpu_amp::amp::scaler::ScalerConfig;
use webgpu_amp::nn::{LossKind, ModelSpec};
use webgpu_amp::optim::{OptimizerConfig, OptimizerState};
use webgpu_amp::train::{BatchTargets, StepConfig, Trainer};

const MLP: &str =
    r#"{"input": [4], "layers": [{"linear": {"out": 8}}, {"relu": {}}, {"linear": {"out": 3}}]}"#;
const BATCH: usize = 4;

/// xorshift64: the test's own dice.
struct Dice(u64);

impl Dice {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Everything a skipped step must leave as it was, as bits.
#[derive(Debug, PartialEq)]
struct Weights {
    params: Vec<(String, Vec<u32>)>,
    step: u32,
    moments: Vec<Option<Vec<u32>>>,
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn weights(t: &Trainer) -> Weights {
    let ctx = ctx();
    let params = t.store.download(ctx).unwrap();
    let OptimizerState {
        step,
        momentum_buffer,
        exp_avg,
        exp_avg_sq,
    } = t.optimizer.state(ctx).unwrap();
    let moments = [momentum_buffer, exp_avg, exp_avg_sq]
        .iter()
        .map(|m| m.as_deref().map(bits))
        .collect();
    Weights {
        params: params.into_iter().map(|(n, v)| (n, bits(&v))).collect(),
        step,
        moments,
    }
}

/// One micro-batch of inputs, poisoned as `poison` says (0: clean).
fn inputs(dice: &mut Dice, poison: u64) -> Vec<f32> {
    let mut x = rand_vec(BATCH * 4, dice.next());
    let at = dice.below(x.len() as u64) as usize;
    match poison {
        0 => {}
        1 => x[at] = f32::NAN,
        2 => x[at] = f32::INFINITY,
        // Finite, but the forward overflows f16 and bf16 alike, and f32's MSE squares it.
        _ => x.iter_mut().for_each(|v| *v *= 3e38),
    }
    x
}

/// Train `steps` steps of a random schedule of poisoned micro-batches and scales; after
/// every skipped step, the weights must be bit-identical to before it. Returns (skipped,
/// applied) counts so the caller can see both kinds happened.
fn check(
    precision: Precision,
    optimizer: OptimizerConfig,
    clip: Option<f32>,
    accum: usize,
    seed: u64,
) -> (usize, usize) {
    let ctx = ctx();
    let mut dice = Dice(seed.wrapping_mul(0x9E3779B97F4A7C15) | 1);
    // Scales from the usual 2^16 down to 2^-130 (1/scale is inf) and the smallest subnormal,
    // whose first backoff is 0.
    let init_scale =
        [65536.0, 1.0, f32::from_bits(1 << 19), f32::from_bits(1)][dice.below(4) as usize];
    let scaler = ScalerConfig {
        init_scale,
        growth_interval: 2,
        ..ScalerConfig::default()
    };
    let cfg = StepConfig::new(precision, LossKind::Mse, optimizer)
        .scaler(scaler)
        .clip_grad_norm(clip)
        .grad_accum(accum);
    let spec = ModelSpec::from_json(MLP).unwrap();
    let init = spec.init_params(seed);
    let mut t = Trainer::new(ctx, spec, cfg, 3, &init).unwrap();
    let what = format!(
        "{precision} {} clip {clip:?} accum {accum} init scale {init_scale:e}",
        t.optimizer.config().name()
    );
    let (mut skipped, mut applied) = (0, 0);
    let mut before = weights(&t);
    for step in 0..6 {
        // About one step in two is poisoned, in one of its micro-batches.
        let poisoned_micro = (dice.below(2) == 0).then(|| dice.below(accum as u64) as usize);
        for micro in 0..accum {
            let poison = if poisoned_micro == Some(micro) {
                1 + dice.below(3)
            } else {
                0
            };
            let x = inputs(&mut dice, poison);
            let y = rand_vec(BATCH * 3, dice.next());
            t.train_batch(ctx, BATCH, &x, BatchTargets::Values(&y))
                .unwrap();
        }
        let stats = t.finish(ctx).unwrap();
        assert_eq!(stats.len(), 1, "{what}: one step reported");
        let after = weights(&t);
        if stats[0].skipped {
            skipped += 1;
            assert!(
                before == after,
                "{what}: step {step} was skipped (scale {:e}, loss {}) but changed the weights",
                stats[0].scale,
                stats[0].loss
            );
        } else {
            applied += 1;
            assert!(
                poisoned_micro.is_none(),
                "{what}: step {step} had a non-finite input but was applied"
            );
            for (name, values) in &after.params {
                assert!(
                    values.iter().all(|&b| f32::from_bits(b).is_finite()),
                    "{what}: step {step} was applied and wrote a non-finite `{name}`"
                );
            }
        }
        before = after;
    }
    (skipped, applied)
}

fn optimizers() -> [OptimizerConfig; 3] {
    let mut sgd = OptimizerConfig::sgd(0.05);
    if let OptimizerConfig::Sgd { momentum, .. } = &mut sgd {
        *momentum = 0.9;
    }
    [
        sgd,
        OptimizerConfig::adam(1e-2),
        OptimizerConfig::adamw(1e-2),
    ]
}

fn check_precision(precision: Precision) {
    let (mut skipped, mut applied) = (0, 0);
    let mut seed = precision as u64 * 1000;
    for optimizer in optimizers() {
        for clip in [None, Some(0.5)] {
            for accum in [1, 2] {
                seed += 1;
                let (s, a) = check(precision, optimizer, clip, accum, seed);
                skipped += s;
                applied += a;
            }
        }
    }
    // The property has teeth only if both kinds of step happened.
    assert!(skipped >= 10, "{precision}: only {skipped} skipped steps");
    assert!(applied >= 10, "{precision}: only {applied} applied steps");
}

#[test]
fn skipped_steps_change_no_weight_under_f32() {
    check_precision(Precision::F32);
}

#[test]
fn skipped_steps_change_no_weight_under_amp_f16() {
    check_precision(Precision::AmpF16);
}

#[test]
fn skipped_steps_change_no_weight_under_amp_bf16() {
    check_precision(Precision::AmpBf16);
}

/// The state the audit found: a scale that has underflowed to a subnormal (1/scale is inf)
/// and then to 0, with clean data. Every step is skipped, and none writes a weight.
#[test]
fn an_underflowed_scale_skips_every_step_and_writes_nothing() {
    let ctx = ctx();
    for init_scale in [f32::from_bits(1 << 9), f32::from_bits(1)] {
        let cfg = StepConfig::new(
            Precision::AmpF16,
            LossKind::Mse,
            OptimizerConfig::adam(1e-2),
        )
        .scaler(ScalerConfig {
            init_scale,
            ..ScalerConfig::default()
        });
        let spec = ModelSpec::from_json(MLP).unwrap();
        let init = spec.init_params(1);
        let mut t = Trainer::new(ctx, spec, cfg, 3, &init).unwrap();
        let before = weights(&t);
        for s in 0..4 {
            let x = rand_vec(BATCH * 4, 10 + s);
            let y = rand_vec(BATCH * 3, 20 + s);
            t.train_batch(ctx, BATCH, &x, BatchTargets::Values(&y))
                .unwrap();
        }
        let stats = t.finish(ctx).unwrap();
        assert!(
            stats.iter().all(|s| s.skipped),
            "init scale {init_scale:e}: {stats:?}"
        );
        if init_scale == f32::from_bits(1) {
            assert_eq!(stats.last().unwrap().scale_after, 0.0, "backed off to 0");
        }
        assert!(
            before == weights(&t),
            "init scale {init_scale:e}: weights changed"
        );
    }
}

#[test]
fn the_step_after_a_skipped_one_starts_clean_without_a_begin_dispatch() {
    let ctx = ctx();
    let scaler = ScalerConfig {
        init_scale: 1.0,
        ..ScalerConfig::default()
    };
    let cfg = StepConfig::new(Precision::AmpF16, LossKind::Mse, OptimizerConfig::sgd(0.05))
        .scaler(scaler);
    let spec = ModelSpec::from_json(MLP).unwrap();
    let init = spec.init_params(5);
    let mut t = Trainer::new(ctx, spec, cfg, 3, &init).unwrap();
    let mut dice = Dice(77);
    let begins = |t: &mut Trainer| -> usize {
        let kernels = t.step_kernels(ctx, BATCH).unwrap();
        kernels
            .iter()
            .filter(|k| k.label == "scaler::begin_step")
            .count()
    };
    // The first step resets found-inf itself; later ones leave it to the scale update.
    assert_eq!(begins(&mut t), 1, "first step: begin recorded");
    let step = |t: &mut Trainer, dice: &mut Dice, poison: u64| -> bool {
        let x = inputs(dice, poison);
        let y = rand_vec(BATCH * 3, dice.next());
        t.train_batch(ctx, BATCH, &x, BatchTargets::Values(&y))
            .unwrap();
        t.finish(ctx).unwrap()[0].skipped
    };
    assert!(!step(&mut t, &mut dice, 0), "a clean step is applied");
    assert_eq!(begins(&mut t), 0, "steady state: no begin dispatch");
    assert!(step(&mut t, &mut dice, 1), "a NaN input skips the step");
    assert!(
        !step(&mut t, &mut dice, 0),
        "the next clean step is applied"
    );
    assert_eq!(begins(&mut t), 0, "still no begin dispatch");
    // An eager unscale of a NaN outside the step sets found-inf, and update() keeps it (as
    // PyTorch reports it until the next step): the next step must reset it itself.
    let poisoned = upload_f32(ctx, &[1.0, f32::NAN]);
    t.scaler.unscale(ctx, &poisoned, 2).unwrap();
    t.scaler.update(ctx).unwrap();
    assert!(t.scaler.snapshot(ctx).unwrap().found_inf);
    assert_eq!(
        begins(&mut t),
        1,
        "an unscale outside the step: begin recorded"
    );
    assert!(
        !step(&mut t, &mut dice, 0),
        "and the clean step after it is applied"
    );
    assert_eq!(begins(&mut t), 0, "then no begin dispatch again");
}
