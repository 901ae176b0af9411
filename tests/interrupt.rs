//! SIGINT and SIGTERM through the built binary. The signals are deterministic: the hook
//! `WEBGPU_AMP_TEST_SIGNAL_AT_STEP=N[:TERM]` raises the signal in the process (through its
//! real handler) right after the first micro-batch of optimizer step N is submitted, or the
//! test sends it after a marker the process writes (a line on stderr, or the save hook's
//! marker file).
//!
//! - `train` finishes the step in flight (with `--grad-accum 2`, the step's second
//!   micro-batch is still to come when the signal arrives), saves (with its moments file and scaler state),
//!   writes its metrics, prints one line with the step and the `--resume` command, and exits
//!   with 130; running that command continues the run bit for bit;
//! - with no `--save` it writes `interrupted.safetensors` beside the metrics file, or in the
//!   working directory;
//! - a second signal during the interrupted run's save ends the process at once, and the
//!   last complete checkpoint still loads;
//! - `compare` and `bench step` stop with one line and 130.

#![cfg(unix)]

mod common;

use std::io::BufRead;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::checkpoints::assert_same_checkpoint;
use common::child::{wait_for_exit, wait_while_running};
use common::cli::{BIN, fresh_dir, json_lines, output_text, quick};
use serde_json::Value;
use webgpu_amp::train::checkpoint::{Checkpoint, INLINE_MOMENTS_MAX_ENV, SAVE_PAUSE_ENV};
use webgpu_amp::train::fault_hooks::SIGNAL_AT_STEP_ENV;

