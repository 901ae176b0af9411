//! Checkpoints and resume through the library: a save/load round trip keeps every piece of
//! state exactly, a resumed run is bit-identical to an uninterrupted one (mid-epoch, at an
//! epoch boundary, with the GradScaler having backed off and grown, under Adam and SGD with
//! momentum, with gradient accumulation), and files are written atomically.

mod common;

use std::sync::OnceLock;

use common::checkpoints::assert_same_checkpoint;
use common::cli::fresh_dir;
use common::ctx;
use common::runs::{amp_step, steps_run};
use webgpu_amp::amp::scaler::ScalerConfig;
use webgpu_amp::data::{Normalization, Split, embedded};
use webgpu_amp::nn::ModelSpec;
use webgpu_amp::optim::OptimizerConfig;
use webgpu_amp::train::StepStats;
use webgpu_amp::train::checkpoint::{Checkpoint, Progress};
use webgpu_amp::train::{Run, RunConfig};

/// Linear(784, 16) → ReLU → Linear(16, 10): small enough for many short runs.
const TINY: &str = r#"{"input": [1, 28, 28], "layers": [{"flatten": {}}, {"linear": {"out": 16}}, {"relu": {}}, {"linear": {"out": 10}}]}"#;
const BATCH: usize = 16;
/// 64 training images: 4 batches per epoch, so 10 steps cross two epoch boundaries.
const TRAIN_N: usize = 64;

fn split() -> &'static Split {
    static SPLIT: OnceLock<Split> = OnceLock::new();
    SPLIT.get_or_init(|| {
        let all = embedded::mnist_split(Some(Normalization::MNIST)).unwrap();
        Split {
            train: all.train.slice(0..TRAIN_N, "train").unwrap(),
            validation: Some(all.validation.unwrap().slice(0..32, "val").unwrap()),
            test: None,
        }
    })
}

fn spec() -> ModelSpec {
    ModelSpec::from_json(TINY).unwrap()
}

fn expected_params() -> Vec<(String, Vec<usize>)> {
    spec()
        .parameters()
        .into_iter()
        .map(|p| (p.name, p.shape))
        .collect()
}

/// A scaler that starts far too high (f16 gradients overflow, steps are skipped and the scale
/// backs off) and grows every 2 good steps, so both the scale and `_growth_tracker` change
/// often and matter on resume. (2^19: weight gradients of f16 layers are rounded to f16, as
/// under autocast, and at 2^24 they overflowed for every step of the short runs.)
fn jumpy_scaler() -> ScalerConfig {
    ScalerConfig {
        init_scale: 2f32.powi(19),
        growth_factor: 2.0,
        backoff_factor: 0.5,
        growth_interval: 2,
        enabled: true,
    }
}

fn config(optimizer: OptimizerConfig, grad_accum: usize, steps: u64) -> RunConfig {
    let step = amp_step(optimizer)
        .scaler(jumpy_scaler())
        .grad_accum(grad_accum);
    steps_run(step, BATCH, steps).seed(11)
}

fn sgd_momentum() -> OptimizerConfig {
    match OptimizerConfig::sgd(0.05) {
        OptimizerConfig::Sgd {
            lr,
            dampening,
            nesterov,
            weight_decay,
            ..
        } => OptimizerConfig::Sgd {
            lr,
            momentum: 0.9,
            dampening,
            nesterov,
            weight_decay,
        },
        _ => unreachable!(),
    }
}

/// Train `cfg` (from the seed's init, or resumed from `resume`) and return every step's stats.
fn train(cfg: RunConfig, resume: Option<&Checkpoint>) -> (Run, Vec<StepStats>) {
    let ctx = ctx();
    let init = match resume {
        Some(ck) => ck.params_for(&expected_params(), "resume").unwrap(),
        None => spec().init_params(5),
    };
    let mut run = Run::new(ctx, spec(), cfg, &split().train, &init, resume).unwrap();
    let summary = run.run(ctx, split(), &mut |_| {}).unwrap();
    (run, summary.history)
}

#[track_caller]
fn assert_same_history(what: &str, got: &[StepStats], want: &[StepStats]) {
    assert_eq!(got.len(), want.len(), "{what}: step count");
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g.step, w.step, "{what}: step numbering");
        assert_eq!(
            (g.loss.to_bits(), g.scale.to_bits(), g.skipped),
            (w.loss.to_bits(), w.scale.to_bits(), w.skipped),
            "{what}: step {} differs: got {g:?}, want {w:?}",
            w.step
        );
    }
}

