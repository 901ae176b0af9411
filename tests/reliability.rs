//! Rounds four and five of the reliability audit, as tests against the real `webgpu-amp`
//! binary: a skipped step never changes a weight and a run that only skips stops (`skip.rs`),
//! SIGINT and SIGTERM honoured in every long loop (`interrupts.rs`), costs refused before work
//! starts (`costs.rs`), no run that does nothing exits 0 (`no_ops.rs`), messages that name
//! the user's input (`messages.rs`); and round five (issue 43): kernel tables that cannot
//! compute wrong numbers or crash (`tables.rs`), a tuner that writes only what it measured
//! (`tuner.rs`), exit codes that tell the truth (`truth.rs`), advice that works when pasted
//! (`advice.rs`), runs that say what they do and resumes that know what they resume
//! (`runs.rs`), and messages that say it once and plainly (`wording.rs`). Each case failed on
//! the main before its fix.

#[path = "reliability/advice.rs"]
mod advice;
mod common;
#[path = "reliability/costs.rs"]
mod costs;
#[path = "reliability/interrupts.rs"]
mod interrupts;
#[path = "reliability/messages.rs"]
mod messages;
#[path = "reliability/no_ops.rs"]
mod no_ops;
#[path = "reliability/runs.rs"]
mod runs;
#[path = "reliability/skip.rs"]
mod skip;
#[path = "reliability/tables.rs"]
mod tables;
#[path = "reliability/truth.rs"]
mod truth;
#[path = "reliability/tuner.rs"]
mod tuner;
#[path = "reliability/wording.rs"]
mod wording;

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

use common::cli::BIN;

/// A fresh, empty folder under the system temp dir (removed when dropped).
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "webgpu-amp-reliability-{}-{tag}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    pub fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The binary with `args`, on the default adapter.
pub fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_remove("WEBGPU_AMP_BACKEND")
        .output()
        .expect("run webgpu-amp")
}

/// The binary with `args` (owned, as `quick` makes them), no tuning file from the environment.
pub fn run_owned(args: &[String]) -> Output {
    common::cli::command()
        .env_remove("WEBGPU_AMP_TUNING")
        .args(args)
        .output()
        .expect("run webgpu-amp")
}

/// A safetensors data set: f32 `x` [n, features] and i64 labels `y` [n].
pub fn class_data(x: &[f32], features: usize, labels: &[i64]) -> Vec<u8> {
    use safetensors::tensor::{Dtype, TensorView};
    let xb: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let yb: Vec<u8> = labels.iter().flat_map(|v| v.to_le_bytes()).collect();
    let n = labels.len();
    let views = [
        (
            "x",
            TensorView::new(Dtype::F32, vec![n, features], &xb).unwrap(),
        ),
        ("y", TensorView::new(Dtype::I64, vec![n], &yb).unwrap()),
    ];
    safetensors::serialize(views, None).unwrap()
}

/// gpt-tiny trained one step (batch 2) and saved in `tmp`: a checkpoint `sample` reads.
pub fn gpt_tiny_checkpoint(tmp: &TempDir) -> PathBuf {
    let save = tmp.path("gpt.safetensors");
    let s = save.display().to_string();
    let out = run(&[
        "train",
        "--model",
        "gpt-tiny",
        "--batch-size",
        "2",
        "--steps",
        "1",
        "--no-validate",
        "--save",
        &s,
    ]);
    assert!(out.status.success(), "{}", common::cli::output_text(&out));
    save
}

/// Under the GL pass, says NOT CHECKED for `what` and returns true: the table-file and
/// budget cases build their tables from, and time, the Vulkan adapter (the Vulkan pass runs
/// them); llvmpipe's GL is another adapter and several times slower.
fn vulkan_pass_only(what: &str) -> bool {
    let gl = std::env::var("WEBGPU_AMP_BACKEND").is_ok_and(|b| b == "gl");
    if gl {
        common::not_checked(&format!("{what}, under GL: the Vulkan pass runs it"));
    }
    gl
}
