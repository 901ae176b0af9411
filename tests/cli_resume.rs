//! The `train` command's checkpoints, resume and metrics file, through the built binary:
//! 6 steps straight equal 3 steps + `--resume` for the rest (metrics lines and final
//! parameters bit for bit), the `--metrics` line format, and seed reproducibility; a
//! family's checkpoint resumed without `--model` continues its own model.
//!
//! Embedded MNIST with a tiny JSON model and batches of 2,000: 4 steps per epoch, so the
//! 6-step runs validate once (end of epoch 0) and the resume point (step 3) is mid-epoch.

mod common;

use std::path::Path;

use common::bits;
use common::cli::{assert_success, command, fresh_dir, json_lines};
use serde_json::Value;
use webgpu_amp::train::checkpoint::Checkpoint;

const TINY: &str = r#"{"input": [1, 28, 28], "layers": [{"flatten": {}}, {"linear": {"out": 16}}, {"relu": {}}, {"linear": {"out": 10}}]}"#;

/// Run `webgpu-amp train` with the shared flags plus `extra`; panics with its output on
/// failure.
fn train(dir: &Path, seed: u64, extra: &[&str]) {
    let model = dir.join("tiny.json");
    std::fs::write(&model, TINY).unwrap();
    let seed = seed.to_string();
    let mut args = vec![
        "train",
        "--model",
        model.to_str().unwrap(),
        "--batch-size",
        "2000",
        "--seed",
        &seed,
        "--lr",
        "0.01",
        "--growth-interval",
        "2",
    ];
    // A scale high enough to overflow f16 gradients at first, growing every 2 good steps: the
    // scaler state changes from step to step and must survive the resume (which continues the
    // checkpoint's scaler, so `train` refuses --init-scale beside --resume).
    if !extra.contains(&"--resume") {
        args.extend_from_slice(&["--init-scale", "268435456"]);
    }
    args.extend_from_slice(extra);
    let out = command().args(&args).output().expect("run webgpu-amp");
    assert_success(&out, &format!("webgpu-amp {args:?}"));
}

fn keys(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
    k.sort();
    k
}

fn step_lines(lines: &[Value]) -> Vec<&Value> {
    lines.iter().filter(|v| v.get("step").is_some()).collect()
}

