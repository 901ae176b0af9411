//! A GPT with dropout resumes bit for bit through the CLI: 4 steps straight equal 2 steps +
//! `--resume` for 2 more (every metrics line: loss, scale, lr, skipped; the loss estimates;
//! the final parameters and optimizer state), under f32 and under amp-f16 with gradient
//! accumulation. The dropout masks (keyed by seed, micro-batch, layer and element) and the
//! cosine schedule (warm-up, decay) both continue where the checkpoint left them, and the
//! straight run's loss estimates (`--eval-every 2`; the split run's first part has none) do
//! not disturb training.
//!
//! gpt-tiny's sizes with dropout 0.1 as a `{"gpt": ...}` JSON file, on the embedded text.
//! The amp-f16 case keeps its moments in moments files (the test hook lowers the header's
//! limit to 0 bytes), the path a model too big for the header (`gpt-char`) takes.

mod common;

use std::path::{Path, PathBuf};

use common::bits;
use common::cli::{assert_success, command, fresh_dir, json_lines};
use serde_json::Value;
use webgpu_amp::train::checkpoint::{Checkpoint, INLINE_MOMENTS_MAX_ENV};

const GPT: &str = r#"{"gpt": {"vocab_size": 65, "block_size": 64, "n_layer": 2, "n_head": 4, "n_embd": 64, "dropout": 0.1, "bias": false}}"#;

/// `webgpu-amp train` on the JSON GPT with the schedule flags, plus `extra`.
fn train(dir: &Path, model_json: &str, extra: &[&str]) {
    train_with_env(dir, model_json, extra, &[]);
}

fn train_with_env(dir: &Path, model_json: &str, extra: &[&str], env: &[(&str, &str)]) {
    let out = run_train(dir, model_json, extra, env);
    assert_success(&out, &format!("webgpu-amp {extra:?}"));
}

fn run_train(
    dir: &Path,
    model_json: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> std::process::Output {
    let model = dir.join(format!("gpt-{}.json", model_json.len()));
    std::fs::write(&model, model_json).unwrap();
    let mut args = vec![
        "train",
        "--model",
        model.to_str().unwrap(),
        "--dataset",
        "hamlet",
        "--seed",
        "5",
        "--lr-schedule",
        "cosine",
        "--warmup-steps",
        "1",
        "--lr-decay-steps",
        "4",
        "--min-lr",
        "1e-4",
        "--eval-batches",
        "2",
    ];
    args.extend_from_slice(extra);
    command()
        .args(&args)
        .envs(env.iter().copied())
        .output()
        .expect("run webgpu-amp")
}

fn with_key<'a>(lines: &'a [Value], key: &str) -> Vec<&'a Value> {
    lines.iter().filter(|v| v.get(key).is_some()).collect()
}

/// The moments files beside `checkpoint` (`NAME.optimizer-CRC.safetensors`).
fn moments_files(checkpoint: &str) -> Vec<String> {
    let path = Path::new(checkpoint);
    let prefix = format!("{}.optimizer-", path.file_name().unwrap().to_str().unwrap());
    common::file_names(path.parent().unwrap(), |f| f.starts_with(&prefix))
}

