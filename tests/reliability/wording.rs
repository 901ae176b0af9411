//! The messages round five found unclear (issue 43, item 8): each now says what the user gave
//! and what to do, once.

use std::time::Duration;

use super::{TempDir, class_data, run_owned as run};
use crate::common::cli::{assert_says, command, error_line, output_text, quick};

/// A wrapped error says its kind once ("invalid argument: tuning file …: invalid argument: …").
#[test]
fn an_error_says_its_kind_once() {
    let tmp = TempDir::new("prefix");
    let bad = super::tables::tuning_file(&tmp, "bad.json", |f| {
        f["table"]["simt_f32"]["bk"] = serde_json::json!(3)
    });
    let args = [
        "info".to_string(),
        "--tuning".into(),
        bad.display().to_string(),
    ];
    let line = error_line(&run(&args), "prefix");
    assert_eq!(line.matches("invalid argument").count(), 1, "{line}");
}

/// `--max-skipped-steps -1` was clap's "unexpected argument", without the range.
#[test]
fn a_negative_max_skipped_steps_gives_the_range() {
    let line = error_line(
        &run(&quick("train", 1, &["--max-skipped-steps", "-1"])),
        "--max-skipped-steps -1",
    );
    assert_says(&line, "-1", &["--max-skipped-steps", "0 to 2^53", "-1"]);
}

/// A subnormal `--init-scale` made every unscaled gradient inf (its reciprocal is), and the run
/// stopped blaming the data; it is refused with its range.
#[test]
fn a_subnormal_init_scale_is_refused_not_blamed_on_the_data() {
    let out = run(&quick(
        "train",
        2,
        &["--precision", "amp-f16", "--init-scale", "1e-40"],
    ));
    let line = error_line(&out, "1e-40");
    assert_says(&line, "1e-40", &["--init-scale", "2^-126", "1e-40"]);
    assert!(!line.contains("data"), "{line}");
}

/// Scales print as numbers a reader counts: `1e-30`, not thirty digits.
#[test]
fn scales_print_in_scientific_notation_when_tiny() {
    let out = run(&quick(
        "train",
        2,
        &["--precision", "amp-f16", "--init-scale", "1e-30"],
    ));
    assert!(out.status.success(), "{}", output_text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("final scale"))
        .unwrap();
    assert!(line.trim_end().ends_with("1e-30"), "{line}");
}

/// `compare` with `--keep-f32` given: its f32 run (counted against f16's range) advised to keep
/// the same layer again.
#[test]
fn compare_does_not_advise_a_keep_f32_already_given() {
    let tmp = TempDir::new("compare-keep");
    // Inputs of 10^5: the first linear's outputs pass f16's range.
    let x: Vec<f32> = (0..32 * 4).map(|i| 1e5 * (1 + i % 3) as f32).collect();
    let labels: Vec<i64> = (0..32).map(|i| i % 2).collect();
    let data = tmp.write("big.safetensors", &class_data(&x, 4, &labels));
    let data = data.display().to_string();
    let base = [
        "compare",
        "--model",
        "mlp",
        "--dataset",
        &data,
        "--batch-size",
        "8",
        "--steps",
        "2",
        "--no-validate",
        "--numerics",
        "every:1",
    ];
    let out = run(&base.iter().map(|s| s.to_string()).collect::<Vec<_>>());
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let Some(paste) = stdout.lines().find(|l| l.starts_with("paste: --keep-f32")) else {
        panic!(
            "no layer to keep in f32 (the case needs one):\n{}",
            output_text(&out)
        );
    };
    let flag: Vec<String> = paste["paste: ".len()..]
        .split(' ')
        .map(str::to_string)
        .collect();
    let mut again: Vec<String> = base.iter().map(|s| s.to_string()).collect();
    again.extend(flag.clone());
    let out = run(&again);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !stdout.contains(&format!("paste: {}", flag.join(" "))),
        "advised again with {flag:?} given:\n{stdout}"
    );
    assert!(stdout.contains("kept in f32 already"), "{stdout}");
}

