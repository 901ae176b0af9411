//! `mpirun -np 2 --oversubscribe webgpu-amp train ...` on whatever adapter is present (two
//! ranks on one lavapipe on CI), against single processes. Built only with the `mpi` feature
//! (`cargo test --features mpi --test mpi`); needs Open MPI's `mpirun` on PATH and fails,
//! never skips, without it.
//!
//! - two ranks with batch B equal one process with batch 2B and the same seed: per-step loss
//!   (1e-5 relative in f32, 2e-3 in amp-f16), scale and skip flags (exact), parameters
//!   after K steps (1e-5 relative per tensor, f32); rank 0 alone writes metrics, prints
//!   and saves;
//! - an input that overflows on one rank's shard only (a real data file) makes both ranks
//!   skip that step, as the single process with the whole batch does;
//! - ranks started with different flags are refused; rank 0 alone writes checkpoints and
//!   metrics; a checkpoint of two ranks resumes on two ranks;
//! - a rank that dies, fails or stops responding ends the job (`mpi/failures.rs`).

mod common;
#[path = "mpi/failures.rs"]
mod failures;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::cli::{BIN, fresh_dir, json_lines, output_text};
use serde_json::Value;
use webgpu_amp::train::checkpoint::Checkpoint;

/// One MPI job at a time: two ranks already share the machine's cores, and the timing
/// checks (a killed job ends within seconds) must not wait behind another job.
static JOBS: Mutex<()> = Mutex::new(());

fn lock() -> std::sync::MutexGuard<'static, ()> {
    JOBS.lock().unwrap_or_else(|e| e.into_inner())
}

/// `mpirun --oversubscribe` plus `ranks` (e.g. `["-np", "2", BIN, "train", ...]`), allowed to
/// run as root (CI containers).
fn mpirun(args: &[&str]) -> Command {
    let found = Command::new("mpirun")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        found,
        "these tests launch `mpirun` and it is not on PATH: install Open MPI \
         (Debian: apt-get install -y openmpi-bin libopenmpi-dev), as scripts/setup-debian.sh does"
    );
    let mut cmd = Command::new("mpirun");
    cmd.arg("--oversubscribe")
        .args(args)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    cmd
}

/// The step lines and the summary of a metrics file.
fn metrics(path: &Path) -> (Vec<Value>, Value) {
    let lines = json_lines(path);
    let steps = lines
        .iter()
        .filter(|v| v.get("step").is_some())
        .cloned()
        .collect();
    let summary = lines
        .iter()
        .find_map(|v| v.get("summary").cloned())
        .expect("a summary line");
    (steps, summary)
}

