//! Exit codes tell the truth (round five, item 4): a closed stdout silences the output but
//! never turns a failure into success, and an empty device flag is refused, not read as auto.

use std::process::Stdio;

use crate::common::cli::{assert_says, command, error_line};

/// `selftest | head -1` where a check fails: the reader is gone before the first line, and
/// the exit code is still the failure's (1), with its line on stderr.
#[test]
fn a_closed_stdout_keeps_a_failures_exit_code() {
    let mut child = command()
        .env_remove("WEBGPU_AMP_TUNING")
        .args(["selftest", "--break-reference", "matmul"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn webgpu-amp");
    // Close the read end before the child writes a byte: its first write is EPIPE.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let line = error_line(&out, "selftest with a failing check and stdout closed");
    assert_eq!(out.status.code(), Some(1), "{line}");
    assert_says(&line, "selftest", &["checks failed"]);
}

/// An empty (or blank) value for a device flag is a slip (`--backend "$UNSET"`): refused with
/// what the flag takes, by every command that has it (it ran as auto).
#[test]
fn empty_device_flags_are_refused() {
    let flags = [
        ("--backend", "vulkan, metal"),
        ("--adapter", "adapter's name"),
        ("--f16-storage", "auto, native or packed"),
        ("--tensor-cores", "auto, on"),
        ("--tuning", "a file"),
    ];
    let commands: [&[&str]; 3] = [
        &["bench", "matmul", "--sizes", "16", "--repeats", "1"],
        &["info"],
        &["selftest"],
    ];
    for args in commands {
        for (flag, takes) in flags {
            if args == ["info"] && flag == "--adapter" {
                continue; // info lists every adapter: it has no --adapter
            }
            for value in ["", " "] {
                let out = command()
                    .env_remove("WEBGPU_AMP_TUNING")
                    .args(args)
                    .args([flag, value])
                    .output()
                    .unwrap();
                let what = format!("{args:?} {flag} {value:?}");
                let line = error_line(&out, &what);
                assert_eq!(out.status.code(), Some(2), "{what}: {line}");
                if flag == "--tuning" && value.is_empty() {
                    // clap refuses an empty path itself.
                    assert_says(&line, &what, &[flag, "a value is required"]);
                } else {
                    assert_says(&line, &what, &[flag, "empty value", takes]);
                }
            }
        }
    }
}
