//! Acceptance: `gpt-tiny` on the embedded text learns, and amp-f16 learns what f32 learns.
//! From the same initial weights, on the same batches, with nanoGPT's recipe (AdamW with
//! parameter groups, clipping at 1, warm-up and cosine decay), both precisions train
//! `STEPS` steps; their validation losses, on the same random validation batches, must be
//! within 0.03 of each other and both clearly below the unigram baseline (the entropy of the
//! training text's character distribution, computed here).

mod common;

use common::ctx;
use webgpu_amp::amp::policy::Precision;
use webgpu_amp::data::DataSource;
use webgpu_amp::data::embedded_text::hamlet;
use webgpu_amp::nn::LossKind;
use webgpu_amp::optim::{LrSchedule, OptimizerConfig};
use webgpu_amp::train::estimate::Draw;
use webgpu_amp::train::evaluate::evaluate_indices;
use webgpu_amp::train::{ModelChoice, Run, RunConfig, StepConfig, model_and_data};

const STEPS: u64 = 40;
const BATCH: usize = 4;
const LR: f32 = 3e-3;
/// Validation batches of `BATCH` windows of 64 characters: 4,096 tokens.
const VAL_BATCHES: usize = 16;
/// How far below the unigram baseline both runs must end (nats per character).
const MARGIN: f64 = 0.15;

/// Entropy in nats of the character distribution of the training part of the text: the loss
/// of the best model that ignores context.
fn unigram_entropy() -> f64 {
    let corpus = hamlet().unwrap();
    let train = &corpus.ids()[..corpus.train_len()];
    let mut counts = vec![0u64; corpus.vocab().len()];
    for &id in train {
        counts[id as usize] += 1;
    }
    let n = train.len() as f64;
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f64 / n;
            -p * p.ln()
        })
        .sum()
}

#[test]
fn amp_f16_learns_what_f32_learns_on_the_embedded_text() {
    let ctx = ctx();
    let started = std::time::Instant::now();
    let source: DataSource = "hamlet".parse().unwrap();
    let (spec, split) =
        model_and_data(Some(&ModelChoice::Preset("gpt-tiny".into())), &source, true).unwrap();
    let val = split
        .validation
        .as_ref()
        .expect("the text has a validation split");
    let init = spec.init_params(0);
    let draw = Draw {
        batch_size: BATCH,
        batches: VAL_BATCHES,
        seed: 0,
        step: STEPS,
    };
    let batches: Vec<Vec<usize>> = draw.validation_batches(val).collect();
    let baseline = unigram_entropy();
    let mut losses = Vec::new();
    for precision in [Precision::F32, Precision::AmpF16] {
        let config = RunConfig::new(
            StepConfig::new(
                precision,
                LossKind::CrossEntropy,
                OptimizerConfig::AdamW {
                    lr: LR,
                    beta1: 0.9,
                    beta2: 0.99,
                    eps: 1e-8,
                    weight_decay: 0.1,
                },
            )
            .clip_grad_norm(Some(1.0))
            .lr_schedule(LrSchedule::Cosine {
                warmup_steps: 4,
                decay_steps: STEPS,
                min_lr: LR / 10.0,
            }),
            BATCH,
        )
        .steps(STEPS)
        .validate_each_epoch(false);
        let mut run = Run::new(ctx, spec.clone(), config, &split.train, &init, None).unwrap();
        let summary = run.run(ctx, &split, &mut |_| {}).unwrap();
        assert_eq!(summary.steps, STEPS);
        let eval = evaluate_indices(ctx, &mut run.trainer, val, &batches).unwrap();
        assert_eq!(eval.samples, BATCH * VAL_BATCHES * 64, "tokens evaluated");
        println!(
            "{precision}: first loss {:.4}, last loss {:.4}, validation loss {:.4} \
             (unigram baseline {baseline:.4}), skipped steps {}",
            summary.first_loss.unwrap(),
            summary.final_loss.unwrap(),
            eval.loss,
            summary.skipped_steps
        );
        losses.push(eval.loss as f64);
    }
    println!("{:.1} s", started.elapsed().as_secs_f64());
    let (f32_loss, amp_loss) = (losses[0], losses[1]);
    assert!(
        (amp_loss - f32_loss).abs() <= 0.03,
        "amp-f16 validation loss {amp_loss:.4} is not within 0.03 of f32's {f32_loss:.4}"
    );
    for (name, loss) in [("f32", f32_loss), ("amp-f16", amp_loss)] {
        assert!(
            loss < baseline - MARGIN,
            "{name} validation loss {loss:.4} is not {MARGIN} below the unigram baseline {baseline:.4}"
        );
    }
}