fn train_args<'a>(dir: &'a Path, name: &str, common: &[&'a str], batch: usize) -> Vec<String> {
    let mut args: Vec<String> = ["train", "--batch-size"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.push(batch.to_string());
    args.extend(common.iter().map(|s| s.to_string()));
    args.push("--metrics".into());
    args.push(dir.join(format!("{name}.jsonl")).display().to_string());
    args.push("--save".into());
    args.push(
        dir.join(format!("{name}.safetensors"))
            .display()
            .to_string(),
    );
    args
}

/// One process with batch `2 * batch`, then two ranks with `batch` each; both must succeed.
/// Returns (single, two ranks) metrics and parameters.
fn single_and_two_ranks(
    name: &str,
    common: &[&str],
    batch: usize,
) -> [(Vec<Value>, Value, Checkpoint, Output); 2] {
    let _guard = lock();
    let dir = fresh_dir(name);
    let single = train_args(&dir, "single", common, 2 * batch);
    let out1 = Command::new(BIN).args(&single).output().unwrap();
    assert!(
        out1.status.success(),
        "single process: {}",
        output_text(&out1)
    );
    let ranks = train_args(&dir, "ranks", common, batch);
    let mut args = vec!["-np".to_string(), "2".into(), BIN.into()];
    args.extend(ranks);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out2 = mpirun(&args).output().unwrap();
    assert!(
        out2.status.success(),
        "mpirun -np 2: {}",
        output_text(&out2)
    );
    ["single", "ranks"].map(|n| {
        let (steps, summary) = metrics(&dir.join(format!("{n}.jsonl")));
        let ck = Checkpoint::load(&dir.join(format!("{n}.safetensors"))).unwrap();
        let out = if n == "single" {
            out1.clone()
        } else {
            out2.clone()
        };
        (steps, summary, ck, out)
    })
}

fn f(v: &Value, key: &str) -> Option<f64> {
    v.get(key).and_then(Value::as_f64)
}

/// Per-step loss within `rtol` (both non-finite counts as equal: JSON writes them as null),
/// scale and skip flags exact.
fn assert_same_trajectory(what: &str, one: &[Value], two: &[Value], steps: usize, rtol: f64) {
    assert_eq!(one.len(), steps, "{what}: single-process steps");
    assert_eq!(two.len(), steps, "{what}: two-rank steps");
    for (a, b) in one.iter().zip(two) {
        let step = &a["step"];
        assert_eq!(step, &b["step"], "{what}");
        assert_eq!(a["scale"], b["scale"], "{what}: scale at step {step}");
        assert_eq!(
            a["skipped"], b["skipped"],
            "{what}: skip flag at step {step}"
        );
        match (f(a, "loss"), f(b, "loss")) {
            (Some(x), Some(y)) => assert!(
                (x - y).abs() <= rtol * x.abs().max(y.abs()),
                "{what}: loss at step {step}: one process {x}, two ranks {y} (rtol {rtol})"
            ),
            (x, y) => assert_eq!(
                x.is_some(),
                y.is_some(),
                "{what}: loss at step {step}: {} vs {}",
                a["loss"],
                b["loss"]
            ),
        }
    }
}

/// Each parameter tensor within `rtol` of the single process's in L2 norm (|one − two| ≤
/// rtol·|one|), and every element within `rtol` times the tensor's largest magnitude. (Not
/// relative to each element: Adam's m/√v turns the rounding of a near-zero gradient into a
/// change of ~lr·1e-5, which is large next to a parameter that happens to sit near zero.)
fn assert_same_params(what: &str, one: &Checkpoint, two: &Checkpoint, rtol: f32) {
    assert_eq!(one.progress, two.progress, "{what}: progress");
    assert_eq!(one.params.len(), two.params.len());
    for (a, b) in one.params.iter().zip(&two.params) {
        assert_eq!((&a.name, &a.shape), (&b.name, &b.shape));
        let norm =
            |v: &mut dyn Iterator<Item = f32>| v.map(|x| (x as f64).powi(2)).sum::<f64>().sqrt();
        let diff = norm(&mut a.values.iter().zip(&b.values).map(|(x, y)| x - y));
        let size = norm(&mut a.values.iter().copied());
        assert!(
            diff <= rtol as f64 * size,
            "{what}: {}: |one - two| = {diff:e} > {rtol:e} × |one| = {size:e}",
            a.name
        );
        let largest = a.values.iter().fold(0f32, |m, v| m.max(v.abs()));
        let (at, worst) = a
            .values
            .iter()
            .zip(&b.values)
            .map(|(x, y)| (x - y).abs())
            .enumerate()
            .fold(
                (0, 0f32),
                |best, (i, d)| if d > best.1 { (i, d) } else { best },
            );
        assert!(
            worst <= rtol * largest,
            "{what}: {}[{at}]: one process {}, two ranks {} (differ by {worst:e} > {rtol:e} × {largest:e})",
            a.name,
            a.values[at],
            b.values[at]
        );
    }
}

/// `"--a b --c"` as arguments.
fn words(s: &str) -> Vec<&str> {
    s.split_whitespace().collect()
}

fn assert_rank0_reports(what: &str, out: &Output, summary: &Value, global: u64) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.matches("final loss").count(),
        1,
        "{what}: rank 0 alone prints the summary: {}",
        output_text(out)
    );
    let d = &summary["distributed"];
    assert_eq!(d["ranks"], 2, "{what}: {summary}");
    assert_eq!(d["global_batch"], global, "{what}: {summary}");
    assert!(
        d["all_reduce_bytes_per_step"].as_u64().unwrap() > 400_000,
        "{what}: the mlp's ~100k f32 gradients are all-reduced: {summary}"
    );
}