/// Train `total` steps straight, and `at` steps + save + load + a fresh resumed run to
/// `total`; the per-step stats and the final state must be bit-identical.
fn check_resume(name: &str, optimizer: OptimizerConfig, grad_accum: usize, at: u64, total: u64) {
    let ctx = ctx();
    let (mut straight, straight_hist) = train(config(optimizer, grad_accum, total), None);
    let straight_final = straight.checkpoint(ctx).unwrap();

    let (mut first, first_hist) = train(config(optimizer, grad_accum, at), None);
    let dir = fresh_dir(name);
    let path = dir.join("mid.safetensors");
    first.save(ctx, &path).unwrap();
    drop(first);
    let ck = Checkpoint::load(&path).unwrap();
    let (mut resumed, resumed_hist) = train(config(optimizer, grad_accum, total), Some(&ck));
    let resumed_final = resumed.checkpoint(ctx).unwrap();

    let joined: Vec<StepStats> = first_hist.iter().chain(&resumed_hist).copied().collect();
    assert_same_history(name, &joined, &straight_hist);
    assert_same_checkpoint(name, &resumed_final, &straight_final);

    // The trajectory must exercise the scaler: skipped steps before the resume point and a
    // scale that is neither the initial one nor constant across the resume.
    assert!(
        first_hist.iter().any(|s| s.skipped),
        "{name}: no step was skipped before the resume point; the scaler state would not matter: {first_hist:?}"
    );
    let scales: Vec<f32> = straight_hist.iter().map(|s| s.scale).collect();
    assert!(
        scales.windows(2).any(|w| w[1] > w[0]),
        "{name}: the scale never grew: {scales:?}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn resume_mid_epoch_equals_uninterrupted_adam() {
    // Step 6 of 4-batch epochs: epoch 1, batch 2.
    check_resume("adam-mid", OptimizerConfig::adam(1e-2), 1, 6, 10);
}

#[test]
fn resume_early_and_at_epoch_boundary_equals_uninterrupted_adam() {
    // Step 3: right after the first skips, mid epoch 0.
    check_resume("adam-early", OptimizerConfig::adam(1e-2), 1, 3, 8);
    // Step 4: the end of epoch 0 (the resumed run starts epoch 1 with a new shuffle).
    check_resume("adam-boundary", OptimizerConfig::adam(1e-2), 1, 4, 8);
}

#[test]
fn resume_equals_uninterrupted_sgd_momentum() {
    check_resume("sgd-momentum", sgd_momentum(), 1, 5, 9);
}

#[test]
fn resume_equals_uninterrupted_with_gradient_accumulation() {
    // 2 micro-batches per step: 2 steps per epoch; step 3 = epoch 1, batch 2.
    check_resume("accum", OptimizerConfig::adam(1e-2), 2, 3, 8);
}

/// Save → load keeps everything bit for bit, and loading into a fresh run and reading it
/// back gives the same checkpoint (the state really reaches the GPU).
fn check_round_trip(name: &str, optimizer: OptimizerConfig, moments: &[&str]) {
    let ctx = ctx();
    let (mut run, hist) = train(config(optimizer, 1, 5), None);
    let ck = run.checkpoint(ctx).unwrap();

    // What the checkpoint holds.
    let applied = hist.iter().filter(|s| !s.skipped).count() as u32;
    assert!(
        applied > 0 && applied < 5,
        "{name}: want a mix of skipped and applied steps"
    );
    let opt = ck.optimizer.as_ref().expect("optimizer state");
    assert_eq!(opt.config, optimizer);
    assert_eq!(
        opt.step, applied,
        "{name}: optimizer step counts applied steps only"
    );
    let mut names: Vec<&str> = opt.moments.keys().map(String::as_str).collect();
    names.sort();
    assert_eq!(names, moments, "{name}: moment buffers");
    for per in opt.moments.values() {
        assert_eq!(per.len(), 4, "{name}: one entry per parameter");
    }
    let scaler = ck.scaler.as_ref().expect("scaler state");
    let last = hist.last().unwrap();
    assert_eq!(scaler.growth_factor, Some(2.0));
    assert_eq!(scaler.backoff_factor, Some(0.5));
    assert_eq!(scaler.growth_interval, Some(2));
    // The scale after the last step's update: the last scale halved if it skipped, else kept
    // or doubled.
    let scale = scaler.scale.unwrap();
    if last.skipped {
        assert_eq!(scale, last.scale * 0.5);
        assert_eq!(scaler.growth_tracker, Some(0));
    } else {
        assert!(scale == last.scale || scale == last.scale * 2.0);
    }
    assert_eq!(
        ck.progress,
        Progress {
            step: 5,
            epoch: 1,
            batch_in_epoch: 1,
            seed: 11
        }
    );
    assert_eq!(ck.precision.as_deref(), Some("amp-f16"));

    // Bytes → checkpoint → bytes.
    let dir = fresh_dir(name);
    let path = dir.join("ck.safetensors");
    ck.save(&path).unwrap();
    let loaded = Checkpoint::load(&path).unwrap();
    assert_same_checkpoint(name, &loaded, &ck);

    // Into a fresh run's GPU buffers and back.
    let init = loaded.params_for(&expected_params(), "ck").unwrap();
    let mut fresh = Run::new(
        ctx,
        spec(),
        config(optimizer, 1, 10),
        &split().train,
        &init,
        Some(&loaded),
    )
    .unwrap();
    let back = fresh.checkpoint(ctx).unwrap();
    assert_same_checkpoint(name, &back, &ck);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn round_trip_keeps_adam_state_scaler_and_progress() {
    check_round_trip(
        "round-adam",
        OptimizerConfig::adam(1e-2),
        &["exp_avg", "exp_avg_sq"],
    );
}

#[test]
fn round_trip_keeps_sgd_momentum() {
    check_round_trip("round-sgd", sgd_momentum(), &["momentum_buffer"]);
}

#[test]
fn resume_rejects_a_different_optimizer() {
    let ctx = ctx();
    let (mut run, _) = train(config(OptimizerConfig::adam(1e-2), 1, 3), None);
    let ck = run.checkpoint(ctx).unwrap();
    let init = ck.params_for(&expected_params(), "ck").unwrap();
    let err = Run::new(
        ctx,
        spec(),
        config(sgd_momentum(), 1, 6),
        &split().train,
        &init,
        Some(&ck),
    )
    .err()
    .expect("resuming Adam state into SGD must fail");
    let msg = err.to_string();
    assert!(msg.contains("Adam") && msg.contains("SGD"), "{msg}");
}

#[test]
fn save_is_atomic_and_replaces_an_existing_file() {
    let dir = fresh_dir("atomic");
    let path = dir.join("model.safetensors");
    let ck = |v: f32, step: u64| Checkpoint {
        params: vec![webgpu_amp::train::checkpoint::NamedTensor {
            name: "w".into(),
            shape: vec![2],
            values: vec![v, -v],
        }],
        optimizer: None,
        scaler: None,
        progress: Progress {
            step,
            ..Default::default()
        },
        precision: Some("f32".into()),
        ..Default::default()
    };
    let listing = || {
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };

    ck(1.0, 1).save(&path).unwrap();
    assert_eq!(listing(), ["model.safetensors"], "no temp file left behind");
    assert_eq!(Checkpoint::load(&path).unwrap(), ck(1.0, 1));

    // An existing file is replaced whole.
    std::fs::write(&path, vec![0xAB; 100_000]).unwrap();
    ck(2.0, 7).save(&path).unwrap();
    assert_eq!(listing(), ["model.safetensors"]);
    assert_eq!(Checkpoint::load(&path).unwrap(), ck(2.0, 7));

    // A missing directory is an error naming the path, and leaves nothing behind.
    let missing = dir.join("no-such-dir").join("x.safetensors");
    let err = ck(3.0, 1).save(&missing).unwrap_err().to_string();
    assert!(err.contains("x.safetensors"), "{err}");
    assert_eq!(listing(), ["model.safetensors"]);

    // The file left after a failed save is the previous one, intact.
    let as_dir = dir.join("model.safetensors").join("child.safetensors");
    common::expect_err(
        ck(4.0, 1).save(&as_dir),
        &["child.safetensors", "model.safetensors is not a directory"],
    );
    assert_eq!(Checkpoint::load(&path).unwrap(), ck(2.0, 7));
    let _ = std::fs::remove_dir_all(dir);
}

/// With gradient accumulation, an epoch limit can stop a run with micro-batches accumulated
/// but not yet stepped (4 micro-batches per epoch, 3 per step). The checkpoint points back to
/// the last completed step, so the resumed run replays them and matches the uninterrupted one.
#[test]
fn resume_after_an_epoch_limit_with_pending_micro_batches_equals_uninterrupted() {
    let ctx = ctx();
    let by_epochs = |epochs| {
        let mut cfg = config(OptimizerConfig::adam(1e-2), 3, 1)
            .epochs(epochs)
            .steps(None);
        cfg.step.scaler = ScalerConfig::default();
        cfg
    };
    let (mut straight, straight_hist) = train(by_epochs(3), None);
    let straight_final = straight.checkpoint(ctx).unwrap();
    assert_eq!(straight_hist.len(), 4, "12 micro-batches, 3 per step");
    assert!(straight_hist.iter().all(|s| !s.skipped));

    let (mut first, first_hist) = train(by_epochs(1), None);
    assert_eq!(first.trainer.pending_micro_batches(), 1);
    let ck = first.checkpoint(ctx).unwrap();
    assert_eq!(
        (
            ck.progress.step,
            ck.progress.epoch,
            ck.progress.batch_in_epoch
        ),
        (1, 0, 3),
        "the checkpoint points just after the last completed step"
    );
    let (mut resumed, resumed_hist) = train(by_epochs(3), Some(&ck));
    let joined: Vec<StepStats> = first_hist.iter().chain(&resumed_hist).copied().collect();
    assert_same_history("pending", &joined, &straight_hist);
    assert_same_checkpoint(
        "pending",
        &resumed.checkpoint(ctx).unwrap(),
        &straight_final,
    );
}
