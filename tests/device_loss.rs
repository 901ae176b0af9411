//! The GPU failing under a run, through the built binary: a device lost mid-run (the hook
//! `WEBGPU_AMP_TEST_LOSE_DEVICE_AT_STEP=N` destroys it while step N is in flight, which is
//! what a driver reset or a removed GPU looks like to wgpu) or an uncaptured GPU error
//! (`WEBGPU_AMP_TEST_GPU_ERROR_AT_STEP=N`) ends `train` with one `error:` line that names the
//! step and the last intact checkpoint, and exit code 3: no panic, no hang.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::child::wait_for_exit;
use common::cli::{BIN, assert_says, fresh_dir, quick};
use webgpu_amp::train::checkpoint::Checkpoint;
use webgpu_amp::train::fault_hooks::{GPU_ERROR_AT_STEP_ENV, LOSE_DEVICE_AT_STEP_ENV};

/// How long a run may take to fail (its training alone takes a few seconds).
const LIMIT: Duration = Duration::from_secs(120);

/// `train` with `extra` and the hook `(key, step)`; (exit code, stderr). Fails the test if the
/// process is still running after [`LIMIT`] (a hang).
fn train(dir: &Path, hook: (&str, &str), extra: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(BIN)
        .args(quick("train", 40, extra))
        .current_dir(dir)
        .env(hook.0, hook.1)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap());
    let started = Instant::now();
    let status = wait_for_exit(&mut child, LIMIT, &format!("{hook:?} (a hang)"));
    eprintln!(
        "{hook:?}: ended after {:.1} s with {:?}",
        started.elapsed().as_secs_f64(),
        status.code()
    );
    (status.code(), reader.join().unwrap())
}

/// The one `error:` line of `stderr`.
#[track_caller]
fn one_line(code: Option<i32>, stderr: &str) -> String {
    assert_eq!(code, Some(3), "exit code 3:\n{stderr}");
    assert!(!stderr.contains("panicked"), "panic:\n{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line:\n{stderr}");
    assert!(lines[0].starts_with("error: "), "{}", lines[0]);
    lines[0].to_string()
}

#[test]
fn a_lost_device_names_the_step_and_the_checkpoint_and_exits_3() {
    let dir = fresh_dir("lost");
    // Saves at steps 2 and 4; the device goes while step 5 is in flight.
    let (code, stderr) = train(
        &dir,
        (LOSE_DEVICE_AT_STEP_ENV, "5"),
        &["--save", "run.safetensors", "--save-every", "2"],
    );
    let line = one_line(code, &stderr);
    eprintln!("{line}");
    assert_says(
        &line,
        "lost device",
        &[
            "error: the GPU device was lost",
            "the run stopped at step 5",
            "the last checkpoint, run.safetensors (step 4), is intact",
        ],
    );
    let ck = Checkpoint::load(&dir.join("run.safetensors")).expect("the checkpoint loads");
    assert_eq!(ck.progress.step, 4);

    // Before any checkpoint: the line says there is none, and how to keep periodic ones.
    let (code, stderr) = train(&dir, (LOSE_DEVICE_AT_STEP_ENV, "1"), &[]);
    let line = one_line(code, &stderr);
    eprintln!("{line}");
    assert_says(
        &line,
        "lost device, no checkpoint",
        &[
            "the run stopped at step 1",
            "no checkpoint was asked for (--save FILE --save-every N)",
        ],
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_gpu_error_mid_run_names_the_step_and_exits_3() {
    let dir = fresh_dir("gpu-error");
    let (code, stderr) = train(
        &dir,
        (GPU_ERROR_AT_STEP_ENV, "3"),
        &["--save", "run.safetensors", "--save-every", "2"],
    );
    let line = one_line(code, &stderr);
    eprintln!("{line}");
    assert_says(
        &line,
        "GPU error",
        &[
            "error: GPU error:",
            "test hook: invalid buffer",
            "the run stopped at step 3",
            "the last checkpoint, run.safetensors (step 2), is intact",
        ],
    );
    let ck = Checkpoint::load(&dir.join("run.safetensors")).expect("the checkpoint loads");
    assert_eq!(ck.progress.step, 2);
    let _ = std::fs::remove_dir_all(dir);
}