#[test]
fn two_ranks_equal_one_process_with_the_global_batch_f32() {
    // --epochs 1 --steps 8: validation (split over the ranks, summed) after step 8. SGD with
    // momentum: each update is proportional to the gradient, so a gradient off by any factor
    // shows (Adam's m/√v would hide a constant factor; the amp-f16 case runs Adam).
    let common = words(
        "--model mlp --precision f32 --steps 8 --epochs 1 --seed 5 --optimizer sgd --lr 0.05 --momentum 0.9",
    );
    let [(s1, sum1, c1, _), (s2, sum2, c2, out2)] = single_and_two_ranks("f32", &common, 16);
    assert_same_trajectory("f32", &s1, &s2, 8, 1e-5);
    assert_same_params("f32", &c1, &c2, 1e-5);
    let (v1, v2) = (f(&sum1, "val_loss").unwrap(), f(&sum2, "val_loss").unwrap());
    assert!((v1 - v2).abs() <= 1e-5 * v1, "validation loss {v1} vs {v2}");
    let (a1, a2) = (
        f(&sum1, "val_accuracy").unwrap(),
        f(&sum2, "val_accuracy").unwrap(),
    );
    assert!((a1 - a2).abs() <= 1e-3, "validation accuracy {a1} vs {a2}");
    assert_rank0_reports("f32", &out2, &sum2, 32);
}

/// A scale so large that the first steps overflow f16: the skip pattern and the scale
/// sequence (backoffs, then a growth every 3 clean steps) must be exactly the single
/// process's; gradient accumulation and clipping ride along. Factors 4 and 1/4: weight
/// gradients of f16 layers are rounded to f16 per micro-batch before they land in f32 (as
/// autocast and PyTorch DDP compute them), and a rank's micro-batch is half the single
/// process's, so at a scale (2^19 here) where only the bigger sum overflows the single
/// process skips a step that the ranks take, as PyTorch DDP would; steps of 4 jump over it.
#[test]
fn two_ranks_equal_one_process_with_the_global_batch_amp_f16() {
    let common = words(
        "--model mlp --precision amp-f16 --steps 14 --seed 2 --init-scale 268435456 --growth-interval 3 --growth-factor 4 --backoff-factor 0.25 --grad-accum 2 --clip-grad-norm 1.0 --no-validate",
    );
    let [(s1, _, _, _), (s2, sum2, _, out2)] = single_and_two_ranks("amp", &common, 8);
    assert_same_trajectory("amp-f16", &s1, &s2, 14, 2e-3);
    let skipped = s2.iter().filter(|s| s["skipped"] == true).count();
    assert!(
        (1..14).contains(&skipped),
        "the test wants some skipped steps and some taken: {skipped} of 14 skipped"
    );
    assert_rank0_reports("amp-f16", &out2, &sum2, 32);
}

