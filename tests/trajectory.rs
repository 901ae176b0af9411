//! Pins short training trajectories bit for bit: `webgpu-amp train --metrics` for mlp,
//! mnist-cnn and simple-cnn under f32, amp-f16, amp-bf16 and f16 (plus gradient accumulation
//! with clipping), and gpt-tiny under f32 and amp-f16, must print exactly the losses, scales,
//! skip flags, learning rates and final validation loss recorded in
//! `tests/fixtures/trajectories.json`.
//!
//! Bits depend on the adapter (its compiler's rounding and fusing), so records are kept per
//! adapter and f16 storage. On an adapter with no record the test still checks something
//! that can fail: two runs of every case must agree bit for bit (results are the same run to
//! run on one adapter), and it says loudly that the cross-version pin did not run there.
//! `WEBGPU_AMP_RECORD_TRAJECTORIES=1` writes the records for the current adapter.
//!
//! The native f16 cases (`COOP_CASES`, gpt-tiny's amp-f16 among them: its fused attention
//! takes the tensor-core body) also run on tensor cores with both fragment shapes
//! (`--tensor-cores on:8x8`, `on:16x16`), keyed by the tensor cores the run reports: adapters
//! without them (Mesa 22's lavapipe) say NOT CHECKED, Mesa 26's lavapipe checks them (`scripts/lavapipe-coop.sh cargo
//! test --test trajectory tensor_core`; the CLI runs under $WEBGPU_AMP_RUNNER).

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;

static RECORD_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

const FIXTURE: &str = "tests/fixtures/trajectories.json";

/// (model, precision, extra flags). The CNN cases skip validation (2,000 images through a
/// CNN take ~20 s on lavapipe); the MLP cases pin the validation forward.
type Cases = &'static [(&'static str, &'static str, &'static [&'static str])];

const CASES: Cases = &[
    ("mlp", "f32", &[]),
    ("mlp", "amp-f16", &[]),
    ("mlp", "amp-bf16", &[]),
    ("mlp", "f16", &[]),
    (
        "mlp",
        "amp-f16",
        &["--grad-accum", "2", "--clip-grad-norm", "1.0"],
    ),
    ("mnist-cnn", "f32", &["--no-validate"]),
    ("mnist-cnn", "amp-f16", &["--no-validate"]),
    ("mnist-cnn", "amp-bf16", &["--no-validate"]),
    ("mnist-cnn", "f16", &["--no-validate"]),
    ("simple-cnn", "f32", &["--no-validate"]),
    ("simple-cnn", "amp-f16", &["--no-validate"]),
    ("simple-cnn", "amp-bf16", &["--no-validate"]),
    ("simple-cnn", "f16", &["--no-validate"]),
    // A GPT on the embedded text, with its nanoGPT recipe (AdamW, clipping, cosine schedule)
    // and without the periodic estimates (a GPT's validation is 200 batches).
    ("gpt-tiny", "f32", &["--no-validate"]),
    ("gpt-tiny", "amp-f16", &["--no-validate"]),
];

/// The data set and batch size of a case: the embedded MNIST subset in batches of 16, or for
/// a GPT the embedded text in batches of 2 (2 × 64 tokens; more takes seconds a step on
/// lavapipe).
fn data_and_batch(model: &str) -> (&'static str, &'static str) {
    if model.starts_with("gpt") {
        ("hamlet", "2")
    } else {
        ("default", "16")
    }
}

/// The f16 cases on tensor cores (each also with `--tensor-cores on:8x8` or `on:16x16`).
const COOP_CASES: Cases = &[
    ("mlp", "amp-f16", &[]),
    ("mlp", "f16", &[]),
    ("mnist-cnn", "amp-f16", &["--no-validate"]),
    ("simple-cnn", "amp-f16", &["--no-validate"]),
    ("simple-cnn", "f16", &["--no-validate"]),
    // The GPT's projections and its fused attention's tensor-core body.
    ("gpt-tiny", "amp-f16", &["--no-validate"]),
];

fn case_name(model: &str, precision: &str, extra: &[&str]) -> String {
    let mut name = format!("{model} {precision}");
    for flag in extra {
        name.push(' ');
        name.push_str(flag);
    }
    name
}

/// Runs one case and returns its summary line and what is pinned: every step line's step, loss, scale, skipped
/// and lr, then the summary's validation loss, accuracy and final scale, as JSON text
/// (serde_json prints f32 exactly, so equal text means equal bits).
fn trajectory(
    model: &str,
    precision: &str,
    extra: &[&str],
    storage: &str,
) -> (String, Vec<String>) {
    let dir = std::env::temp_dir().join(format!("webgpu-amp-trajectory-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let metrics = dir.join(format!(
        "{storage}-{}.jsonl",
        case_name(model, precision, extra).replace([' ', '.'], "_")
    ));
    let (dataset, batch) = data_and_batch(model);
    let out = common::cli::command()
        .args([
            "train",
            "--model",
            model,
            "--precision",
            precision,
            "--dataset",
            dataset,
            "--steps",
            "6",
            "--batch-size",
            batch,
            "--seed",
            "3",
            // A huge initial scale backs off (skipped steps) and a short interval grows it
            // again, so the scaler's whole sequence is pinned (ignored without a scaler).
            "--init-scale",
            "1048576",
            "--growth-interval",
            "2",
            "--f16-storage",
            storage,
            "--metrics",
        ])
        .arg(&metrics)
        .args(extra)
        .output()
        .expect("run webgpu-amp");
    assert!(
        out.status.success(),
        "{model} {precision}: train failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&metrics).expect("metrics file");
    let mut pinned = Vec::new();
    let mut adapter = None;
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).expect("metrics line is JSON");
        if v.get("loss").is_some() {
            let keep: BTreeMap<&str, &Value> = ["step", "loss", "scale", "skipped", "lr"]
                .iter()
                .map(|k| (*k, &v[*k]))
                .collect();
            pinned.push(serde_json::to_string(&keep).expect("json"));
        } else if let Some(s) = v.get("summary") {
            let keep: BTreeMap<&str, &Value> = ["val_loss", "val_accuracy", "final_scale"]
                .iter()
                .map(|k| (*k, &s[*k]))
                .collect();
            pinned.push(serde_json::to_string(&keep).expect("json"));
            adapter = Some(s.to_string());
        }
    }
    assert!(
        pinned.len() == 7,
        "{model} {precision}: expected 6 steps and a summary, got {pinned:?}"
    );
    (adapter.expect("summary line"), pinned)
}

