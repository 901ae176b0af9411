//! Bad input to the real `webgpu-amp` binary: broken data files, broken models and parameter
//! files, bad flags, a batch too big for the device, a diverging run. Each must end with a
//! non-zero exit and exactly one `error:` line on stderr that names the file (where there is
//! one) and the problem; never a panic.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

#[path = "cli_errors/bad_inputs.rs"]
mod bad_inputs;
#[path = "cli_errors/closed_stdout.rs"]
mod closed_stdout;
mod common;
#[path = "cli_errors/data_files.rs"]
mod data_files;
#[path = "cli_errors/fixtures.rs"]
mod fixtures;
#[path = "cli_errors/flag_table.rs"]
mod flag_table;
#[path = "cli_errors/model_files.rs"]
mod model_files;
#[path = "cli_errors/numeric_flags.rs"]
mod numeric_flags;

const BIN: &str = env!("CARGO_BIN_EXE_webgpu-amp");

/// A fresh, empty folder under the system temp dir (removed when dropped).
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "webgpu-amp-cli-errors-{}-{tag}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.path(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&path, bytes).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn run(args: &[&str], data_dir: Option<&Path>) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .env_remove("WEBGPU_AMP_BACKEND")
        .env_remove("WEBGPU_AMP_F16_STORAGE");
    if let Some(dir) = data_dir {
        cmd.env("WEBGPU_AMP_DATA_DIR", dir);
    }
    cmd.output().expect("run webgpu-amp")
}

/// Asserts a failed run with one `error:` line containing every `needles` entry; returns it.
fn expect_error(out: &Output, needles: &[&str]) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        !out.status.success(),
        "expected failure, got success; stderr:\n{stderr}"
    );
    assert!(!stderr.contains("panicked"), "panic:\n{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(
        lines.len(),
        1,
        "stderr must be exactly one line, got:\n{stderr}"
    );
    let line = lines[0];
    assert!(line.starts_with("error: "), "not an error line: {line}");
    for needle in needles {
        assert!(line.contains(needle), "error line lacks `{needle}`: {line}");
    }
    line.to_string()
}

fn train(extra: &[&str]) -> Vec<String> {
    let mut args = vec!["train", "--steps", "1", "--no-validate"];
    args.extend_from_slice(extra);
    args.into_iter().map(String::from).collect()
}

/// One error line that names `file` and says `message`.
fn expect_file_error(out: &Output, file: &Path, message: &str) {
    expect_error(out, &[&file.display().to_string(), message]);
}

/// `train` under an address-space limit of 4 GB (`ulimit -v`), for inputs that must fail
/// before allocating much: were a check missing, the allocation fails in the child (a
/// failed test), not the machine.
fn run_train_limited(extra: &[&str]) -> Output {
    let mut args = train(extra);
    args.insert(0, BIN.to_string());
    Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 4000000 && exec \"$@\"")
        .arg("sh")
        .args(&args)
        .env_remove("WEBGPU_AMP_BACKEND")
        .env_remove("WEBGPU_AMP_F16_STORAGE")
        .output()
        .expect("run webgpu-amp under sh")
}

fn run_train(extra: &[&str], data_dir: Option<&Path>) -> Output {
    let args = train(extra);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    run(&refs, data_dir)
}

// ---------------------------------------------------------------- bad arguments

