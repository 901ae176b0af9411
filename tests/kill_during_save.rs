//! Processes killed (SIGKILL) at random moments while they rewrite a checkpoint must always
//! leave a loadable one: the old content or the new, never a torn or mixed file.
//!
//! - `examples/save_loop.rs` does nothing but save (so most kills land inside a save), and
//!   marks save `i` with `i` (its step and each tensor's first and last value): a reader can
//!   tell a whole file from a mixed one.
//! - The real `train --save-every 1`, killed and resumed from whatever is on disk: the step
//!   never goes backwards, and a killed writer's temp file breaks nothing (the next save
//!   removes it).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use safetensors::tensor::{Dtype, TensorView};
use webgpu_amp::train::checkpoint::Checkpoint;

const BIN: &str = env!("CARGO_BIN_EXE_webgpu-amp");
const KILLS: usize = 20;
const TRAINING_KILLS: usize = 6;

/// Builds `examples/save_loop.rs` (tests do not build examples) and returns its path, beside
/// this test's own binary: `target/<profile>/examples/save_loop`.
fn save_loop_binary() -> PathBuf {
    let status = Command::new(env!("CARGO"))
        .args(["build", "--quiet", "--example", "save_loop"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .expect("run cargo");
    assert!(status.success(), "building examples/save_loop failed");
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().unwrap().parent().unwrap();
    let path = profile_dir
        .join("examples")
        .join(format!("save_loop{}", std::env::consts::EXE_SUFFIX));
    assert!(path.is_file(), "no {}", path.display());
    path
}

#[test]
fn killed_mid_save_leaves_the_old_or_the_new_checkpoint() {
    let dir = std::env::temp_dir().join(format!("webgpu-amp-kill-loop-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let checkpoint = dir.join("run.safetensors");
    let exe = save_loop_binary();
    let mut rng = 0x10af_u64 ^ std::process::id() as u64;
    let (mut last_step, mut mid_save) = (0u64, 0usize);
    for kill in 0..KILLS {
        let mut child = Command::new(&exe)
            .arg(&checkpoint)
            .arg("4")
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn save_loop");
        // Wait for one whole save by this process, then kill it a random moment later.
        // (The pipe stays open until the kill: a closed one would end the loop with EPIPE.)
        let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
        assert!(
            line.starts_with("saved "),
            "kill {kill}: save_loop said {line:?}"
        );
        std::thread::sleep(Duration::from_millis(next(&mut rng) % 200));
        if let Some(status) = child.try_wait().unwrap() {
            panic!("kill {kill}: save_loop exited by itself: {status}");
        }
        child.kill().unwrap();
        child.wait().unwrap();
        drop(stdout);

        let leftovers = temp_files(&dir);
        assert!(
            leftovers.len() <= 1,
            "kill {kill}: stale temp files {leftovers:?}"
        );
        mid_save += leftovers.len();
        let saved = Checkpoint::load(&checkpoint)
            .unwrap_or_else(|e| panic!("kill {kill}: checkpoint does not load: {e}"));
        let step = saved.progress.step;
        assert!(step >= 1);
        assert_eq!(saved.params.len(), 4, "kill {kill}");
        for t in &saved.params {
            let ends = [t.values[0], t.values[t.values.len() - 1]];
            assert!(
                ends == [step as f32; 2],
                "kill {kill}: `{}` mixes saves (step {step})",
                t.name
            );
        }
        // Each process starts over at save 1; what is on disk is from this process.
        last_step = last_step.max(step);
    }
    eprintln!("save_loop: {KILLS} kills, {mid_save} inside a save, up to save {last_step}");
    assert!(
        mid_save > 0,
        "no kill landed inside a save; the test did not exercise atomic writes"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Regression data with 1024 features, so the mlp preset has ~263 k parameters and a
/// checkpoint with Adam's moments is ~3.9 MB: most of the run's time goes into saving.
fn write_data(path: &Path) {
    let (n, features) = (16usize, 1024usize);
    let x: Vec<u8> = (0..n * features)
        .flat_map(|i| (((i * 7919) % 1000) as f32 / 1000.0 - 0.5).to_le_bytes())
        .collect();
    let y: Vec<u8> = (0..n)
        .flat_map(|i| (i as f32 / n as f32).to_le_bytes())
        .collect();
    let bytes = safetensors::serialize(
        [
            (
                "x".to_string(),
                TensorView::new(Dtype::F32, vec![n, features], &x).unwrap(),
            ),
            (
                "y".to_string(),
                TensorView::new(Dtype::F32, vec![n, 1], &y).unwrap(),
            ),
        ],
        None,
    )
    .unwrap();
    std::fs::write(path, bytes).unwrap();
}

fn spawn(data: &Path, checkpoint: &Path, resume: bool) -> Child {
    let mut cmd = Command::new(BIN);
    cmd.args(["train", "--model", "mlp", "--precision", "f32"])
        .args(["--batch-size", "16", "--steps", "1000000", "--no-validate"])
        .arg("--dataset")
        .arg(data)
        .arg("--save")
        .arg(checkpoint)
        .args(["--save-every", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if resume {
        cmd.arg("--resume").arg(checkpoint);
    }
    cmd.spawn().expect("spawn webgpu-amp")
}

/// xorshift, for kill times.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

fn modified(path: &Path) -> std::time::SystemTime {
    std::fs::metadata(path).unwrap().modified().unwrap()
}

/// Waits until `checkpoint` is replaced (the child wrote a save).
fn wait_for_a_save(checkpoint: &Path, child: &mut Child, kill: usize) {
    let before = modified(checkpoint);
    let started = Instant::now();
    while modified(checkpoint) == before {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the training run exited by itself ({status}) before kill {kill}");
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "kill {kill}: no new checkpoint after 60 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn temp_files(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(".run.safetensors.tmp-"))
        })
        .collect()
}

#[test]
fn killed_training_run_resumes_from_what_is_on_disk() {
    let dir = std::env::temp_dir().join(format!("webgpu-amp-kill-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let data = dir.join("data.safetensors");
    let checkpoint = dir.join("run.safetensors");
    write_data(&data);

    // First run: wait for its first checkpoint.
    let mut child = spawn(&data, &checkpoint, false);
    let started = Instant::now();
    while !checkpoint.exists() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the training run exited before its first checkpoint: {status}");
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no checkpoint after 60 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    let mut rng = 0x5eed_u64 ^ std::process::id() as u64;
    let mut last_step = 0;
    let mut mid_save = 0;
    for kill in 0..TRAINING_KILLS {
        // Let the (resumed) run reach its save loop, then kill it at a random moment of it.
        wait_for_a_save(&checkpoint, &mut child, kill);
        std::thread::sleep(Duration::from_millis(next(&mut rng) % 300));
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the training run exited by itself ({status}) before kill {kill}");
        }
        child.kill().unwrap(); // SIGKILL: no destructors, no cleanup
        child.wait().unwrap();

        // The killed writer's temp file, if the kill landed in a save; older ones were
        // removed by the saves of the runs that followed them.
        let leftovers = temp_files(&dir);
        assert!(
            leftovers.len() <= 1,
            "kill {kill}: stale temp files {leftovers:?}"
        );
        if !leftovers.is_empty() {
            mid_save += 1;
        }
        let saved = Checkpoint::load(&checkpoint)
            .unwrap_or_else(|e| panic!("kill {kill}: checkpoint does not load: {e}"));
        assert_eq!(saved.params.len(), 4, "kill {kill}: mlp has 4 parameters");
        assert!(
            saved
                .params
                .iter()
                .all(|t| t.values.iter().all(|v| v.is_finite())),
            "kill {kill}: non-finite parameters"
        );
        assert!(
            saved.optimizer.is_some(),
            "kill {kill}: optimizer state lost"
        );
        assert!(
            saved.progress.step >= last_step,
            "kill {kill}: step went back from {last_step} to {}",
            saved.progress.step
        );
        last_step = saved.progress.step;
        // Resume from what survived; the dead process's temp file stays where it is.
        child = spawn(&data, &checkpoint, true);
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let final_ck = Checkpoint::load(&checkpoint).expect("final checkpoint loads");
    assert!(final_ck.progress.step >= last_step);
    eprintln!(
        "train: {TRAINING_KILLS} kills, {mid_save} inside a save, checkpoint reached step {}",
        final_ck.progress.step
    );
    let _ = std::fs::remove_dir_all(&dir);
}