/// Checks the resume of `name`'s run; returns the folder of its files.
fn check_resume(name: &str, precision_flags: &[&str], moments_in_file: bool) -> PathBuf {
    let dir = fresh_dir(name);
    let env: &[(&str, &str)] = if moments_in_file {
        &[(INLINE_MOMENTS_MAX_ENV, "0")]
    } else {
        &[]
    };
    let p = |f: &str| dir.join(f).to_str().unwrap().to_string();
    let (a, ma) = (p("a.safetensors"), p("a.jsonl"));
    let (b, mb1) = (p("b.safetensors"), p("b1.jsonl"));
    let (c, mb2) = (p("c.safetensors"), p("b2.jsonl"));
    let with = |extra: &[&'static str], rest: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = precision_flags.iter().map(|s| s.to_string()).collect();
        v.extend(extra.iter().map(|s| s.to_string()));
        v.extend(rest.iter().map(|s| s.to_string()));
        v
    };
    let run = |args: Vec<String>| {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        train_with_env(&dir, GPT, &refs, env);
    };
    run(with(
        &["--steps", "4", "--eval-every", "2"],
        &["--save", &a, "--metrics", &ma],
    ));
    run(with(
        &["--steps", "2", "--no-validate"],
        &["--save", &b, "--metrics", &mb1],
    ));
    run(with(
        &["--steps", "4", "--eval-every", "2"],
        &["--resume", &b, "--save", &c, "--metrics", &mb2],
    ));

    let straight = json_lines(Path::new(&ma));
    let mut split = json_lines(Path::new(&mb1));
    let resumed = json_lines(Path::new(&mb2));
    split.extend(resumed.iter().cloned());
    // Every step line (step, epoch, loss, scale, skipped, lr) bit for bit.
    let steps = with_key(&straight, "loss");
    assert_eq!(steps.len(), 4, "{straight:#?}");
    assert_eq!(
        steps,
        with_key(&split, "loss"),
        "{name}: straight vs resumed"
    );
    let lrs: Vec<f64> = steps.iter().map(|s| s["lr"].as_f64().unwrap()).collect();
    assert!(
        lrs[0] < lrs[1] && lrs[1] > lrs[2] && lrs[2] > lrs[3],
        "{name}: warm-up then decay: {lrs:?}"
    );

    // Estimates after steps 2 and 4; the resumed run's at step 4 is the straight run's.
    let evals = with_key(&straight, "train_loss");
    let eval_steps: Vec<u64> = evals.iter().map(|e| e["step"].as_u64().unwrap()).collect();
    assert_eq!(eval_steps, [2, 4], "{name}");
    assert_eq!(with_key(&resumed, "train_loss"), [evals[1]], "{name}");
    for e in &evals {
        assert!(e["val_loss"].as_f64().unwrap().is_finite(), "{e}");
    }
    // The final validation of a text uses the estimate's random batches of that step.
    let summary = &straight.last().unwrap()["summary"];
    assert_eq!(summary["val_loss"], evals[1]["val_loss"], "{name}");
    // A GPT's summary counts tokens: samples of block_size (64) tokens each.
    let (samples, tokens) = (
        summary["images_per_sec"].as_f64().unwrap(),
        summary["tokens_per_sec"].as_f64().unwrap(),
    );
    assert!(
        samples > 0.0 && (tokens / samples - 64.0).abs() < 1e-9,
        "{name}: {summary}"
    );

    let (ca, cc) = (
        Checkpoint::load(Path::new(&a)).unwrap(),
        Checkpoint::load(Path::new(&c)).unwrap(),
    );
    assert_eq!(ca.params.len(), cc.params.len());
    for (x, y) in ca.params.iter().zip(&cc.params) {
        assert_eq!(x.name, y.name);
        assert_eq!(bits(&x.values), bits(&y.values), "{name}: {}", x.name);
    }
    assert_eq!(ca.optimizer, cc.optimizer, "{name}: optimizer state");
    let opt = ca.optimizer.as_ref().unwrap();
    assert_eq!(opt.moments.len(), 2, "{name}: exp_avg and exp_avg_sq");
    assert_eq!(opt.unavailable, None, "{name}");
    // One moments file per checkpoint when the moments are outside the header, none else.
    for ck in [&a, &b, &c] {
        let files = moments_files(ck);
        let named = Checkpoint::load(Path::new(ck))
            .unwrap()
            .optimizer
            .unwrap()
            .moments_file;
        if moments_in_file {
            assert_eq!(files.len(), 1, "{name}: {ck}: {files:?}");
            assert_eq!(
                named.map(|f| f.file),
                Some(files[0].clone()),
                "{name}: {ck}"
            );
        } else {
            assert_eq!((files.len(), named), (0, None), "{name}: {ck}");
        }
    }
    if moments_in_file {
        // Without its moments file the checkpoint cannot resume, and says which file.
        let file = &moments_files(&b)[0];
        std::fs::remove_file(dir.join(file)).unwrap();
        let refs: Vec<String> = with(&["--steps", "4"], &["--resume", &b]);
        let refs: Vec<&str> = refs.iter().map(String::as_str).collect();
        let out = run_train(&dir, GPT, &refs, env);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(file.as_str()) && err.contains("cannot be read"),
            "{name}: resume without the moments file: {err}"
        );
    }
    assert_eq!(ca.scaler, cc.scaler, "{name}: scaler state");
    assert_eq!(ca.progress, cc.progress, "{name}: progress");
    dir
}

#[test]
fn gpt_with_dropout_resumes_bit_for_bit_f32() {
    let f32_dir = check_resume("f32", &["--precision", "f32", "--batch-size", "2"], false);

    // Dropout is really on: the same first step without it has another loss.
    let dir = fresh_dir("nodropout");
    let m = dir.join("m.jsonl");
    train(
        &dir,
        &GPT.replace("\"dropout\": 0.1", "\"dropout\": 0.0"),
        &[
            "--precision",
            "f32",
            "--batch-size",
            "2",
            "--steps",
            "1",
            "--no-validate",
            "--metrics",
            m.to_str().unwrap(),
        ],
    );
    let without = json_lines(&m);
    let with = json_lines(&f32_dir.join("a.jsonl"));
    assert_ne!(
        with_key(&without, "loss")[0]["loss"],
        with_key(&with, "loss")[0]["loss"],
        "dropout 0.1 and 0.0 gave the same first loss"
    );
}

#[test]
fn gpt_with_dropout_resumes_bit_for_bit_amp_f16_accumulating_through_moments_files() {
    check_resume(
        "amp-f16",
        &[
            "--precision",
            "amp-f16",
            "--batch-size",
            "1",
            "--grad-accum",
            "2",
        ],
        true,
    );
}
