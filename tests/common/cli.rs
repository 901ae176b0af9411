//! Running the `webgpu-amp` binary from tests: a quick mlp run, and what a failed run must
//! print (one `error:` line, no panic).

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_webgpu-amp");

/// `subcommand` (`train` or `compare`) of the mlp on 64 synthetic samples at batch 8 for
/// `steps` steps, without validation (well under a second of training on lavapipe), then
/// `extra`: for tests of what surrounds training.
pub fn quick(subcommand: &str, steps: u64, extra: &[&str]) -> Vec<String> {
    quick_at_batch(subcommand, "8", steps, extra)
}

/// [`quick`] at batch size `batch`.
pub fn quick_at_batch(subcommand: &str, batch: &str, steps: u64, extra: &[&str]) -> Vec<String> {
    let steps = steps.to_string();
    let mut args = vec![
        subcommand,
        "--model",
        "mlp",
        "--dataset",
        "synthetic:64",
        "--batch-size",
        batch,
        "--steps",
        &steps,
        "--no-validate",
    ];
    args.extend_from_slice(extra);
    args.into_iter().map(String::from).collect()
}

/// A finished run for a failure message: its exit code, stdout and stderr.
pub fn output_text(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Asserts that `out`, a run of `what`, succeeded; its output is the failure message.
#[track_caller]
pub fn assert_success(out: &Output, what: &str) {
    assert!(out.status.success(), "{what} failed:\n{}", output_text(out));
}

/// Every line of a JSON-lines file (`--metrics`), parsed.
#[track_caller]
pub fn json_lines(path: &Path) -> Vec<Value> {
    let body = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    body.lines()
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("{}: bad JSON line `{l}`: {e}", path.display()))
        })
        .collect()
}

/// The single `error:` line of a failed run (`what` names the case in failures).
#[track_caller]
pub fn error_line(out: &Output, what: &str) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        !out.status.success(),
        "{what}: the run succeeded:\n{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{what}: panic:\n{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{what}: stderr must be one line:\n{stderr}");
    assert!(lines[0].starts_with("error: "), "{what}: {}", lines[0]);
    lines[0].to_string()
}

/// Asserts `line` holds every one of `needles`.
#[track_caller]
pub fn assert_says(line: &str, what: &str, needles: &[&str]) {
    for needle in needles {
        assert!(line.contains(needle), "{what}: lacks `{needle}`: {line}");
    }
}

/// A fresh, empty folder in the system temp dir, named for the test file, `tag` and this
/// process.
pub fn fresh_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "webgpu-amp-{}-{}-{tag}",
        env!("CARGO_CRATE_NAME"),
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A command that runs the binary with a runtime dir ([`runtime_dir`]), under
/// `$WEBGPU_AMP_RUNNER` when that is set (words put before the binary:
/// `scripts/lavapipe-coop.sh run` runs it under Mesa 26's lavapipe, which a child of a test
/// does not get otherwise).
pub fn command() -> std::process::Command {
    let mut cmd = match std::env::var("WEBGPU_AMP_RUNNER") {
        Ok(runner) if !runner.trim().is_empty() => {
            let mut words = runner.split_whitespace();
            let mut cmd = std::process::Command::new(words.next().expect("a word"));
            cmd.args(words).arg(BIN);
            cmd
        }
        _ => std::process::Command::new(BIN),
    };
    cmd.env("XDG_RUNTIME_DIR", runtime_dir());
    cmd
}

/// The caller's `XDG_RUNTIME_DIR`, or the system temp dir: Vulkan's loader and Mesa want one
/// in the processes a test starts.
pub fn runtime_dir() -> std::ffi::OsString {
    std::env::var_os("XDG_RUNTIME_DIR").unwrap_or_else(|| std::env::temp_dir().into())
}
