//! A rank that goes wrong ends the whole job: one killed mid-run ends it within seconds and
//! rank 0 says which checkpoint is intact (that checkpoint loads and resumes); one that fails
//! (no such adapter) ends it with its message printed by rank 0; one that stops responding
//! ends it after `--collective-timeout`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use webgpu_amp::train::checkpoint::Checkpoint;

use super::common::cli::output_text;
use super::common::cli::{BIN, fresh_dir};
use super::{ends_within, lock, mpirun, one_rank_differs, words};

/// The processes `mpirun` (pid `parent`) started, by rank.
fn rank_pid(parent: u32, rank: usize) -> Option<u32> {
    let want = format!("OMPI_COMM_WORLD_RANK={rank}");
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // Fields after the command name (which may hold spaces): state, ppid, ...
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid != Some(parent) {
            continue;
        }
        let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        if env.split(|&b| b == 0).any(|v| v == want.as_bytes()) {
            return Some(pid);
        }
    }
    None
}

/// Starts a long two-rank run that saves every 2 steps, waits for its first checkpoint and
/// returns the job, its checkpoint path and rank 1's pid.
fn long_job(dir: &Path, extra: &[&str]) -> (Child, PathBuf, u32) {
    let ck = dir.join("run.safetensors");
    let ck_arg = ck.display().to_string();
    let mut args = vec!["-np", "2", BIN];
    args.extend(words(
        "train --model mlp --precision amp-f16 --batch-size 16 --steps 100000 --no-validate",
    ));
    args.extend(["--save", &ck_arg, "--save-every", "2"]);
    args.extend(extra);
    let mut job = mpirun(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !ck.exists() {
        if let Some(status) = job.try_wait().unwrap() {
            panic!(
                "the job ended before its first checkpoint: {status}: {}",
                output_text(&job.wait_with_output().unwrap())
            );
        }
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "no checkpoint after 300 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let pid = rank_pid(job.id(), 1).expect("rank 1 among mpirun's children");
    (job, ck, pid)
}

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap();
    assert!(ok.success(), "kill {sig} {pid}");
}

#[test]
fn killing_a_rank_ends_the_job_within_seconds_and_the_checkpoint_loads() {
    let _guard = lock();
    let dir = fresh_dir("kill");
    let (job, ck, pid) = long_job(&dir, &[]);
    std::thread::sleep(Duration::from_millis(500));
    signal(pid, "-KILL");
    let (out, took) = ends_within(job, Duration::from_secs(60));
    let all = output_text(&out);
    assert!(
        took < Duration::from_secs(10),
        "the job took {took:?} to end: {all}"
    );
    assert!(!out.status.success(), "{all}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("rank 0: the MPI launcher is ending the job")
            && stderr.contains("is intact")
            && stderr.contains("rank 1"),
        "rank 0 says the job ends and which checkpoint survives; mpirun names rank 1: {all}"
    );
    let loaded = Checkpoint::load(&ck).unwrap();
    assert!(loaded.progress.step >= 2, "{:?}", loaded.progress);
    // It resumes, on every rank (two ranks, two more steps).
    let steps = (loaded.progress.step + 2).to_string();
    let ck_arg = ck.display().to_string();
    let mut args = vec!["-np", "2", BIN];
    args.extend(words(
        "train --model mlp --precision amp-f16 --batch-size 16 --no-validate --resume",
    ));
    args.extend([ck_arg.as_str(), "--steps", &steps]);
    let resumed = mpirun(&args).output().unwrap();
    assert!(
        resumed.status.success(),
        "resume: {}",
        output_text(&resumed)
    );
}

#[test]
fn a_failing_rank_ends_the_job_with_its_message_on_rank_0() {
    let _guard = lock();
    let train = words("train --model mlp --precision f32 --steps 20 --no-validate");
    let out = one_rank_differs(&train, &["--adapter", "no-such-adapter"]);
    let all = output_text(&out);
    assert!(!out.status.success(), "{all}");
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("error: rank 1 of 2 failed: no adapter's name contains `no-such-adapter`"),
        "rank 0 prints rank 1's error: {all}"
    );
}

#[test]
fn a_stuck_rank_ends_the_job_after_the_collective_timeout() {
    let _guard = lock();
    let dir = fresh_dir("stuck");
    let (job, _ck, pid) = long_job(&dir, &["--collective-timeout", "3"]);
    signal(pid, "-STOP");
    let (out, took) = ends_within(job, Duration::from_secs(60));
    let _ = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status();
    let all = output_text(&out);
    assert!(!out.status.success(), "{all}");
    assert!(took < Duration::from_secs(20), "took {took:?}: {all}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("did not complete within 3 s"),
        "{all}"
    );
}