/// The quick mlp run for `steps`, with a GradScaler whose state moves every step (a first
/// scale that overflows, growth every 2 good steps) and Adam moments in a moments file.
fn command(dir: &Path, subcommand: &str, steps: u64, extra: &[&str]) -> Command {
    let mut args = quick(subcommand, steps, &["--init-scale", "131072"]);
    if subcommand == "train" {
        args.extend(["--growth-interval", "2"].map(String::from));
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    let mut cmd = Command::new(BIN);
    cmd.args(&args)
        .current_dir(dir)
        .env(INLINE_MOMENTS_MAX_ENV, "0")
        .env_remove(SIGNAL_AT_STEP_ENV);
    cmd
}

fn run(mut cmd: Command, signal_at: Option<&str>) -> Output {
    if let Some(at) = signal_at {
        cmd.env(SIGNAL_AT_STEP_ENV, at);
    }
    cmd.output().expect("run webgpu-amp")
}

/// The one line an interrupted command prints (its whole stderr), after checking the exit
/// code is 130 and nothing panicked.
#[track_caller]
fn interrupted_line(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(130), "{}", output_text(out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line:\n{}", output_text(out));
    lines[0].to_string()
}

fn step_lines(lines: &[Value]) -> Vec<Value> {
    lines
        .iter()
        .filter(|v| v.get("step").is_some() && v.get("loss").is_some())
        .cloned()
        .collect()
}

/// A checkpoint whose Adam moments came from its moments file, with scaler state.
#[track_caller]
fn assert_complete(ck: &Checkpoint, what: &str) {
    let optimizer = ck.optimizer.as_ref().expect("optimizer state");
    assert_eq!(
        (optimizer.unavailable.as_deref(), optimizer.moments.len()),
        (None, 2),
        "{what}: Adam's moments"
    );
    assert!(optimizer.moments_file.is_some(), "{what}: the moments file");
    assert!(
        ck.scaler.as_ref().is_some_and(|s| !s.is_empty()),
        "{what}: the scaler state"
    );
}

#[test]
fn interrupted_train_resumes_with_the_command_it_prints_bit_for_bit() {
    let dir = fresh_dir("resume");
    let flags = |save: &'static str, metrics: &'static str| {
        ["--grad-accum", "2", "--save", save, "--metrics", metrics]
    };
    let full = run(
        command(&dir, "train", 10, &flags("full.safetensors", "full.jsonl")),
        None,
    );
    assert!(full.status.success(), "{}", output_text(&full));

    // SIGINT while step 4 is in flight (one of its two micro-batches submitted): the run
    // finishes step 4 and stops there.
    let cut = command(&dir, "train", 10, &flags("cut.safetensors", "cut.jsonl"));
    let out = run(cut, Some("4"));
    let line = interrupted_line(&out);
    let saved = dir.join("cut.safetensors");
    assert!(
        line.starts_with("interrupted by SIGINT at step 4: saved cut.safetensors; resume with: "),
        "{line}"
    );
    let resume = line.split_once("resume with: ").unwrap().1.to_string();
    assert!(
        resume.starts_with(BIN) && resume.ends_with(" --resume cut.safetensors"),
        "{resume}"
    );
    let ck = Checkpoint::load(&saved).expect("the interrupted checkpoint loads");
    assert_eq!(ck.progress.step, 4);
    assert_complete(&ck, "interrupted checkpoint");
    // Its metrics: every step up to the stop, then the summary that says so.
    let first = json_lines(&dir.join("cut.jsonl"));
    let summary = &first.last().unwrap()["summary"];
    assert_eq!(
        (&summary["interrupted"], &summary["steps"]),
        (&Value::Bool(true), &Value::from(4)),
        "{summary}"
    );
    let mut steps = step_lines(&first);
    assert_eq!(steps.len(), 4, "{first:#?}");

    // The printed command, through a shell, continues the run (it rewrites cut.jsonl).
    let out = Command::new("sh")
        .args(["-c", &resume])
        .current_dir(&dir)
        .env(INLINE_MOMENTS_MAX_ENV, "0")
        .env_remove(SIGNAL_AT_STEP_ENV)
        .output()
        .unwrap();
    assert!(out.status.success(), "{resume}\n{}", output_text(&out));
    steps.extend(step_lines(&json_lines(&dir.join("cut.jsonl"))));
    let want = step_lines(&json_lines(&dir.join("full.jsonl")));
    assert_eq!(want.len(), 10);
    assert_eq!(
        steps, want,
        "interrupted + resumed steps differ from the straight run"
    );
    assert!(
        want.iter().any(|s| s["skipped"] == true),
        "the first scale should make some steps skip: {want:?}"
    );
    let a = Checkpoint::load(&dir.join("full.safetensors")).unwrap();
    let b = Checkpoint::load(&saved).unwrap();
    assert_eq!(a.progress.step, 10);
    assert_same_checkpoint("resumed", &b, &a);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn without_save_it_writes_interrupted_safetensors_beside_the_metrics_or_here() {
    let dir = fresh_dir("fallback");
    std::fs::create_dir_all(dir.join("logs")).unwrap();
    // SIGTERM this time, beside the metrics file.
    let out = run(
        command(&dir, "train", 10, &["--metrics", "logs/m.jsonl"]),
        Some("3:TERM"),
    );
    let line = interrupted_line(&out);
    assert!(
        line.starts_with("interrupted by SIGTERM at step 3: saved logs/interrupted.safetensors;"),
        "{line}"
    );
    let ck = Checkpoint::load(&dir.join("logs/interrupted.safetensors")).unwrap();
    assert_eq!(ck.progress.step, 3);
    assert_complete(&ck, "beside the metrics");
    assert!(!dir.join("interrupted.safetensors").exists());

    // No metrics file: the working directory.
    let out = run(command(&dir, "train", 10, &[]), Some("2"));
    let line = interrupted_line(&out);
    assert!(
        line.starts_with("interrupted by SIGINT at step 2: saved interrupted.safetensors;"),
        "{line}"
    );
    let ck = Checkpoint::load(&dir.join("interrupted.safetensors")).unwrap();
    assert_eq!(ck.progress.step, 2);
    let _ = std::fs::remove_dir_all(dir);
}

/// Waits for `marker` (written by the save hook) while `child` runs.
fn wait_for(marker: &Path, child: &mut std::process::Child) {
    wait_while_running(child, Duration::from_secs(120), "a paused save", || {
        marker.exists()
    });
}

fn send(child: &std::process::Child, signal: libc::c_int) {
    // SAFETY: kill(2) on our own child's pid.
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, signal) };
    assert_eq!(rc, 0, "kill failed");
}

/// Waits up to `limit` for `child` to end; its exit code (`None`: killed by a signal).
fn wait_within(child: &mut std::process::Child, limit: Duration) -> Option<i32> {
    wait_for_exit(child, limit, "after the second signal").code()
}

#[test]
fn a_second_signal_ends_it_at_once_and_the_last_checkpoint_loads() {
    let dir = fresh_dir("second");
    let marker = dir.join("paused");
    // Saves at steps 2 and 4 (saves 1 and 2); SIGINT after step 5; the interrupted run's
    // save is save 3, which the hook pauses between write and rename (for two minutes).
    let mut cmd = command(
        &dir,
        "train",
        1_000_000,
        &["--save", "run.safetensors", "--save-every", "2"],
    );
    cmd.env(SIGNAL_AT_STEP_ENV, "5")
        .env(SAVE_PAUSE_ENV, format!("3:{}", marker.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().unwrap();
    wait_for(&marker, &mut child);
    let sent = Instant::now();
    send(&child, libc::SIGINT);
    let code = wait_within(&mut child, Duration::from_secs(20));
    eprintln!(
        "second signal: the process ended {:.2} s later with {code:?}",
        sent.elapsed().as_secs_f64()
    );
    assert_eq!(code, Some(130));
    let ck = Checkpoint::load(&dir.join("run.safetensors")).expect("the last checkpoint loads");
    assert_eq!(ck.progress.step, 4, "the last complete save");
    assert_complete(&ck, "the last complete checkpoint");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn compare_stops_cleanly_with_one_line() {
    let dir = fresh_dir("compare");
    let out = run(
        command(
            &dir,
            "compare",
            50,
            &["--report", "r.json", "--png", "r.png"],
        ),
        Some("3"),
    );
    let line = interrupted_line(&out);
    assert_eq!(
        line,
        "compare: interrupted by SIGINT at step 3 of f32; no report written"
    );
    assert!(!dir.join("r.json").exists() && !dir.join("r.png").exists());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn bench_stops_cleanly_with_one_line() {
    let dir = fresh_dir("bench");
    let mut child = Command::new(BIN)
        .args(["bench", "step", "--models", "mlp", "--precisions", "f32"])
        .args(["--batch-size", "8", "--steps", "100000"])
        .current_dir(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // `adapter: ...` comes after the handler is in place: a signal now lands in the bench.
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    stderr.read_line(&mut first).unwrap();
    assert!(first.starts_with("adapter: "), "{first:?}");
    send(&child, libc::SIGINT);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    let code = wait_within(&mut child, Duration::from_secs(60));
    assert_eq!(code, Some(130), "{rest}");
    // The note naming what is measured comes first when the signal lands after it.
    let lines: Vec<&str> = rest
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter(|l| *l != "bench step: mlp under f32 at batch 8, 100000 steps")
        .collect();
    assert_eq!(
        lines,
        ["bench step: interrupted while measuring mlp under f32; the lines above are complete"]
    );
    let _ = std::fs::remove_dir_all(dir);
}
