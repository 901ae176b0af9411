//! `--batch-size` larger than the data set: the run trains with the whole set each step, as
//! before, and now says so in one `note:` line with the batch it actually uses (`train`,
//! `compare`, and `bench step` for a GPT, whose batch is bounded by its text's windows).

mod common;

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::cli::{BIN, fresh_dir, quick_at_batch};
use serde_json::Value;

/// The largest batch `--batch-size`'s range takes (2^24). The issue met `u64::MAX`, which
/// trained at the whole set, 13 s a step, silently; the range now refuses it (tests/cli_errors).
const HUGE: &str = "16777216";

/// The mlp on 64 synthetic samples (all for training) for 2 steps at batch [`HUGE`].
fn huge_batch(subcommand: &str, extra: &[&str]) -> Vec<String> {
    quick_at_batch(subcommand, HUGE, 2, extra)
}

/// The stderr lines of a run that must have succeeded.
#[track_caller]
fn stderr_lines(out: &std::process::Output) -> Vec<String> {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}:\n{stderr}", out.status);
    stderr
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(String::from)
        .collect()
}

const NOTE: &str = "note: --batch-size 16777216 is larger than the 64 training \
                    samples of synthetic:64; training with batch 64 (the whole set each step)";

#[test]
fn train_and_compare_say_the_batch_they_use() {
    let dir = fresh_dir("train");
    let out = Command::new(BIN)
        .args(huge_batch("train", &["--metrics", "m.jsonl"]))
        .current_dir(&dir)
        .output()
        .unwrap();
    assert_eq!(stderr_lines(&out), [NOTE]);
    // Batch 64 of 64 samples: each of the 2 steps is a whole epoch.
    let metrics = std::fs::read_to_string(dir.join("m.jsonl")).unwrap();
    let summary: Value = serde_json::from_str(metrics.lines().last().unwrap()).unwrap();
    let summary = &summary["summary"];
    assert_eq!(
        (&summary["steps"], &summary["epochs"]),
        (&2.into(), &2.into())
    );

    let out = Command::new(BIN)
        .args(huge_batch(
            "compare",
            &["--precisions", "f32", "--report", "r.json"],
        ))
        .current_dir(&dir)
        .output()
        .unwrap();
    assert_eq!(stderr_lines(&out), [NOTE]);
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("r.json")).unwrap()).unwrap();
    assert_eq!(report["batch_size"], 64, "the report names the batch used");

    // A batch that fits says nothing.
    let out = Command::new(BIN)
        .args(common::cli::quick("train", 1, &[]))
        .current_dir(&dir)
        .output()
        .unwrap();
    assert_eq!(stderr_lines(&out), Vec::<String>::new());
    let _ = std::fs::remove_dir_all(dir);
}

/// `bench step` on gpt-tiny says the batch it measures at (the hamlet windows) before it
/// plans anything; the test then stops it with SIGINT rather than measure that batch.
#[cfg(unix)]
#[test]
fn bench_step_says_the_gpt_batch_it_measures_at() {
    let mut child = Command::new(BIN)
        .args([
            "bench",
            "step",
            "--models",
            "gpt-tiny",
            "--precisions",
            "f32",
        ])
        .args(["--batch-size", HUGE, "--steps", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut lines = Vec::new();
    for _ in 0..2 {
        let mut line = String::new();
        stderr.read_line(&mut line).unwrap();
        lines.push(line.trim_end().to_string());
    }
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!("bench step did not stop within 120 s of SIGINT");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(lines[0].starts_with("adapter: "), "{lines:?}");
    let note = &lines[1];
    let windows: usize = note
        .strip_prefix(&format!("note: --batch-size {HUGE} is larger than the "))
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{note}"));
    assert!(
        note.ends_with(&format!(
            " training windows of hamlet; measuring gpt-tiny at batch {windows}"
        )),
        "{note}"
    );
    assert!(windows > 1000, "{note}");
}
