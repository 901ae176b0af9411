//! No run that does nothing exits 0, and a resume continues exactly where its checkpoint
//! stood or is refused: grad-accum larger than an epoch's batches, a resume at or past its
//! limit (it rewrote the checkpoint having trained nothing), flags that move the data
//! position, and checkpoint metadata edited into something inconsistent.

use std::path::Path;

use super::common::cli::{error_line, output_text};
use super::{TempDir, run};
use webgpu_amp::train::checkpoint::Checkpoint;

/// The quick mlp run (64 synthetic samples, batch 8) for `steps`, saved to `save`.
fn quick_train(save: &Path, steps: &str, extra: &[&str]) -> std::process::Output {
    let s = save.display().to_string();
    let mut args = vec![
        "train",
        "--model",
        "mlp",
        "--dataset",
        "synthetic:64",
        "--batch-size",
        "8",
        "--steps",
        steps,
        "--no-validate",
        "--save",
        &s,
    ];
    args.extend_from_slice(extra);
    run(&args)
}

#[test]
fn grad_accum_past_an_epochs_batches_is_refused() {
    let out = run(&[
        "train",
        "--model",
        "mlp",
        "--dataset",
        "synthetic:8",
        "--batch-size",
        "8",
        "--grad-accum",
        "2",
        "--epochs",
        "1",
        "--no-validate",
    ]);
    let line = error_line(&out, "grad-accum 2 over one batch");
    for needle in [
        "--grad-accum 2",
        "make 1 per epoch",
        "--epochs 1",
        "no step",
    ] {
        assert!(line.contains(needle), "`{needle}` missing: {line}");
    }
}

#[test]
fn resuming_at_or_past_the_limit_is_refused_and_leaves_the_file() {
    let tmp = TempDir::new("past");
    let save = tmp.path("ck.safetensors");
    let out = quick_train(&save, "10", &[]);
    assert!(out.status.success(), "{}", output_text(&out));
    let before = std::fs::read(&save).unwrap();
    let s = save.display().to_string();
    for steps in ["5", "10"] {
        let out = quick_train(&save, steps, &["--resume", &s]);
        let line = error_line(&out, "resume past the limit");
        assert!(
            line.contains(&format!("at step 10, at or past --steps {steps}")),
            "{line}"
        );
    }
    assert_eq!(
        std::fs::read(&save).unwrap(),
        before,
        "the checkpoint was rewritten"
    );
}

#[test]
fn resuming_with_another_data_position_is_refused() {
    let tmp = TempDir::new("moved");
    let save = tmp.path("ck.safetensors");
    let out = quick_train(&save, "3", &[]);
    assert!(out.status.success(), "{}", output_text(&out));
    let s = save.display().to_string();
    // (batch size, data set, extra flags, what the line must say)
    let cases: &[(&str, &str, &[&str], &str)] = &[
        (
            "16",
            "synthetic:64",
            &[],
            "--batch-size 16, but the checkpoint's run used --batch-size 8",
        ),
        (
            "8",
            "synthetic:64",
            &["--grad-accum", "2"],
            "--grad-accum 2, but the checkpoint's run used --grad-accum 1",
        ),
        (
            "8",
            "synthetic:64",
            &["--no-shuffle"],
            "--no-shuffle, but the checkpoint's run shuffled its data",
        ),
        (
            "8",
            "synthetic:128",
            &[],
            "the data has 128 training samples",
        ),
    ];
    for (batch, data, extra, needle) in cases {
        let mut args = vec![
            "train",
            "--model",
            "mlp",
            "--dataset",
            data,
            "--batch-size",
            batch,
            "--steps",
            "6",
            "--no-validate",
            "--resume",
            &s,
        ];
        args.extend_from_slice(extra);
        let out = run(&args);
        let line = error_line(&out, needle);
        assert!(line.contains(needle), "`{needle}` missing: {line}");
    }
}

/// Rewrite `ck`'s header metadata with `edit` (tensors unchanged) into `path`.
fn edited(src: &Path, path: &Path, edit: impl Fn(&mut std::collections::HashMap<String, String>)) {
    let bytes = std::fs::read(src).unwrap();
    let tensors = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let mut meta = meta.metadata().clone().unwrap_or_default();
    edit(&mut meta);
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors.tensors();
    let out = safetensors::serialize(views, Some(meta)).unwrap();
    std::fs::write(path, out).unwrap();
}

#[test]
fn inconsistent_checkpoint_metadata_is_refused_naming_the_key() {
    let tmp = TempDir::new("meta");
    let save = tmp.path("ck.safetensors");
    // Adam: the optimizer counts its steps, so progress and optimizer can be checked.
    let out = quick_train(&save, "3", &["--optimizer", "adam"]);
    assert!(out.status.success(), "{}", output_text(&out));
    let progress = |m: &std::collections::HashMap<String, String>| -> serde_json::Value {
        serde_json::from_str(&m["progress"]).unwrap()
    };
    type Edit = Box<dyn Fn(&mut std::collections::HashMap<String, String>)>;
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "no-optimizer",
            Box::new(|m| {
                m.remove("optimizer");
            }),
            "metadata `optimizer` is missing",
        ),
        (
            "no-progress",
            Box::new(|m| {
                m.remove("progress");
            }),
            "metadata `optimizer` has taken 3 steps, but `progress` says 0",
        ),
        (
            "batch",
            Box::new(move |m| {
                let mut p = progress(m);
                p["batch_in_epoch"] = 1_000_000_000u64.into();
                m.insert("progress".into(), p.to_string());
            }),
            "metadata `progress` says batch 1000000000",
        ),
        (
            "fp8",
            Box::new(|m| {
                m.insert("precision".into(), "fp8".into());
            }),
            "metadata `precision` is \"fp8\"",
        ),
        (
            "format",
            Box::new(|m| {
                m.insert("format".into(), "webgpu-amp/2".into());
            }),
            "metadata `format` is \"webgpu-amp/2\"",
        ),
    ];
    for (name, edit, needle) in cases {
        let path = tmp.path(&format!("{name}.safetensors"));
        edited(&save, &path, edit);
        let p = path.display().to_string();
        let out = quick_train(
            &tmp.path("out.safetensors"),
            "6",
            &["--optimizer", "adam", "--resume", &p],
        );
        let line = error_line(&out, name);
        assert!(line.contains(needle), "{name}: `{needle}` missing: {line}");
    }
    // The untouched file still resumes.
    let s = save.display().to_string();
    let out = quick_train(
        &tmp.path("out.safetensors"),
        "6",
        &["--optimizer", "adam", "--resume", &s],
    );
    assert!(out.status.success(), "{}", output_text(&out));
    Checkpoint::load(&tmp.path("out.safetensors")).unwrap();
}
