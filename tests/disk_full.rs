//! A full disk during a save: the run ends with one `error:` line that names the file and
//! the bytes the save needed; the previous checkpoint and the moments file it names stay
//! intact and loadable (optimizer state included); no partial or temp file remains.
//!
//! The real `train --save-every 1` writes, with the moments in a moments file (test hook
//! `WEBGPU_AMP_TEST_INLINE_MOMENTS_MAX=0`): save 1 (step 1) = writes 1 (moments file) and
//! 2 (checkpoint); save 2 (step 2) = writes 3 and 4; the final save (step 2 again, the same
//! moments file name) = writes 5 and 6. The hook `WEBGPU_AMP_TEST_DISK_FULL=W:N` fails write
//! `W` as a full disk does after `N` bytes, or at its rename (`W:rename`), so each stage of a
//! save fails on every run. A real full file system (a small tmpfs) is tried too, where this
//! machine lets the test mount one.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use webgpu_amp::train::checkpoint::{Checkpoint, DISK_FULL_ENV, INLINE_MOMENTS_MAX_ENV};

const BIN: &str = env!("CARGO_BIN_EXE_webgpu-amp");
const CHECKPOINT: &str = "run.safetensors";
const MOMENTS_PREFIX: &str = "run.safetensors.optimizer-";

fn temp_dir(tag: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("webgpu-amp-disk-full-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Two optimizer steps of the mlp on a small synthetic set, saved after each and at the end.
fn train(dir: &Path, hook: Option<&str>) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args([
        "train",
        "--model",
        "mlp",
        "--dataset",
        "synthetic:64",
        "--batch-size",
        "8",
        "--steps",
        "2",
        "--no-validate",
        "--save-every",
        "1",
        "--save",
    ])
    .arg(dir.join(CHECKPOINT))
    .env(INLINE_MOMENTS_MAX_ENV, "0");
    match hook {
        Some(h) => cmd.env(DISK_FULL_ENV, h),
        None => cmd.env_remove(DISK_FULL_ENV),
    };
    cmd.output().expect("run webgpu-amp")
}

/// The one `error:` line of a failed run.
fn error_line(out: &Output, what: &str) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        !out.status.success(),
        "{what}: the run succeeded:\n{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{what}: panic:\n{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{what}: stderr must be one line:\n{stderr}");
    assert!(lines[0].starts_with("error: "), "{what}: {}", lines[0]);
    lines[0].to_string()
}

/// The bytes of the checkpoint at `dir` and its moments file: what one save writes.
fn save_bytes(dir: &Path) -> u64 {
    let names = common::file_names(dir, |_| true);
    assert_eq!(
        names.len(),
        2,
        "a checkpoint and its moments file: {names:?}"
    );
    names
        .iter()
        .map(|n| std::fs::metadata(dir.join(n)).unwrap().len())
        .sum()
}

/// What must hold after a save failed: the checkpoint holds `step` with its optimizer state
/// (its moments file found and its CRC right), and nothing else is in the folder.
fn assert_previous_intact(dir: &Path, step: u64, what: &str) {
    let names = common::file_names(dir, |_| true);
    assert_eq!(
        names.len(),
        2,
        "{what}: leftover or missing files: {names:?}"
    );
    assert_eq!(names[0], CHECKPOINT, "{what}: {names:?}");
    assert!(names[1].starts_with(MOMENTS_PREFIX), "{what}: {names:?}");
    let ck = Checkpoint::load(&dir.join(CHECKPOINT))
        .unwrap_or_else(|e| panic!("{what}: the previous checkpoint does not load: {e}"));
    assert_eq!(ck.progress.step, step, "{what}: the checkpoint's step");
    let optimizer = ck.optimizer.expect("optimizer state");
    assert_eq!(
        optimizer.unavailable, None,
        "{what}: the moments file the checkpoint names"
    );
    assert_eq!(
        optimizer.moments_file.map(|f| f.file),
        Some(names[1].clone()),
        "{what}"
    );
}

