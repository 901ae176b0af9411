//! Processes killed (SIGKILL) while they rewrite a checkpoint must always leave a loadable
//! one: the old content or the new, never a torn or mixed file. Half the kills are
//! deterministic: the save hook `WEBGPU_AMP_TEST_SAVE_PAUSE=N:MARKER` pauses the writer's
//! N-th save between its temp file's write + fsync and the rename, and the test kills it
//! there, so every run kills mid-save and asserts what survives; the other half land at
//! random moments.
//!
//! - `examples/save_loop.rs` does nothing but save (so most kills land inside a save), and
//!   marks save `i` with `i` (its step and each tensor's first and last value): a reader can
//!   tell a whole file from a mixed one.
//! - The real `train --save-every 1`, killed and resumed from whatever is on disk: the step
//!   never goes backwards, and a killed writer's temp file breaks nothing (the next save
//!   removes it). Its Adam moments go to moments files (the test hook's limit of 0 bytes), so
//!   the kills also land between a moments file's rename and its checkpoint's: the surviving
//!   checkpoint must still find the moments file it names.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::child::wait_while_running;
use safetensors::tensor::{Dtype, TensorView};
use webgpu_amp::train::checkpoint::{Checkpoint, INLINE_MOMENTS_MAX_ENV};

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

/// Marker file the save hook writes when the paused save is between write and rename.
fn marker_path(dir: &Path) -> PathBuf {
    dir.join("paused-save")
}

/// Waits for the paused save's marker and returns the temp file it names (removing the
/// marker for the next process).
fn wait_for_pause(marker: &Path, child: &mut Child, kill: usize) -> PathBuf {
    let what = format!("kill {kill}: a paused save");
    wait_while_running(child, Duration::from_secs(90), &what, || marker.exists());
    let tmp = PathBuf::from(std::fs::read_to_string(marker).unwrap());
    std::fs::remove_file(marker).unwrap();
    tmp
}

/// `WEBGPU_AMP_TEST_SAVE_PAUSE` for a pause in save `n` of a process.
fn pause_env(n: u64, marker: &Path) -> (&'static str, String) {
    (
        webgpu_amp::train::checkpoint::SAVE_PAUSE_ENV,
        format!("{n}:{}", marker.display()),
    )
}

