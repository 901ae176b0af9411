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

use common::cli::{BIN, assert_says, error_line, fresh_dir, quick};
use webgpu_amp::train::checkpoint::{Checkpoint, DISK_FULL_ENV, INLINE_MOMENTS_MAX_ENV};

const CHECKPOINT: &str = "run.safetensors";
const MOMENTS_PREFIX: &str = "run.safetensors.optimizer-";

/// Two optimizer steps of the mlp on a small synthetic set, saved after each and at the end.
fn train(dir: &Path, hook: Option<&str>) -> Output {
    let checkpoint = dir.join(CHECKPOINT).display().to_string();
    let mut cmd = Command::new(BIN);
    cmd.args(quick(
        "train",
        2,
        &["--save-every", "1", "--save", &checkpoint],
    ))
    .env(INLINE_MOMENTS_MAX_ENV, "0");
    match hook {
        Some(h) => cmd.env(DISK_FULL_ENV, h),
        None => cmd.env_remove(DISK_FULL_ENV),
    };
    cmd.output().expect("run webgpu-amp")
}

/// The bytes of the moments file and of the checkpoint that one save of [`train`] writes,
/// from a run without the hook (in its own folder, `tag`).
fn one_save(tag: &str) -> (u64, u64) {
    let dir = fresh_dir(tag);
    let out = train(&dir, None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let names = common::file_names(&dir, |_| true);
    assert_eq!(
        names.len(),
        2,
        "a checkpoint and its moments file: {names:?}"
    );
    let size = |name: &str| std::fs::metadata(dir.join(name)).unwrap().len();
    let sizes = (size(&names[1]), size(&names[0]));
    let _ = std::fs::remove_dir_all(&dir);
    sizes
}

/// What the error of a save that ran out of space says: the file (the moments file or the
/// checkpoint, `stage`), the bytes the whole save needs, that no temp file remains, and the
/// step the checkpoint on disk still holds.
fn assert_says_out_of_space(
    line: &str,
    what: &str,
    dir: &Path,
    stage: &str,
    needs: u64,
    step: u64,
) {
    let file = match stage {
        "checkpoint" => format!("{}: ", dir.join(CHECKPOINT).display()),
        _ => dir.join(MOMENTS_PREFIX).display().to_string(),
    };
    let holds = format!("{} still holds step {step}", dir.join(CHECKPOINT).display());
    let needles = [
        &file,
        "No space left on device",
        "the temp file is removed",
        &holds,
    ];
    assert_says(line, what, &needles);
    // The bytes the save needs, as the reference save wrote them: its header may differ by
    // one 8-byte padding step, since the moments file's CRC-32 is written in decimal and
    // its own header's key order (safetensors keeps metadata in a HashMap) varies by run.
    let said: u64 = line
        .split("the save needs ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{what}: no `the save needs N bytes` in: {line}"));
    assert!(
        said.abs_diff(needs) <= 8,
        "{what}: the save needs {said} bytes, the reference save wrote {needs}: {line}"
    );
    println!("{what}: {line}");
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
    let (moments, checkpoint) = one_save("clean");
    let needs = moments + checkpoint;

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
        let dir = fresh_dir(&hook.replace(':', "-"));
        let line = error_line(&train(&dir, Some(&hook)), &what);
        assert_says_out_of_space(&line, &what, &dir, stage, needs, step);
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
    let (moments, checkpoint) = one_save("tmpfs-clean");
    let first = pages(moments) + pages(checkpoint);
    let cases = [
        ("moments file", first + pages(moments) / 2),
        ("checkpoint", first + pages(moments) + pages(checkpoint) / 2),
    ];
    for (stage, capacity) in cases {
        let what = format!("a {capacity}-page tmpfs ({stage})");
        let dir = fresh_dir(&format!("tmpfs-{capacity}"));
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
        assert_says(
            &line,
            &what,
            &["writing: No space left on device (os error 28)"],
        );
        assert_says_out_of_space(&line, &what, &dir, stage, moments + checkpoint, 1);
        assert_previous_intact(&dir, 1, &what);
        drop(mounted);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
