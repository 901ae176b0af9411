//! Save targets: a checkpoint (`--save`), metrics (`--metrics`) and `compare`'s report
//! (`--report`, `--png`) go only to a regular file or a new path. A device node, a
//! directory, a FIFO, a symlink to one of these or to nothing, and a folder that does not
//! exist are refused with one `error:` line before any training, and the target is left as
//! it was. A symlink to a regular file is written through (the link stays). A report whose
//! write fails leaves the previous file.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::cli::{BIN, assert_says, error_line, fresh_dir, quick};
use webgpu_amp::train::checkpoint::{Checkpoint, DISK_FULL_ENV, INLINE_MOMENTS_MAX_ENV};

const RULE: &str = "a save goes only to a regular file or a new path";

/// Runs the binary, killed after 60 s (a write that blocks on a FIFO would hang).
fn run(args: &[String], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("run webgpu-amp");
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            child.kill().unwrap();
            panic!(
                "`{}` still ran after 60 s (blocked on the target?)",
                args.join(" ")
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// The single `error:` line of a run refused before it trained (nothing on stdout).
fn refused(out: &Output, needles: &[&str]) -> String {
    let line = error_line(out, "a refused target");
    assert_says(&line, "a refused target", needles);
    assert_says(&line, "a refused target", &[RULE]);
    assert!(
        out.stdout.is_empty(),
        "refused only after starting: stdout {}",
        String::from_utf8_lossy(&out.stdout)
    );
    line
}

/// A character device to aim at: a node of our own (root: `mknod`, like /dev/full), else
/// /dev/full itself, which only root could replace.
fn char_device(dir: &Path) -> PathBuf {
    let own = dir.join("full");
    let made = Command::new("mknod")
        .arg(&own)
        .args(["c", "1", "7"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if made {
        own
    } else {
        PathBuf::from("/dev/full")
    }
}

fn mkfifo(path: &Path) {
    let ok = Command::new("mkfifo").arg(path).status().expect("mkfifo");
    assert!(ok.success(), "mkfifo {}", path.display());
}

fn symlink(target: &Path, link: &Path) {
    std::os::unix::fs::symlink(target, link).unwrap();
}

/// What each kind of target must still be after a refusal.
fn file_type(path: &Path) -> String {
    use std::os::unix::fs::FileTypeExt;
    let t = std::fs::symlink_metadata(path).unwrap().file_type();
    let kind = [
        (t.is_symlink(), "symlink"),
        (t.is_dir(), "dir"),
        (t.is_char_device(), "char device"),
        (t.is_fifo(), "fifo"),
        (t.is_file(), "file"),
    ];
    kind.iter()
        .find(|(is, _)| *is)
        .map_or("other", |k| k.1)
        .into()
}

#[test]
fn save_and_metrics_refuse_what_is_not_a_regular_file_before_training() {
    let dir = fresh_dir("refused");
    let device = char_device(&dir);
    let folder = dir.join("folder");
    std::fs::create_dir(&folder).unwrap();
    let fifo = dir.join("fifo");
    mkfifo(&fifo);
    let links = [
        ("link-to-device", device.clone()),
        ("link-to-folder", folder.clone()),
        ("link-to-fifo", fifo.clone()),
        ("link-to-nothing", dir.join("nothing")),
    ];
    for (name, target) in &links {
        symlink(target, &dir.join(name));
    }
    // (target, what the message says)
    let cases: Vec<(PathBuf, &str)> = vec![
        (device.clone(), "is a character device"),
        (folder.clone(), "is a directory"),
        (fifo.clone(), "is a FIFO"),
        (
            dir.join("link-to-device"),
            "is a symlink to a character device",
        ),
        (dir.join("link-to-folder"), "is a symlink to a directory"),
        (dir.join("link-to-fifo"), "is a symlink to a FIFO"),
        (dir.join("link-to-nothing"), "is a symlink to nothing"),
        (dir.join("no-such-folder/run.safetensors"), "cannot be used"),
    ];
    let before: Vec<String> = cases
        .iter()
        .filter(|(p, _)| p.exists() || p.is_symlink())
        .map(|(p, _)| file_type(p))
        .collect();
    for flag in ["--save", "--metrics"] {
        for (target, says) in &cases {
            let path = target.display().to_string();
            let out = run(&quick("train", 1, &[flag, &path]), &[]);
            let line = refused(&out, &[&format!("{flag} {path}: "), says]);
            println!("{line}");
        }
    }
    let after: Vec<String> = cases
        .iter()
        .filter(|(p, _)| p.exists() || p.is_symlink())
        .map(|(p, _)| file_type(p))
        .collect();
    assert_eq!(before, after, "a refused target changed");
    assert_eq!(
        std::fs::read_dir(&folder).unwrap().count(),
        0,
        "the folder is untouched"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Through a symlink to a regular file in another folder, a checkpoint with a moments file
/// goes beside the file itself; the link stays a link and loads, moments included.
#[test]
fn a_symlink_to_a_regular_file_is_saved_through() {
    let dir = fresh_dir("through");
    let real_dir = dir.join("real");
    std::fs::create_dir(&real_dir).unwrap();
    let real = real_dir.join("run.safetensors");
    std::fs::write(&real, b"old").unwrap();
    let link = dir.join("link.safetensors");
    symlink(&real, &link);
    let link_arg = link.display().to_string();
    let out = run(
        &quick("train", 1, &["--save", &link_arg]),
        &[(INLINE_MOMENTS_MAX_ENV, "0")],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(file_type(&link), "symlink", "the link was replaced");
    assert_eq!(
        common::file_names(&dir, |_| true),
        ["link.safetensors", "real"]
    );
    let beside = common::file_names(&real_dir, |_| true);
    assert_eq!(beside.len(), 2, "checkpoint and moments file: {beside:?}");
    for path in [&link, &real] {
        let ck = Checkpoint::load(path).unwrap();
        assert_eq!(ck.progress.step, 1);
        assert_eq!(
            ck.optimizer.unwrap().unavailable,
            None,
            "{}",
            path.display()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `compare`'s report and chart: refused targets, and a chart whose write fails (a full
/// disk, by the write hook) leaves the previous chart as it was.
#[test]
fn compare_reports_go_only_to_regular_files_and_a_failed_write_keeps_the_old_one() {
    let dir = fresh_dir("compare");
    let device = char_device(&dir);
    let report = dir.join("report.json");
    let png = dir.join("report.png");
    let compare = |extra: &[&str]| quick("compare", 2, extra);
    let (report_arg, png_arg) = (report.display().to_string(), png.display().to_string());
    let device_arg = device.display().to_string();
    let dir_arg = dir.display().to_string();
    for (flag, other, target, says) in [
        (
            "--report",
            ("--png", &png_arg),
            &device_arg,
            "is a character device",
        ),
        (
            "--png",
            ("--report", &report_arg),
            &dir_arg,
            "is a directory",
        ),
    ] {
        let out = run(&compare(&[flag, target, other.0, other.1]), &[]);
        println!("{}", refused(&out, &[&format!("{flag} {target}: "), says]));
    }
    assert_eq!(file_type(&device), "char device");

    // Write 1 is report.json, write 2 the chart: it runs out of space after 100 bytes.
    std::fs::write(&report, b"old report").unwrap();
    std::fs::write(&png, b"old chart").unwrap();
    let args = compare(&["--report", &report_arg, "--png", &png_arg]);
    let out = run(&args, &[(DISK_FULL_ENV, "2:100")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("{png_arg}: writing: No space left on device")),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read(&png).unwrap(),
        b"old chart",
        "the old chart was lost"
    );
    assert_ne!(
        std::fs::read(&report).unwrap(),
        b"old report",
        "report.json was written"
    );
    let mut names = common::file_names(&dir, |_| true);
    names.retain(|n| n != "full");
    assert_eq!(names, ["report.json", "report.png"], "leftover files");
    let _ = std::fs::remove_dir_all(&dir);
}
