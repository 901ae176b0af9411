//! SIGINT and SIGTERM inside long inner loops: a loss estimate of 3000 batches (the audit:
//! still running 168 s after the signal), the final validation, `bench matmul` with 1000
//! repeats (177 s), `bench step`, `bench tune`, `compare`, `sample`, `selftest`. Each must end within a few seconds
//! of the signal; `train` saves first and exits 130 with its metrics summary.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::common::child::{wait_for_exit, wait_while_running};
use super::common::cli::{BIN, json_lines, quick};
use super::{TempDir, gpt_tiny_checkpoint};
use webgpu_amp::train::checkpoint::Checkpoint;

/// How long a stop may take after the signal: the loops stop within about half a second of
/// queued work on lavapipe; the rest is slack for a loaded 2-core machine (8 s once ran out
/// for `sample` at a load average of 7; the audit's runs took 58 s to forever).
const STOP_WITHIN: Duration = Duration::from_secs(20);

fn spawn(args: &[&str], dir: &Path) -> Child {
    Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .env_remove("WEBGPU_AMP_BACKEND")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start webgpu-amp")
}

fn signal(child: &Child, signal: libc::c_int) -> Instant {
    // SAFETY: kill(2) on our own child's pid.
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, signal) };
    assert_eq!(rc, 0, "kill");
    Instant::now()
}

/// Sends `sig` once `ready` holds, then waits for the exit; returns the stderr and how long
/// the stop took.
fn stop(
    mut child: Child,
    sig: libc::c_int,
    what: &str,
    ready: impl FnMut() -> bool,
) -> (i32, String, Duration) {
    wait_while_running(&mut child, Duration::from_secs(300), what, ready);
    let sent = signal(&child, sig);
    let status = wait_for_exit(&mut child, STOP_WITHIN, what);
    let took = sent.elapsed();
    let mut stderr = String::new();
    use std::io::Read;
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    eprintln!("{what}: stopped {took:?} after the signal ({status})");
    (status.code().unwrap_or(-1), stderr, took)
}

/// Whether the metrics file holds a line for optimizer step `step`.
fn metrics_reached(path: &Path, step: u64) -> bool {
    std::fs::read_to_string(path).is_ok_and(|body| {
        body.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .any(|v| v["step"].as_u64() == Some(step) && v.get("loss").is_some())
    })
}

/// A train that was stopped: exit 130, its checkpoint loads, its metrics end with a summary.
fn assert_saved_and_summarised(code: i32, stderr: &str, save: &Path, metrics: &Path) {
    assert_eq!(code, 130, "{stderr}");
    assert!(stderr.contains("--resume"), "no resume line: {stderr}");
    Checkpoint::load(save).expect("the interrupted run's checkpoint loads");
    let lines = json_lines(metrics);
    assert!(
        lines.last().is_some_and(|v| v.get("summary").is_some()),
        "metrics end without a summary: {:?}",
        lines.last()
    );
}

/// gpt-tiny at batch 2 with 3000 evaluation batches and `extra`, sent `sig` once its metrics
/// show step 2 (then inside an evaluation): it must save, summarise and exit 130.
fn stop_inside_an_evaluation(tag: &str, extra: &[&str], sig: libc::c_int) {
    let tmp = TempDir::new(tag);
    let (save, metrics) = (tmp.path("ck.safetensors"), tmp.path("m.jsonl"));
    let (s, m) = (save.display().to_string(), metrics.display().to_string());
    let mut args = vec![
        "train",
        "--model",
        "gpt-tiny",
        "--batch-size",
        "2",
        "--eval-batches",
        "3000",
        "--save",
        &s,
        "--metrics",
        &m,
    ];
    args.extend_from_slice(extra);
    let child = spawn(&args, &tmp.0);
    let (code, stderr, _) = stop(child, sig, tag, || metrics_reached(&metrics, 2));
    assert_saved_and_summarised(code, &stderr, &save, &metrics);
}

#[test]
fn sigint_during_a_long_loss_estimate_saves_and_exits() {
    stop_inside_an_evaluation(
        "estimate",
        &["--steps", "6", "--eval-every", "2"],
        libc::SIGINT,
    );
}

#[test]
fn sigterm_during_the_final_validation_saves_and_exits() {
    stop_inside_an_evaluation("validation", &["--steps", "2"], libc::SIGTERM);
}

/// Where a command shows that it is in its loop: its first line on stdout or on stderr.
#[derive(Clone, Copy, PartialEq)]
enum First {
    Stdout,
    Stderr,
}