/// A run's per-step skip lines are in its log too (the guide shows them there): they were
/// printed only where the progress bar is, on a terminal.
#[test]
fn skip_lines_reach_a_log() {
    let out = run(&quick(
        "train",
        3,
        &["--precision", "amp-f16", "--init-scale", "3e38"],
    ));
    assert!(out.status.success(), "{}", output_text(&out));
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(log.contains("amp-f16: step 1 skipped"), "{log}");
}

/// Model files: `keep_f32` inside a residual, nesting 10,000 deep and `out: 2^64` each say
/// what is wrong (they said "exactly one key", "syntax error" and "floating point").
#[test]
fn model_file_messages_name_the_problem() {
    let tmp = TempDir::new("model-json");
    let deep = format!(
        "{{\"input\": [4], \"layers\": [{}{{\"linear\": {{\"out\": 4}}}}{}]}}",
        "{\"residual\": {\"layers\": [".repeat(10_000),
        "]}}".repeat(10_000)
    );
    let cases = [
        (
            r#"{"input": [4], "layers": [{"residual": {"layers": [{"linear": {"out": 4}, "keep_f32": true}]}}]}"#.to_string(),
            &["keep_f32", "inside", "residual"][..],
        ),
        (deep, &["nested deeper than the 128 levels"][..]),
        (
            r#"{"input": [4], "layers": [{"linear": {"out": 18446744073709551616}}]}"#.to_string(),
            &["too large", "18446744073709551615"][..],
        ),
    ];
    for (i, (json, says)) in cases.iter().enumerate() {
        let file = tmp.write(&format!("m{i}.json"), json.as_bytes());
        let args = [
            "plan",
            "--model",
            &file.display().to_string(),
            "--dataset",
            "synthetic:64",
        ];
        let line = error_line(&run(&args.map(String::from)), &format!("model {i}"));
        assert_says(&line, &format!("model {i}"), says);
        assert!(
            !line.contains("syntax error") && !line.contains("floating point"),
            "{line}"
        );
    }
}

/// A FIFO as `--tuning` or `--model` waited without a word; it now says that it waits (as
/// text sources do), and reads what comes.
#[cfg(unix)]
#[test]
fn a_fifo_that_keeps_a_command_waiting_says_so() {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = TempDir::new("fifo");
    for (flag, noun) in [("--tuning", "a tuning file"), ("--model", "a model")] {
        // `.json`: a model is read from a file only by that name (else it is a preset's).
        let fifo = tmp.path(&format!("fifo{}.json", flag.len()));
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success(), "mkfifo");
        let fifo = fifo.display().to_string();
        let args = match flag {
            "--tuning" => vec!["info", "--tuning", &fifo],
            _ => vec!["plan", "--model", &fifo, "--dataset", "synthetic:64"],
        };
        let mut child = command()
            .env_remove("WEBGPU_AMP_TUNING")
            .args(&args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_secs(4));
        if let Some(status) = child.try_wait().unwrap() {
            let mut stderr = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut stderr)
                .unwrap();
            panic!("{flag}: ended ({status}) without waiting on the FIFO: {stderr}");
        }
        // Let it go: a writer that writes nothing (end of file). Non-blocking: a command
        // that is not reading it fails the case rather than hanging it.
        let writer = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo);
        drop(writer.unwrap_or_else(|e| panic!("{flag}: nothing reads the FIFO: {e}")));
        // Read once: a command that opens it again would wait for a writer for ever.
        let started = std::time::Instant::now();
        while child.try_wait().unwrap().is_none() {
            if started.elapsed() > Duration::from_secs(120) {
                child.kill().unwrap();
                panic!("{flag}: still waiting after the FIFO's end of file (read twice?)");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        child.wait().unwrap();
        assert!(
            stderr.contains(&format!(
                "reading {noun} from a pipe/device: waiting for data"
            )),
            "{flag}: {stderr}"
        );
    }
}