#[test]
fn a_full_disk_at_each_stage_of_a_save_keeps_the_previous_checkpoint() {
    // A run without the hook: what one save of this run writes.
    let clean = temp_dir("clean");
    let out = train(&clean, None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let needs = save_bytes(&clean);
    let _ = std::fs::remove_dir_all(&clean);

    // (hook, the file it fails, the step the checkpoint must still hold)
    let all = u64::MAX.to_string();
    let cases = [
        ("3:0".to_string(), "moments file", 1),
        ("3:4096".to_string(), "moments file", 1),
        ("3:rename".to_string(), "moments file", 1),
        ("4:0".to_string(), "checkpoint", 1),
        ("4:4096".to_string(), "checkpoint", 1),
        ("4:rename".to_string(), "checkpoint", 1),
        // The final save's moments file has save 2's name: it must survive.
        (format!("6:{all}"), "checkpoint", 2),
    ];
    for (hook, stage, step) in cases {
        let what = format!("{DISK_FULL_ENV}={hook} ({stage})");
        let dir = temp_dir(&hook.replace(':', "-"));
        let line = error_line(&train(&dir, Some(&hook)), &what);
        let file = match stage {
            "checkpoint" => format!("{}: ", dir.join(CHECKPOINT).display()),
            _ => format!("{}", dir.join(MOMENTS_PREFIX).display()),
        };
        for needle in [
            file.as_str(),
            "No space left on device",
            &format!("the save needs {needs} bytes"),
            "the temp file is removed",
            &format!("{} still holds step {step}", dir.join(CHECKPOINT).display()),
        ] {
            assert!(line.contains(needle), "{what}: lacks `{needle}`: {line}");
        }
        println!("{what}: {line}");
        assert_previous_intact(&dir, step, &what);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// A tmpfs of `kib` KiB mounted on `dir` while it lives (needs root: `mount`).
struct Tmpfs(PathBuf);

impl Tmpfs {
    /// `Err` with `mount`'s complaint where this machine does not allow it.
    fn mount(dir: &Path, kib: u64) -> Result<Tmpfs, String> {
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={kib}k"), "tmpfs"])
            .arg(dir)
            .output()
            .map_err(|e| format!("`mount` did not run: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        Ok(Tmpfs(dir.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// 4 KiB pages a file of `bytes` takes on a tmpfs.
fn pages(bytes: u64) -> u64 {
    bytes.div_ceil(4096)
}

/// A real full file system: a tmpfs that holds one save and part of the next, so that save
/// 2 runs out of space inside its moments file, or inside its checkpoint.
#[test]
fn a_real_full_file_system_keeps_the_previous_checkpoint() {
    let clean = temp_dir("tmpfs-clean");
    let out = train(&clean, None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let size = |prefix: &str| {
        let name = &common::file_names(&clean, |n| n.starts_with(prefix))[0];
        std::fs::metadata(clean.join(name)).unwrap().len()
    };
    let (moments, checkpoint) = (size(MOMENTS_PREFIX), size(CHECKPOINT));
    let _ = std::fs::remove_dir_all(&clean);
    let one_save = pages(moments) + pages(checkpoint);
    let cases = [
        ("moments file", one_save + pages(moments) / 2),
        (
            "checkpoint",
            one_save + pages(moments) + pages(checkpoint) / 2,
        ),
    ];
    for (stage, capacity) in cases {
        let what = format!("a {capacity}-page tmpfs ({stage})");
        let dir = temp_dir(&format!("tmpfs-{capacity}"));
        let mounted = match Tmpfs::mount(&dir, capacity * 4) {
            Ok(m) => m,
            Err(why) => {
                common::not_checked(&format!(
                    "a save on a real full file system (cannot mount a tmpfs here: {why}); \
                     the write hook's cases ran"
                ));
                let _ = std::fs::remove_dir_all(&dir);
                return;
            }
        };
        let line = error_line(&train(&dir, None), &what);
        let file = match stage {
            "checkpoint" => format!("{}: writing: ", dir.join(CHECKPOINT).display()),
            _ => format!("{}", dir.join(MOMENTS_PREFIX).display()),
        };
        for needle in [
            file.as_str(),
            "No space left on device",
            &format!("the save needs {} bytes", moments + checkpoint),
            &format!("{} still holds step 1", dir.join(CHECKPOINT).display()),
        ] {
            assert!(line.contains(needle), "{what}: lacks `{needle}`: {line}");
        }
        println!("{what}: {line}");
        assert_previous_intact(&dir, 1, &what);
        drop(mounted);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
