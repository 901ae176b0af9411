//! A reader that goes away (`webgpu-amp … | head`): every command ends quietly.

use std::process::Command;

use super::fixtures::gpt_checkpoint;
use super::{BIN, TempDir};

/// The binary on `args` (on the default adapter and f16 storage) with its stdout and stderr
/// piped.
fn spawn_piped(args: &[&str]) -> std::process::Child {
    Command::new(BIN)
        .args(args)
        .env_remove("WEBGPU_AMP_BACKEND")
        .env_remove("WEBGPU_AMP_F16_STORAGE")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn webgpu-amp")
}

/// `webgpu-amp … | head`: the reader goes away. The command ends quietly (exit 0, nothing
/// on stderr, no panic), and what it writes to files is still written.
#[test]
fn a_closed_stdout_ends_the_command_quietly() {
    let tmp = TempDir::new("pipe");
    let ck = tmp.path("run.safetensors");
    let report = tmp.path("report.json");
    let png = tmp.path("report.png");
    let gpt = tmp.path("gpt.safetensors");
    gpt_checkpoint(&gpt);
    let cases: Vec<Vec<&str>> = vec![
        vec![
            "sample",
            "--checkpoint",
            gpt.to_str().unwrap(),
            "--tokens",
            "8",
        ],
        vec!["info"],
        vec!["info", "--json"],
        vec![
            "bench",
            "matmul",
            "--json",
            "--sizes",
            "16",
            "--repeats",
            "1",
        ],
        vec!["bench", "matmul", "--sizes", "16,32", "--repeats", "1"],
        vec![
            "train",
            "--dataset",
            "synthetic",
            "--steps",
            "2",
            "--save",
            ck.to_str().unwrap(),
        ],
        vec![
            "compare",
            "--dataset",
            "synthetic",
            "--steps",
            "2",
            "--report",
            report.to_str().unwrap(),
            "--png",
            png.to_str().unwrap(),
        ],
    ];
    for args in cases {
        let mut child = spawn_piped(&args);
        // Close the read end before the child writes a byte: its first write is EPIPE.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "{args:?}: exit {:?} on a closed stdout; stderr:\n{stderr}",
            out.status
        );
        // (Mesa's loader complains on stderr when XDG_RUNTIME_DIR is unset; not ours.)
        let ours: Vec<&str> = stderr
            .lines()
            .filter(|l| !l.contains("XDG_RUNTIME_DIR"))
            .collect();
        assert!(
            !ours
                .iter()
                .any(|l| l.contains("panicked") || l.starts_with("error")),
            "{args:?}: not quiet on a closed stdout:\n{stderr}"
        );
    }
    assert!(ck.is_file(), "train wrote no checkpoint with stdout closed");
    assert!(report.is_file() && png.is_file(), "compare lost its report");
}

/// `webgpu-amp sample … | head -1`: the reader takes the first line (the default prompt is
/// a newline) and goes; `sample`, still writing the text, ends quietly with exit 0 as the
/// other commands do (it used to say `error: … Broken pipe` and exit 1).
#[test]
fn sample_piped_into_head_ends_quietly() {
    use std::io::Read;
    let tmp = TempDir::new("sample-head");
    let gpt = tmp.path("gpt.safetensors");
    gpt_checkpoint(&gpt);
    let gpt = gpt.to_str().unwrap();
    let mut child = spawn_piped(&[
        "sample",
        "--checkpoint",
        gpt,
        "--tokens",
        "500",
        "--chunk",
        "1",
    ]);
    let mut stdout = child.stdout.take().unwrap();
    let mut first = Vec::new();
    let mut byte = [0u8];
    while stdout.read(&mut byte).unwrap() == 1 {
        first.push(byte[0]);
        if byte[0] == b'\n' {
            break;
        }
    }
    assert_eq!(first, b"\n", "the first line is the default prompt");
    drop(stdout);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "exit code; stderr:\n{stderr}");
    assert!(
        !stderr.lines().any(|l| l.starts_with("error")) && !stderr.contains("panicked"),
        "not quiet:\n{stderr}"
    );
}
