//! `bench tune` writes only what it measured (round five, item 3): it starts from the built-in
//! table whatever `--tuning` or the environment names, checks `--out` before it measures, keeps
//! to `--budget`, and writes nothing when nothing was measured.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::TempDir;
use super::tables::tuning_file;
use crate::common::cli::{assert_says, command, error_line, output_text};

fn tune(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = command();
    cmd.env_remove("WEBGPU_AMP_TUNING")
        .args(["bench", "tune", "--quick"])
        .args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run webgpu-amp")
}

/// `bench tune` with `args`, with or without `--quick`.
fn tune_with(quick: bool, args: &[&str]) -> std::process::Output {
    let mut cmd = command();
    cmd.env_remove("WEBGPU_AMP_TUNING").args(["bench", "tune"]);
    if quick {
        cmd.arg("--quick");
    }
    cmd.args(args).output().expect("run webgpu-amp")
}

/// A tuning file named by flag or environment is not where tuning starts: its tile (one no
/// candidate list holds) is never timed, the run says so, and the written table is the
/// built-in one's family by family.
#[test]
fn the_tuner_starts_from_the_built_in_table() {
    // A whole quick tune: seconds on Vulkan's lavapipe, over 14 minutes on llvmpipe's GL.
    // Where tuning starts is the CLI's logic, the same on every backend.
    if std::env::var("WEBGPU_AMP_BACKEND").is_ok_and(|b| b == "gl") {
        crate::common::not_checked(
            "bench tune starting from the built-in table, under GL (a quick tune there takes \
             over 14 minutes on llvmpipe); the Vulkan pass runs it",
        );
        return;
    }
    let dir = TempDir::new("tune-from");
    let theirs = json!({"wg_x": 8, "wg_y": 8, "tm": 8, "tn": 8, "bk": 8});
    let file = tuning_file(&dir, "theirs.json", |f| {
        f["table"]["simt_f32"] = theirs.clone()
    });
    let path = file.display().to_string();
    let out_path = dir.path("tuned.json");
    let out = out_path.display().to_string();
    let env = [("WEBGPU_AMP_TUNING", path.as_str())];
    let run = tune(&["--budget", "1200", "--out", &out], &env);
    assert!(run.status.success(), "{}", output_text(&run));
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert_says(
        &stdout,
        "note",
        &["starts from this adapter's built-in table", &path],
    );
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(&out_path).unwrap()).unwrap();
    let timed: Vec<&str> = written["measurements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["candidate"].as_str().unwrap())
        .collect();
    assert!(
        !timed
            .iter()
            .any(|c| c.starts_with("8x8 threads, 8x8 outputs each")),
        "the file's own tile was timed: {timed:?}"
    );
    assert_ne!(
        written["table"]["simt_f32"], theirs,
        "the file's tile came back out"
    );
}

/// `--out` that cannot take the file is refused before anything is measured, in one line
/// naming it: a folder, a path in a missing folder, a device, a file of a read-only folder.
#[test]
fn out_is_checked_before_tuning() {
    let dir = TempDir::new("tune-out");
    let folder = dir.path("a-folder");
    std::fs::create_dir(&folder).unwrap();
    let missing = dir.path("missing/t.json");
    let cases = [
        folder.display().to_string(),
        missing.display().to_string(),
        "/dev/full".to_string(),
        "/proc/version".to_string(),
    ];
    for out in &cases {
        let started = Instant::now();
        let run = tune(&["--budget", "600", "--out", out], &[]);
        let line = error_line(&run, out);
        assert_says(&line, out, &["--out", out]);
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{out}: refused only after {:?} (after tuning?)",
            started.elapsed()
        );
    }
}

/// `--budget` is kept within a margin (starting the device, and one warm-up: a pass predicted
/// to end past the budget is not started), with the full workloads too (4096³ among them);
/// and a run in which no family finished a candidate writes no file and says so.
#[test]
fn the_budget_is_kept_and_nothing_measured_writes_nothing() {
    if super::vulkan_pass_only("the budget is kept and nothing measured writes nothing") {
        return;
    }
    let dir = TempDir::new("tune-budget");
    for (budget, quick) in [(1, true), (2, false)] {
        let out_path = dir.path(&format!("t{budget}.json"));
        let out = out_path.display().to_string();
        let budget_text = budget.to_string();
        let args = ["--budget", budget_text.as_str(), "--out", &out];
        let started = Instant::now();
        let run = tune_with(quick, &args);
        let took = started.elapsed();
        let what = format!("--budget {budget} (quick: {quick})");
        assert!(
            took < Duration::from_secs(budget + 6),
            "{what} took {took:?}"
        );
        if run.status.success() {
            // Then some family finished a candidate, and the file holds what it measured.
            let text = String::from_utf8_lossy(&run.stdout);
            let written: Value =
                serde_json::from_str(&std::fs::read_to_string(&out_path).unwrap()).unwrap();
            let measured: Vec<&str> = written["measurements"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["kernel"].as_str().unwrap().split(" (").next().unwrap())
                .collect();
            let finished = measured
                .iter()
                .any(|family| !text.contains(&format!("note: {family}: no candidate finished")));
            assert!(
                finished,
                "{what}: a file though no candidate finished:\n{text}"
            );
        } else {
            let line = error_line(&run, &what);
            assert_says(&line, &what, &["nothing measured", "nothing written", &out]);
            assert!(
                !out_path.exists(),
                "{what}: a file though nothing was measured"
            );
        }
    }
}