/// Runs `args`, sends `sig` half a second after the first line on `first`, and returns the
/// exit code and stderr. Both pipes are drained by threads, so a full pipe never blocks it.
fn stop_after_first_line(
    args: &[&str],
    first: First,
    sig: libc::c_int,
    what: &str,
) -> (i32, String) {
    use std::sync::{Arc, Mutex};
    let tmp = TempDir::new("loop");
    let mut child = spawn(args, &tmp.0);
    let drain = |pipe: Box<dyn std::io::Read + Send>| {
        let text = Arc::new(Mutex::new(String::new()));
        let sink = text.clone();
        let thread = std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                let mut t = sink.lock().unwrap();
                t.push_str(&line);
                t.push('\n');
            }
        });
        (text, thread)
    };
    let (out, out_thread) = drain(Box::new(child.stdout.take().unwrap()));
    let (err, err_thread) = drain(Box::new(child.stderr.take().unwrap()));
    let watched = if first == First::Stdout {
        out.clone()
    } else {
        err.clone()
    };
    wait_while_running(&mut child, Duration::from_secs(300), what, || {
        !watched.lock().unwrap().is_empty()
    });
    std::thread::sleep(Duration::from_millis(500));
    let sent = signal(&child, sig);
    let status = wait_for_exit(&mut child, STOP_WITHIN, what);
    eprintln!(
        "{what}: stopped {:?} after the signal ({status})",
        sent.elapsed()
    );
    out_thread.join().unwrap();
    err_thread.join().unwrap();
    let stderr = err.lock().unwrap().clone();
    (status.code().unwrap_or(-1), stderr)
}

#[test]
fn sigint_during_bench_matmul_repeats_stops_it() {
    let (code, stderr) = stop_after_first_line(
        &[
            "bench",
            "matmul",
            "--sizes",
            "512",
            "--repeats",
            "1000",
            "--storages",
            "f32",
        ],
        First::Stdout,
        libc::SIGINT,
        "bench matmul",
    );
    assert_eq!(code, 130, "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
}

#[test]
fn sigint_during_bench_step_stops_it() {
    let (code, stderr) = stop_after_first_line(
        &[
            "bench",
            "step",
            "--models",
            "gpt-tiny",
            "--batch-size",
            "2",
            "--precisions",
            "f32",
            "--steps",
            "100000",
            "--json",
        ],
        First::Stderr,
        libc::SIGINT,
        "bench step",
    );
    assert_eq!(code, 130, "{stderr}");
}

#[test]
fn sigterm_during_compare_stops_it() {
    let args = quick("compare", 1_000_000, &[]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, stderr) = stop_after_first_line(&args, First::Stdout, libc::SIGTERM, "compare");
    assert_eq!(code, 130, "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
}

#[test]
fn sigint_during_sample_stops_it() {
    let tmp = TempDir::new("sample");
    let s = gpt_tiny_checkpoint(&tmp).display().to_string();
    let (code, stderr) = stop_after_first_line(
        &[
            "sample",
            "--checkpoint",
            &s,
            "--tokens",
            "100000",
            "--chunk",
            "1",
        ],
        First::Stdout,
        libc::SIGINT,
        "sample",
    );
    assert_eq!(code, 130, "{stderr}");
    assert!(
        stderr.contains("sample: interrupted by SIGINT after"),
        "{stderr}"
    );
}

#[test]
fn sigint_during_selftest_stops_it() {
    let tmp = TempDir::new("selftest");
    let child = spawn(&["selftest"], &tmp.path(""));
    // The handler is in place before the adapter opens; a second in, the checks are running.
    let started = Instant::now();
    let (code, stderr, _) = stop(child, libc::SIGINT, "selftest", || {
        started.elapsed() > Duration::from_secs(1)
    });
    assert_eq!(code, 130, "{stderr}");
    assert!(
        stderr.contains("selftest: interrupted by SIGINT after"),
        "{stderr}"
    );
}

#[test]
fn sigint_during_bench_tune_stops_it_and_writes_no_file() {
    let tmp = TempDir::new("tune");
    let out = tmp.path("tuning.json");
    let out_s = out.display().to_string();
    let child = spawn(
        &["bench", "tune", "--backend", "vulkan", "--out", &out_s],
        &tmp.path(""),
    );
    // The handler is in place before the adapter opens; two seconds in, candidates are timed.
    let started = Instant::now();
    let (code, stderr, _) = stop(child, libc::SIGINT, "bench tune", || {
        started.elapsed() > Duration::from_secs(2)
    });
    assert_eq!(code, 130, "{stderr}");
    assert!(stderr.contains("bench tune: interrupted in"), "{stderr}");
    assert!(!out.exists(), "an interrupted tune wrote {}", out.display());
}