#[test]
fn bad_arguments() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["--batch-size", "0"],
            "--batch-size must be 1 to 16777216, got 0",
        ),
        (&["--lr", "-0.1"], "--lr must be finite and >= 0, got -0.1"),
        (&["--lr", "NaN"], "--lr must be finite and >= 0, got NaN"),
        (
            &["--optimizer", "sgd", "--lr", "inf"],
            "--lr must be finite and >= 0, got inf",
        ),
        (
            &["--growth-factor", "1"],
            "--growth-factor must be finite and > 1, got 1",
        ),
        (
            &["--growth-factor", "0.5"],
            "--growth-factor must be finite and > 1, got 0.5",
        ),
        (
            &["--backoff-factor", "1"],
            "--backoff-factor must be in (0, 1), got 1",
        ),
        (
            &["--backoff-factor", "1.5"],
            "--backoff-factor must be in (0, 1), got 1.5",
        ),
        (
            &["--init-scale", "-2"],
            "--init-scale must be finite and >= 2^-126 (unscaling multiplies by its reciprocal), got -2",
        ),
        (&["--steps", "0"], "--steps must be 1 to 2^53, got 0"),
        (&["--epochs", "0"], "--epochs must be 1 to 2^53, got 0"),
        (
            &["--grad-accum", "0"],
            "--grad-accum must be 1 to 65536, got 0",
        ),
        (
            &["--clip-grad-norm", "-1"],
            "--clip-grad-norm must be finite and >= 0 (0: no clipping), got -1",
        ),
        (&["--precision", "fp8"], "unknown precision `fp8`"),
        (&["--backend", "cuda"], "unknown backend `cuda`"),
        (&["--f16-storage", "bits"], "unknown f16 storage `bits`"),
        (&["--optimizer", "lion"], "unknown optimizer `lion`"),
        (&["--loss", "hinge"], "unknown loss `hinge`"),
        (&["--model", "resnet"], "unknown preset `resnet`"),
        (&["--dataset", "cifar"], "unknown data set `cifar`"),
        (
            &["--dataset", "synthetic:0"],
            "synthetic:N with N a positive integer",
        ),
        (
            &["--save-every", "0", "--save", "x.safetensors"],
            "--save-every must be 1 to 2^53, got 0",
        ),
        (&["--save-every", "5"], "--save-every needs --save FILE"),
        (
            &["--grad-accum", "4611686018427387904"],
            "--grad-accum must be 1 to 65536, got 4611686018427387904",
        ),
        (
            &["--grad-accum", "65537"],
            "--grad-accum must be 1 to 65536, got 65537",
        ),
        (
            &["--batch-size", "4611686018427387904", "--grad-accum", "8"],
            "--batch-size must be 1 to 16777216, got 4611686018427387904",
        ),
        (
            &["--dataset", "synthetic:4611686018427387904"],
            "over the limit of 10000000 synthetic samples",
        ),
        (
            &["--dataset", "synthetic:100000000000000000000000000000"],
            "over the limit of 10000000 synthetic samples",
        ),
        (
            &["--dataset", "synthetic:10000001"],
            "over the limit of 10000000 synthetic samples",
        ),
        (
            &["--batch-size", "-3"],
            "'--batch-size <BATCH_SIZE>': must be 1 to 16777216, got `-3`",
        ),
        (
            &["--batch-size", "many"],
            "invalid value 'many' for '--batch-size",
        ),
        (
            &["--momentum", "-1", "--optimizer", "sgd"],
            "--momentum must be finite and >= 0, got -1",
        ),
        (
            &["--padding-mode", "reflect"],
            "a padding mode (--padding-mode constant or reflect) needs --random-crop-padding N too",
        ),
        (
            &["--random-crop-padding", "0"],
            "--random-crop-padding must be 1 to 65535, got 0",
        ),
        // Synthetic samples are vectors: no image to crop or flip.
        (
            &["--flip", "random"],
            "augmentation crops and flips images [C, H, W]",
        ),
        (
            &["--buffers-on-skip", "update", "--precision", "f32"],
            "--buffers-on-skip update changes nothing without a GradScaler",
        ),
        (
            &["--buffers-on-skip", "sometimes"],
            "invalid value 'sometimes' for '--buffers-on-skip",
        ),
    ];
    for (flags, needle) in cases {
        let mut args = vec!["train", "--no-validate"];
        if !flags.contains(&"--dataset") {
            args.extend_from_slice(&["--dataset", "synthetic"]);
        }
        if !flags.contains(&"--steps") && !flags.contains(&"--epochs") {
            args.extend_from_slice(&["--steps", "1"]);
        }
        args.extend_from_slice(flags);
        let out = run(&args, None);
        expect_error(&out, &[needle]);
    }
    // Arguments are checked before any data is read or GPU touched.
    let out = run(
        &["compare", "--dataset", "synthetic", "--batch-size", "0"],
        None,
    );
    expect_error(&out, &["--batch-size must be 1 to 16777216, got 0"]);
    let out = run(&["train", "--no-such-flag"], None);
    expect_error(&out, &["--no-such-flag"]);
    assert_eq!(out.status.code(), Some(2));
}

/// These tests run on a debug build, as CI's `cargo test` does: there integer overflow
/// panics, so a missed overflow fails a test here instead of wrapping silently.
#[test]
fn built_with_overflow_checks() {
    #[allow(arithmetic_overflow, clippy::no_effect)]
    let overflowed = std::panic::catch_unwind(|| {
        let x = std::hint::black_box(u64::MAX);
        x + std::hint::black_box(1)
    })
    .is_err();
    assert!(
        overflowed,
        "this test binary was built without overflow checks (a release build?): the CLI \
         error tests must run on a debug build, where an overflow panics"
    );
}

// ---------------------------------------------------------------- resource faults

#[test]
fn batch_too_big_for_the_device() {
    // mnist-cnn on the embedded set's 8,000 training images in one batch: the first conv's
    // output alone is 8000·32·28·28 halves (401 MB), over lavapipe's 128 MiB per binding
    // (and over the 128 MiB WebGPU default), so planning fails with the limit and a hint.
    let out = run_train(&["--model", "mnist-cnn", "--batch-size", "100000"], None);
    let line = expect_error(
        &out,
        &[
            "batch 8000",
            "max_storage_buffer_binding_size",
            "use a smaller --batch-size",
        ],
    );
    assert!(line.contains("MB"), "sizes in bytes for people: {line}");
}

// ---------------------------------------------------------------- divergence

/// An f32 run at SGD lr 1e6, which diverges within a few of its 100 steps, saving to
/// `save`, plus `extra`.
fn diverging_f32_train(save: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "train",
        "--dataset",
        "synthetic",
        "--precision",
        "f32",
        "--optimizer",
        "sgd",
        "--lr",
        "1e6",
        "--batch-size",
        "4",
        "--steps",
        "100",
        "--no-validate",
        "--save",
        save.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    run(&args, None)
}

#[test]
fn f32_divergence_stops_without_saving_nan() {
    let tmp = TempDir::new("diverge");
    let ck = tmp.path("run.safetensors");
    let out = diverging_f32_train(&ck, &["--save-every", "1"]);
    expect_error(&out, &["training diverged", "under f32", "lower --lr"]);
    // Periodic checkpoints before the divergence are kept; none holds inf/NaN.
    let saved = webgpu_amp::train::checkpoint::Checkpoint::load(&ck).expect("last good checkpoint");
    assert!(saved.progress.step >= 1);
    for t in &saved.params {
        assert!(
            t.values.iter().all(|v| v.is_finite()),
            "`{}` in the checkpoint is not finite",
            t.name
        );
    }
    // Without periodic saves nothing is written at all.
    let ck2 = tmp.path("final.safetensors");
    let out = diverging_f32_train(&ck2, &[]);
    expect_error(&out, &["training diverged"]);
    assert!(
        !ck2.exists(),
        "a diverged run must not write its final checkpoint"
    );
}