/// Which adapter ran: backend, adapter and f16 storage, as the run's summary reports them,
/// and the tensor cores where the run used them.
fn adapter_key(summary: &str) -> String {
    let v: Value = serde_json::from_str(summary).expect("summary line");
    let mut key = format!(
        "{} / {} / f16 {}",
        v["backend"].as_str().unwrap_or("?"),
        v["adapter"].as_str().unwrap_or("?"),
        v["f16_storage"].as_str().unwrap_or("?")
    );
    if let Some(tc) = v.get("tensor_cores").and_then(Value::as_str) {
        key += &format!(" / tensor cores {tc}");
    }
    key
}

fn fixture_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(FIXTURE)
}

/// Runs `cases` (each with `flags` added) and checks them against the record of the adapter
/// key they report; returns that key.
fn check(storage: &str, cases: Cases, flags: &[&'static str]) -> String {
    let path = fixture_path();
    let records: BTreeMap<String, BTreeMap<String, Vec<String>>> =
        match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text).expect("trajectories.json"),
            Err(_) => BTreeMap::new(),
        };
    let mut key = String::new();
    let with_flags = |extra: &[&'static str]| [extra, flags].concat();
    let runs: Vec<(String, Vec<String>)> = cases
        .iter()
        .map(|(m, p, extra)| {
            let (summary, pinned) = trajectory(m, p, &with_flags(extra), storage);
            let case_key = adapter_key(&summary);
            assert!(key.is_empty() || key == case_key, "{case_key} after {key}");
            key = case_key;
            (case_name(m, p, extra), pinned)
        })
        .collect();
    if std::env::var("WEBGPU_AMP_RECORD_TRAJECTORIES").as_deref() == Ok("1") {
        // Both tests record into one file: re-read it under the lock.
        let _guard = RECORD_LOCK.lock().expect("record lock");
        let mut records: BTreeMap<String, BTreeMap<String, Vec<String>>> =
            match std::fs::read_to_string(&path) {
                Ok(text) => serde_json::from_str(&text).expect("trajectories.json"),
                Err(_) => BTreeMap::new(),
            };
        records.insert(key.clone(), runs.into_iter().collect());
        std::fs::create_dir_all(path.parent().expect("dir")).expect("fixtures dir");
        let text = serde_json::to_string_pretty(&records).expect("json");
        std::fs::write(&path, text + "\n").expect("write trajectories.json");
        eprintln!("recorded trajectories for `{key}` in {FIXTURE}");
        return key;
    }
    match records.get(&key) {
        Some(pinned) => {
            for (name, got) in &runs {
                let want = pinned
                    .get(name)
                    .unwrap_or_else(|| panic!("{FIXTURE} has no case `{name}` for `{key}`"));
                for (i, (g, w)) in got.iter().zip(want).enumerate() {
                    assert_eq!(
                        g, w,
                        "`{name}` on `{key}`: line {i} differs from the pinned trajectory"
                    );
                }
                assert_eq!(got.len(), want.len(), "`{name}`: line count");
            }
        }
        None => {
            common::not_checked(&format!(
                "{FIXTURE} pins no trajectory for `{key}`: the cross-version pin did not run \
                 on this adapter (run-to-run determinism is checked instead)"
            ));
            for (m, p, extra) in cases {
                let name = case_name(m, p, extra);
                let first = &runs.iter().find(|(n, _)| *n == name).expect("ran").1;
                let (_, again) = trajectory(m, p, &with_flags(extra), storage);
                assert_eq!(first, &again, "`{name}` on `{key}`: two runs differ");
            }
        }
    }
    key
}

#[test]
fn trajectories_are_pinned_auto_storage() {
    check("auto", CASES, &[]);
}

#[test]
fn trajectories_are_pinned_packed_storage() {
    check("packed", CASES, &[]);
}

#[test]
fn tensor_core_trajectories_are_pinned_with_both_fragment_shapes() {
    for (edge, flag) in [(8, "on:8x8"), (16, "on:16x16")] {
        if common::coop_ctx(edge, "tensor-core trajectories").is_none() {
            continue;
        }
        let key = check("native", COOP_CASES, &["--tensor-cores", flag]);
        let used = format!("/ tensor cores {edge}x{edge}x{edge} f16*f16->f32");
        assert!(key.contains(&used), "the runs did not report {used}: {key}");
    }
}
