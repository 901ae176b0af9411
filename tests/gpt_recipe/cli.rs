//! The CLI's GPT defaults (nanoGPT's shakespeare-char recipe, each step's lr in the metrics)
//! and the recipe flags' errors.

use std::path::Path;

use serde_json::Value;
use webgpu_amp::optim::{OptimizerConfig, widen};
use webgpu_amp::train::checkpoint::Checkpoint;

use super::common::bits;
use super::common::cli::{assert_success, command, fresh_dir, json_lines};
use super::nanogpt_lr;

fn train_ok(args: &[&str]) {
    let out = command().args(args).output().expect("run webgpu-amp");
    assert_success(&out, &format!("webgpu-amp {args:?}"));
}

/// A GPT with no recipe flags trains with nanoGPT's shakespeare-char recipe: exactly the run
/// that names every flag (AdamW lr 1e-3, betas (0.9, 0.99), weight decay 0.1, clipping at
/// 1, cosine from lr to lr/10 over --steps with steps/50 warm-up steps), and each metrics
/// line reports the step's scheduled lr.
#[test]
fn a_gpt_defaults_to_nanogpts_recipe() {
    let dir = fresh_dir("defaults");
    let p = |name: &str| dir.join(name).to_str().unwrap().to_string();
    let common = [
        "train",
        "--model",
        "gpt-tiny",
        "--steps",
        "3",
        "--batch-size",
        "1",
        "--no-validate",
    ];
    let mut defaults = common.to_vec();
    let (m1, c1) = (p("defaults.jsonl"), p("defaults.safetensors"));
    defaults.extend(["--metrics", &m1, "--save", &c1]);
    train_ok(&defaults);
    let mut explicit = common.to_vec();
    let (m2, c2) = (p("explicit.jsonl"), p("explicit.safetensors"));
    explicit.extend([
        "--optimizer",
        "adamw",
        "--lr",
        "1e-3",
        "--beta1",
        "0.9",
        "--beta2",
        "0.99",
        "--eps",
        "1e-8",
        "--weight-decay",
        "0.1",
        "--clip-grad-norm",
        "1",
        "--lr-schedule",
        "cosine",
        "--warmup-steps",
        "0",
        "--min-lr",
        "1e-4",
        "--lr-decay-steps",
        "3",
    ]);
    explicit.extend(["--metrics", &m2, "--save", &c2]);
    train_ok(&explicit);

    let (a, b) = (json_lines(Path::new(&m1)), json_lines(Path::new(&m2)));
    let steps = |m: &[Value]| -> Vec<Value> {
        m.iter()
            .filter(|v| v.get("loss").is_some())
            .cloned()
            .collect()
    };
    assert_eq!(steps(&a), steps(&b));
    // 3 steps: 3 / 50 = 0 warm-up steps, the decay to lr / 10 over the 3 steps.
    for (i, line) in steps(&a).iter().enumerate() {
        assert_eq!(line["step"], i as u64 + 1);
        assert_eq!(
            line["lr"].as_f64().unwrap(),
            widen(nanogpt_lr(1e-3, 1e-4, 0, 3, i as u64)),
            "{line}"
        );
    }
    // 50 steps: one warm-up step (half the rate first; with none it would be the full rate).
    let m3 = p("fifty.jsonl");
    let mut fifty: Vec<&str> = common
        .iter()
        .map(|a| if *a == "3" { "50" } else { a })
        .collect();
    fifty.extend(["--metrics", &m3]);
    train_ok(&fifty);
    let lines = steps(&json_lines(Path::new(&m3)));
    assert_eq!(lines.len(), 50);
    for (i, line) in lines.iter().enumerate() {
        assert_eq!(
            line["lr"].as_f64().unwrap(),
            widen(nanogpt_lr(1e-3, 1e-4, 1, 50, i as u64)),
            "{line}"
        );
    }
    assert_eq!(lines[0]["lr"].as_f64().unwrap(), 5e-4, "warm-up: lr * 1/2");
    let (ca, cb) = (
        Checkpoint::load(Path::new(&c1)).unwrap(),
        Checkpoint::load(Path::new(&c2)).unwrap(),
    );
    assert_eq!(
        ca.optimizer.as_ref().unwrap().config,
        OptimizerConfig::AdamW {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.99,
            eps: 1e-8,
            weight_decay: 0.1
        }
    );
    for (x, y) in ca.params.iter().zip(&cb.params) {
        assert_eq!(bits(&x.values), bits(&y.values), "{}", x.name);
    }
}

/// Bad recipe flags end with one `error:` line naming the flag, before any training.
#[test]
fn bad_recipe_flags_are_clear_errors() {
    let cases: [(&[&str], &str); 7] = [
        (
            &["--model", "gpt-tiny", "--steps", "4", "--warmup-steps", "4"],
            "--warmup-steps must be 0 to 2^53, fewer than the decay steps, got 4, and the decay ends at step 4",
        ),
        (
            &["--model", "gpt-tiny", "--lr-schedule", "linear"],
            "unknown --lr-schedule `linear`",
        ),
        (
            &["--model", "mlp", "--min-lr", "1e-4"],
            "--min-lr needs --lr-schedule cosine",
        ),
        (
            &[
                "--model",
                "mlp",
                "--lr-schedule",
                "cosine",
                "--min-lr",
                "-1",
            ],
            "--min-lr must be finite, >= 0 and at most the learning rate, got -1",
        ),
        (
            &["--model", "gpt-tiny", "--eval-every", "0"],
            "--eval-every must be 1 to 2^53, got 0",
        ),
        (
            &["--model", "gpt-tiny", "--eval-batches", "0"],
            "--eval-batches must be 1 to 65536, got 0",
        ),
        (
            &["--model", "gpt-tiny", "--beta2", "1"],
            "--beta2 must be in [0, 1), got 1",
        ),
    ];
    for (flags, message) in cases {
        let mut args = vec!["train"];
        args.extend_from_slice(flags);
        let out = command().args(&args).output().expect("run webgpu-amp");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(
            stderr.starts_with("error: ") && stderr.contains(message),
            "{args:?}: {stderr}"
        );
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
    }
}