/// Writes a custom data set: 64 samples of 784 inputs, labels 0..9; sample 5 (on rank 1's
/// shard under --no-shuffle: rank r takes samples r, r+2, ...) holds 1e6, past f16's range.
fn overflow_data(dir: &Path) -> PathBuf {
    let (n, dim) = (64usize, 784usize);
    let mut x: Vec<f32> = (0..n * dim)
        .map(|i| ((i * 7919) % 255) as f32 / 255.0)
        .collect();
    x[5 * dim..6 * dim].fill(1e6);
    let y: Vec<i64> = (0..n as i64).map(|i| i % 10).collect();
    let xv = safetensors::tensor::TensorView::new(
        safetensors::Dtype::F32,
        vec![n, dim],
        bytemuck::cast_slice(&x),
    )
    .unwrap();
    let yv = safetensors::tensor::TensorView::new(
        safetensors::Dtype::I64,
        vec![n],
        bytemuck::cast_slice(&y),
    )
    .unwrap();
    let path = dir.join("overflow.safetensors");
    let bytes = safetensors::serialize([("x", xv), ("y", yv)], None).unwrap();
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn an_overflow_on_one_rank_makes_every_rank_skip_the_step() {
    let dir = fresh_dir("overflow-data");
    let data = overflow_data(&dir);
    let data = data.display().to_string();
    let mut common =
        words("--model mlp --precision amp-f16 --steps 4 --no-shuffle --no-validate --dataset");
    common.push(&data);
    let [(s1, _, _, _), (s2, sum2, _, _)] = single_and_two_ranks("overflow", &common, 4);
    assert_same_trajectory("overflow", &s1, &s2, 4, 2e-3);
    let skipped: Vec<&Value> = s2.iter().map(|s| &s["skipped"]).collect();
    assert_eq!(
        skipped,
        [true, false, false, false],
        "step 1 holds sample 5: {s2:?}"
    );
    assert_eq!(
        s2[1]["scale"], 32768.0,
        "the scale backed off once on every rank"
    );
    // Only rank 1's own gradients overflowed; rank 0 skipped because of the all-reduce.
    assert_eq!(
        sum2["distributed"]["local_nonfinite_steps"],
        serde_json::json!([0, 1]),
        "{sum2}"
    );
}

/// Ranks started with different flags (here --lr) are refused before the first step,
/// naming the rank; files named differently per rank show that rank 0 alone writes them.
#[test]
fn ranks_must_agree_and_rank_0_alone_writes_files() {
    let _guard = lock();
    let dir = fresh_dir("mpmd");
    let file = |name: &str| dir.join(name).display().to_string();
    let (ck0, ck1, m0, m1) = (
        file("r0.safetensors"),
        file("r1.safetensors"),
        file("r0.jsonl"),
        file("r1.jsonl"),
    );
    let train = words("train --model mlp --precision f32 --steps 3 --no-validate");
    let mut args = vec!["-np", "1", BIN];
    args.extend(&train);
    args.extend(["--save", &ck0, "--metrics", &m0, ":", "-np", "1", BIN]);
    args.extend(&train);
    args.extend(["--save", &ck1, "--metrics", &m1]);
    let out = mpirun(&args).output().unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    assert!(
        Path::new(&ck0).is_file() && Path::new(&m0).is_file(),
        "{}",
        output_text(&out)
    );
    assert!(
        !Path::new(&ck1).exists() && !Path::new(&m1).exists(),
        "rank 1 wrote files: {}",
        output_text(&out)
    );

    let out = one_rank_differs(&train, &["--lr", "0.5"]);
    assert!(!out.status.success(), "{}", output_text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("rank(s) [1] start from a different state"),
        "{}",
        output_text(&out)
    );
}

/// Rank 0 runs `train`, rank 1 `train` plus `rank1_extra`; the job's output (it may run at
/// most 120 s).
fn one_rank_differs(train: &[&str], rank1_extra: &[&str]) -> Output {
    let mut args = vec!["-np", "1", BIN];
    args.extend(train);
    args.extend([":", "-np", "1", BIN]);
    args.extend(train);
    args.extend(rank1_extra);
    let job = mpirun(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    ends_within(job, Duration::from_secs(120)).0
}

/// Waits for `job` to end (at most `limit`); its output and how long it took.
fn ends_within(mut job: Child, limit: Duration) -> (Output, Duration) {
    let start = Instant::now();
    while job.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = job.kill();
            panic!(
                "the job still ran {limit:?} later: {}",
                output_text(&job.wait_with_output().unwrap())
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = start.elapsed();
    (job.wait_with_output().unwrap(), took)
}

/// A model with a buffer (`batch_counter`'s int64 `num_batches_tracked`): every rank takes
/// rank 0's buffers at the start and at each step (DDP's broadcast_buffers), the job's end
/// checks that every rank holds the same buffers bit for bit (`check_replicas`: a rank that
/// differs fails the job), and rank 0's checkpoint counts the steps as one process does.
#[test]
fn two_ranks_hold_the_same_buffers() {
    let dir = fresh_dir("mpi-buffers-model");
    let model = dir.join("counter.json");
    std::fs::write(
        &model,
        r#"{"input": [1, 28, 28], "layers": [{"flatten": {}}, {"linear": {"out": 16}},
            {"batch_counter": {}}, {"relu": {}}, {"linear": {"out": 10}}]}"#,
    )
    .unwrap();
    let model = model.display().to_string();
    let common = [
        "--model",
        &model,
        "--precision",
        "f32",
        "--steps",
        "4",
        "--no-validate",
    ];
    let [single, ranks] = single_and_two_ranks("mpi-buffers", &common, 8);
    for (what, ck) in [("single", &single.2), ("two ranks", &ranks.2)] {
        assert_eq!(ck.buffers.len(), 1, "{what}: {:?}", ck.buffers);
        assert_eq!(ck.buffers[0].name, "2.num_batches_tracked");
        assert_eq!(
            ck.buffers[0].values,
            webgpu_amp::nn::buffers::BufferValues::I64(vec![4]),
            "{what}"
        );
    }
}