/// Every other kill is deterministic: the writer pauses inside save `n` (between its
/// temp file's write + fsync and the rename, through `WEBGPU_AMP_TEST_SAVE_PAUSE`) and is
/// killed there, so each run of this test kills mid-save KILLS / 2 times for certain; the
/// checkpoint must then still be save `n - 1`, whole. The other kills land at random moments
/// (mostly inside a save too, since the loop does nothing else).
#[test]
fn killed_mid_save_leaves_the_old_or_the_new_checkpoint() {
    let dir = std::env::temp_dir().join(format!("webgpu-amp-kill-loop-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let checkpoint = dir.join("run.safetensors");
    let marker = marker_path(&dir);
    let exe = save_loop_binary();
    let mut rng = 0x10af_u64 ^ std::process::id() as u64;
    let (mut last_step, mut paused_kills, mut random_mid_save) = (0u64, 0usize, 0usize);
    for kill in 0..KILLS {
        let deterministic = kill % 2 == 0;
        // Pause in save 2, 3 or 4: save 1 of this process has removed older temp files.
        let pause_at = 2 + next(&mut rng) % 3;
        let mut cmd = Command::new(&exe);
        cmd.arg(&checkpoint).arg("4").stdout(Stdio::piped());
        if deterministic {
            let (key, value) = pause_env(pause_at, &marker);
            cmd.env(key, value);
        }
        let mut child = cmd.spawn().expect("spawn save_loop");
        // (The pipe stays open until the kill: a closed one would end the loop with EPIPE.)
        let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
        assert!(
            line.starts_with("saved "),
            "kill {kill}: save_loop said {line:?}"
        );
        let paused_tmp = if deterministic {
            let tmp = wait_for_pause(&marker, &mut child, kill);
            assert_eq!(
                temp_files(&dir),
                vec![tmp.clone()],
                "kill {kill}: while save {pause_at} is paused, its temp file is the only one"
            );
            Some(tmp)
        } else {
            std::thread::sleep(Duration::from_millis(next(&mut rng) % 200));
            None
        };
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
        if let Some(tmp) = paused_tmp {
            // Killed between write and rename: the old checkpoint (save n - 1) is intact,
            // and the new one never replaced it.
            assert_eq!(
                step,
                pause_at - 1,
                "kill {kill}: killed inside save {pause_at}, the file must hold save {}",
                pause_at - 1
            );
            assert_eq!(leftovers, vec![tmp], "kill {kill}: the paused temp file");
            paused_kills += 1;
        } else {
            random_mid_save += leftovers.len();
        }
        // Each process starts over at save 1; what is on disk is from this process.
        last_step = last_step.max(step);
    }
    eprintln!(
        "save_loop: {KILLS} kills, {paused_kills} paused inside a save (between write and \
         rename), {random_mid_save} of the random ones inside a save, up to save {last_step}"
    );
    assert_eq!(
        paused_kills,
        KILLS / 2,
        "every deterministic kill must land inside a save"
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

/// `train --save-every 1` on `data`; `pause`: (save number, marker) for the save hook.
fn spawn(data: &Path, checkpoint: &Path, resume: bool, pause: Option<(u64, &Path)>) -> Child {
    let mut cmd = Command::new(BIN);
    cmd.args(["train", "--model", "mlp", "--precision", "f32"])
        .args(["--batch-size", "16", "--steps", "1000000", "--no-validate"])
        .arg("--dataset")
        .arg(data)
        .arg("--save")
        .arg(checkpoint)
        .args(["--save-every", "1"])
        .env(INLINE_MOMENTS_MAX_ENV, "0")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if resume {
        cmd.arg("--resume").arg(checkpoint);
    }
    if let Some((n, marker)) = pause {
        let (key, value) = pause_env(n, marker);
        cmd.env(key, value);
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
    let what = format!("kill {kill}: a new checkpoint");
    wait_while_running(child, Duration::from_secs(60), &what, || {
        modified(checkpoint) != before
    });
}

fn moments_files(dir: &Path) -> Vec<String> {
    common::file_names(dir, |n| n.starts_with("run.safetensors.optimizer-"))
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

/// The real `train --save-every 1`, killed and resumed from whatever is on disk. Even kills
/// are deterministic (the run pauses inside its save `n`, between write and rename, and is
/// killed there): the checkpoint is then exactly the step before, and the previous dead
/// writer's temp file has been removed by this run's first save. Odd kills land at random
/// moments. The step never goes backwards.
#[test]
fn killed_training_run_resumes_from_what_is_on_disk() {
    let dir = std::env::temp_dir().join(format!("webgpu-amp-kill-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let data = dir.join("data.safetensors");
    let checkpoint = dir.join("run.safetensors");
    let marker = marker_path(&dir);
    write_data(&data);

    let mut rng = 0x5eed_u64 ^ std::process::id() as u64;
    let mut last_step = 0;
    let (mut paused_kills, mut random_mid_save) = (0, 0);
    for kill in 0..TRAINING_KILLS {
        let deterministic = kill % 2 == 0;
        let pause_at = 2 + next(&mut rng) % 3;
        // The first run starts fresh; every later one resumes from what survived (a dead
        // writer's temp file, if any, still beside it).
        let resume = kill > 0;
        let pause = deterministic.then_some((pause_at, marker.as_path()));
        let mut child = spawn(&data, &checkpoint, resume, pause);
        let paused_tmp = if deterministic {
            let tmp = wait_for_pause(&marker, &mut child, kill);
            assert!(
                tmp.to_string_lossy()
                    .contains(&format!(".tmp-{}-", child.id())),
                "kill {kill}: paused temp file {tmp:?} is not this run's"
            );
            assert_eq!(
                temp_files(&dir),
                vec![tmp.clone()],
                "kill {kill}: this run's first save must have removed the dead writer's temp file"
            );
            Some(tmp)
        } else {
            // Let the run reach its save loop, then kill it at a random moment of it.
            wait_for_a_save(&checkpoint, &mut child, kill);
            std::thread::sleep(Duration::from_millis(next(&mut rng) % 300));
            None
        };
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the training run exited by itself ({status}) before kill {kill}");
        }
        child.kill().unwrap(); // SIGKILL: no destructors, no cleanup
        child.wait().unwrap();

        let leftovers = temp_files(&dir);
        assert!(
            leftovers.len() <= 1,
            "kill {kill}: stale temp files {leftovers:?}"
        );
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
        let optimizer = saved.optimizer.as_ref().expect("optimizer state");
        assert_eq!(
            (optimizer.unavailable.as_deref(), optimizer.moments.len()),
            (None, 2),
            "kill {kill}: the moments file the checkpoint names must load"
        );
        // The named moments file, and at most the killed save's own, not yet named.
        let moments = moments_files(&dir);
        assert!(
            (1..=2).contains(&moments.len()),
            "kill {kill}: moments files {moments:?}"
        );
        let step = saved.progress.step;
        if let Some(tmp) = paused_tmp {
            // Saves come every step from where the run started: save n is step start + n,
            // and the kill inside it leaves step start + n - 1 on disk.
            assert_eq!(
                step,
                last_step + pause_at - 1,
                "kill {kill}: killed inside save {pause_at} of a run from step {last_step}"
            );
            assert_eq!(leftovers, vec![tmp], "kill {kill}: the paused temp file");
            paused_kills += 1;
        } else {
            assert!(
                step >= last_step,
                "kill {kill}: step went back from {last_step} to {step}"
            );
            random_mid_save += leftovers.len();
        }
        last_step = step;
    }
    // A last resume runs on from what is on disk.
    let mut child = spawn(&data, &checkpoint, true, None);
    wait_for_a_save(&checkpoint, &mut child, TRAINING_KILLS);
    child.kill().unwrap();
    child.wait().unwrap();
    let final_ck = Checkpoint::load(&checkpoint).expect("final checkpoint loads");
    assert!(final_ck.progress.step > last_step);
    eprintln!(
        "train: {TRAINING_KILLS} kills, {paused_kills} paused inside a save, {random_mid_save} \
         of the random ones inside a save, checkpoint reached step {}",
        final_ck.progress.step
    );
    assert_eq!(
        paused_kills,
        TRAINING_KILLS / 2,
        "every deterministic kill must land inside a save"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