#[test]
fn resume_through_the_cli_equals_an_uninterrupted_run() {
    let dir = fresh_dir("resume");
    let p = |name: &str| dir.join(name).to_str().unwrap().to_string();

    train(
        &dir,
        3,
        &[
            "--steps",
            "6",
            "--save",
            &p("a.safetensors"),
            "--metrics",
            &p("m.jsonl"),
        ],
    );
    train(&dir, 3, &["--steps", "3", "--save", &p("b.safetensors")]);
    train(
        &dir,
        3,
        &[
            "--steps",
            "6",
            "--resume",
            &p("b.safetensors"),
            "--save",
            &p("c.safetensors"),
            "--metrics",
            &p("m2.jsonl"),
        ],
    );

    // --- The metrics format of the straight run. ---
    let m = json_lines(&dir.join("m.jsonl"));
    let step_keys = ["epoch", "loss", "lr", "scale", "skipped", "step"];
    let epoch_keys = [
        "epoch",
        "images_per_sec",
        "peak_gpu_bytes",
        "val_accuracy",
        "val_loss",
    ];
    // Steps 1-4, the end of epoch 0, steps 5-6, the summary.
    assert_eq!(m.len(), 8, "{m:#?}");
    for (i, line) in m.iter().enumerate() {
        match i {
            4 => {
                assert_eq!(keys(line), epoch_keys, "epoch line: {line}");
                assert_eq!(line["epoch"], 0);
                let acc = line["val_accuracy"].as_f64().unwrap();
                assert!((0.0..=1.0).contains(&acc), "{line}");
                assert!(line["val_loss"].as_f64().unwrap().is_finite());
                assert!(line["images_per_sec"].as_f64().unwrap() > 0.0);
                assert!(line["peak_gpu_bytes"].as_u64().unwrap() > 0);
            }
            7 => {
                assert_eq!(keys(line), ["summary"], "last line: {line}");
                let s = &line["summary"];
                assert_eq!(s["steps"], 6);
                assert_eq!(s["precision"], "amp-f16");
                assert_eq!(s["epochs"], 1);
                for k in ["final_loss", "val_accuracy", "ms_per_step", "final_scale"] {
                    assert!(s[k].is_number(), "summary `{k}`: {s}");
                }
                assert!(
                    s.get("tokens_per_sec").is_none(),
                    "images have no tokens: {s}"
                );
            }
            _ => {
                // A skipped step also says what to run to learn its cause (numerics are off).
                let mut want = step_keys.to_vec();
                if line["skipped"] == true {
                    want.insert(4, "skip_cause");
                    let note = line["skip_cause"].as_str().unwrap_or_default();
                    assert!(note.contains("--numerics"), "step line: {line}");
                }
                assert_eq!(keys(line), want, "step line: {line}");
                let step = if i < 4 { i + 1 } else { i };
                assert_eq!(line["step"], step as u64);
                assert_eq!(line["epoch"], if step <= 4 { 0 } else { 1 });
                assert!(line["skipped"].is_boolean());
                assert!(line["loss"].as_f64().unwrap().is_finite());
                let lr = line["lr"].as_f64().unwrap();
                assert!((lr - 0.01).abs() < 1e-9, "{line}");
            }
        }
    }
    let steps = step_lines(&m);
    assert!(
        steps.iter().any(|s| s["skipped"] == true),
        "the high initial scale should make some steps skip: {steps:?}"
    );

    // --- Steps 4-6 of the resumed run are those of the straight run, bit for bit. ---
    let m2 = json_lines(&dir.join("m2.jsonl"));
    let resumed = step_lines(&m2);
    assert_eq!(resumed.len(), 3, "{m2:#?}");
    for (got, want) in resumed.iter().zip(&steps[3..]) {
        assert_eq!(got, want, "resumed step differs");
    }
    // Same parameters after step 4, so the same validation at the end of epoch 0.
    let epoch_line = |lines: &[Value]| {
        lines
            .iter()
            .find(|v| v.get("val_loss").is_some())
            .cloned()
            .unwrap()
    };
    let (e1, e2) = (epoch_line(&m), epoch_line(&m2));
    assert_eq!(e1["val_loss"], e2["val_loss"]);
    assert_eq!(e1["val_accuracy"], e2["val_accuracy"]);
    assert_eq!(m2.last().unwrap()["summary"]["steps"], 6);

    // --- Final checkpoints agree on everything. ---
    let a = Checkpoint::load(&dir.join("a.safetensors")).unwrap();
    let c = Checkpoint::load(&dir.join("c.safetensors")).unwrap();
    assert_eq!(a.params.len(), 4);
    for (x, y) in a.params.iter().zip(&c.params) {
        assert_eq!((&x.name, &x.shape), (&y.name, &y.shape));
        assert!(bits(&x.values) == bits(&y.values), "`{}` differs", x.name);
    }
    assert_eq!(a.optimizer, c.optimizer);
    assert_eq!(a.scaler, c.scaler);
    assert_eq!(a.progress, c.progress);
    assert_eq!(a.progress.step, 6);
    let b = Checkpoint::load(&dir.join("b.safetensors")).unwrap();
    assert_eq!(
        (b.progress.step, b.progress.epoch, b.progress.batch_in_epoch),
        (3, 0, 3)
    );

    // --- The same seed gives the same trajectory; another seed a different one. ---
    train(&dir, 3, &["--steps", "6", "--metrics", &p("m3.jsonl")]);
    let m3 = json_lines(&dir.join("m3.jsonl"));
    assert_eq!(step_lines(&m3), steps, "same seed, different losses");
    train(&dir, 4, &["--steps", "2", "--metrics", &p("m4.jsonl")]);
    let m4 = json_lines(&dir.join("m4.jsonl"));
    let loss = |v: &[&Value]| v.iter().map(|s| s["loss"].clone()).collect::<Vec<_>>();
    assert_ne!(
        loss(&step_lines(&m4)),
        loss(&steps[..2]),
        "the seed had no effect"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// `--resume` without `--model` continues the model the checkpoint describes (a family's:
/// here a Llama trained on 16-token windows, not the text default, a GPT on 64): 2 steps +
/// 2 resumed equal 4 straight, bit for bit. A checkpoint that describes no model says to
/// give `--model`.
#[test]
fn resume_without_model_continues_the_checkpoints_own_model() {
    let dir = fresh_dir("cli-resume-own-model");
    let p = |name: &str| dir.join(name).to_str().unwrap().to_string();
    let run = |extra: &[&str]| {
        let mut args = vec!["train", "--dataset", "hamlet", "--batch-size", "4"];
        args.extend_from_slice(extra);
        let out = command().args(&args).output().expect("run webgpu-amp");
        assert_success(&out, &format!("webgpu-amp {args:?}"));
    };
    let llama = ["--model", "llama-tiny", "--seq-len", "16"];
    run(&[
        &llama[..],
        &["--steps", "4", "--save", &p("straight.safetensors")],
    ]
    .concat());
    run(&[
        &llama[..],
        &["--steps", "2", "--save", &p("half.safetensors")],
    ]
    .concat());
    let half = p("half.safetensors");
    run(&[
        "--resume",
        &half,
        "--steps",
        "4",
        "--save",
        &p("resumed.safetensors"),
    ]);
    let a = Checkpoint::load(&dir.join("straight.safetensors")).unwrap();
    let b = Checkpoint::load(&dir.join("resumed.safetensors")).unwrap();
    assert_eq!(a.model, b.model, "the resumed run trained another model");
    assert_eq!(a.params.len(), b.params.len());
    for (x, y) in a.params.iter().zip(&b.params) {
        assert_eq!((&x.name, &x.shape), (&y.name, &y.shape));
        assert!(bits(&x.values) == bits(&y.values), "`{}` differs", x.name);
    }
    assert_eq!(b.progress.step, 4);

    // A model of no family: its checkpoint names no model, and the error says what to do.
    let model = dir.join("tiny.json");
    std::fs::write(&model, TINY).unwrap();
    let args = ["train", "--model", model.to_str().unwrap(), "--steps", "1"];
    let save = p("tiny.safetensors");
    let out = command()
        .args(args)
        .args(["--save", &save])
        .output()
        .unwrap();
    assert_success(&out, "train the tiny model");
    let out = command()
        .args(["train", "--resume", &save, "--steps", "2"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "resumed into the default model: {err}"
    );
    assert!(
        err.contains("does not describe its model") && err.contains("give the --model"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// A BatchNorm ResNet trained with GPU augmentation (random crop with reflect padding,
/// random flips: Philox of seed, epoch and sample index) resumes mid-run onto the same
/// batches: 2 steps + 2 resumed equal 4 straight, parameters and running statistics bit for
/// bit, and a run without augmentation differs.
#[test]
fn augmented_resnet_resumes_onto_the_same_batches() {
    let dir = fresh_dir("cli-resume-augment");
    let p = |name: &str| dir.join(name).to_str().unwrap().to_string();
    let run = |extra: &[&str]| {
        let mut args = vec!["train", "--dataset", "default", "--batch-size", "8"];
        args.extend_from_slice(extra);
        let out = command().args(&args).output().expect("run webgpu-amp");
        assert_success(&out, &format!("webgpu-amp {args:?}"));
    };
    let aug = [
        "--model",
        "resnet-tiny",
        "--no-validate",
        "--random-crop-padding",
        "2",
        "--padding-mode",
        "reflect",
        "--flip",
        "random",
    ];
    let (straight, half, resumed) = (p("s.safetensors"), p("h.safetensors"), p("r.safetensors"));
    run(&[&aug[..], &["--steps", "4", "--save", &straight]].concat());
    run(&[&aug[..], &["--steps", "2", "--save", &half]].concat());
    run(&[
        &aug[..],
        &["--resume", &half, "--steps", "4", "--save", &resumed],
    ]
    .concat());
    let plain = p("plain.safetensors");
    run(&[
        &aug[..2],
        &["--no-validate", "--steps", "4", "--save", &plain],
    ]
    .concat());
    let load = |path: &str| Checkpoint::load(Path::new(path)).unwrap();
    let (a, b, c) = (load(&straight), load(&resumed), load(&plain));
    assert_eq!(b.progress.step, 4);
    let tensors = |ck: &Checkpoint| -> Vec<(String, Vec<u32>)> {
        let floats = ck.params.iter().map(|t| (t.name.clone(), bits(&t.values)));
        let ints = (ck.buffers.iter()).map(|t| (t.name.clone(), t.values.words()));
        floats.chain(ints).collect()
    };
    assert!(a.params.iter().any(|t| t.name.ends_with("running_var")));
    assert_eq!(
        tensors(&a),
        tensors(&b),
        "the resumed run saw other batches"
    );
    assert_ne!(tensors(&a), tensors(&c), "augmentation changed nothing");
    let _ = std::fs::remove_dir_all(dir);
}
