//! The `batchnorm2d` / `batchnorm1d` layers on the model layer: PyTorch's names, defaults and
//! repr; their running statistics as model buffers (the generic store: committed by the step,
//! rolled back when the GradScaler skips it); training on batch statistics and evaluation on
//! the running ones, against an f64 CPU reference of PyTorch's BatchNorm.

mod common;

use common::batchnorm_ref as bnref;
use common::{bits, ctx};
use webgpu_amp::amp::policy::Precision;
use webgpu_amp::amp::scaler::ScalerConfig;
use webgpu_amp::nn::buffers::BufferValues;
use webgpu_amp::nn::{LossKind, ModelSpec};
use webgpu_amp::ops::buffers::OnSkippedStep;
use webgpu_amp::optim::OptimizerConfig;
use webgpu_amp::train::evaluate::predict;
use webgpu_amp::train::{BatchTargets, StepConfig, Trainer};

/// BatchNorm2d first: its input is the data, so the reference needs no convolution.
const MODEL: &str = r#"{"input": [3, 4, 4], "layers": [{"batchnorm2d": {}}, {"flatten": {}},
    {"linear": {"out": 5}}]}"#;
const N: usize = 6;
const C: usize = 3;
const S: usize = 16;

type Running = (Vec<f32>, Vec<f32>, i64);

fn running(trainer: &Trainer) -> Running {
    let buffers = trainer.store.buffers.download(ctx()).unwrap();
    let names: Vec<&str> = buffers.iter().map(|b| b.0.as_str()).collect();
    assert_eq!(
        names,
        ["0.running_mean", "0.running_var", "0.num_batches_tracked"]
    );
    let f = |v: &BufferValues| match v {
        BufferValues::F32(v) => v.clone(),
        other => panic!("f32, got {other:?}"),
    };
    let count = match &buffers[2].1 {
        BufferValues::I64(v) => v[0],
        other => panic!("int64, got {other:?}"),
    };
    (f(&buffers[0].1), f(&buffers[1].1), count)
}

fn trainer(precision: Precision, scaler: ScalerConfig) -> Trainer {
    trainer_on_skip(precision, scaler, OnSkippedStep::Keep)
}

fn trainer_on_skip(precision: Precision, scaler: ScalerConfig, on_skip: OnSkippedStep) -> Trainer {
    let spec = ModelSpec::from_json(MODEL).unwrap();
    let init = spec.init_params(1);
    let mut config = StepConfig::new(precision, LossKind::CrossEntropy, OptimizerConfig::sgd(0.1))
        .scaler(scaler);
    config.buffers_on_skip = on_skip;
    Trainer::new(ctx(), spec, config, N, &init).unwrap()
}

/// A scale of 2^40 overflows the f16 gradients: the first step is skipped, the rest applied.
fn skipping_scaler() -> ScalerConfig {
    ScalerConfig {
        init_scale: 2f32.powi(40),
        backoff_factor: 2f64.powi(-24),
        ..Default::default()
    }
}

#[test]
fn names_defaults_and_repr_follow_pytorch() {
    let spec = ModelSpec::from_json(MODEL).unwrap();
    assert_eq!(spec.num_parameters(), 2 * C + 48 * 5 + 5);
    let buffers: Vec<_> = spec
        .buffers()
        .iter()
        .map(|b| (b.name.clone(), b.shape.clone(), b.dtype.name(), b.init))
        .collect();
    assert_eq!(
        buffers,
        [
            ("0.running_mean".to_string(), vec![C], "float32", 0.0),
            ("0.running_var".to_string(), vec![C], "float32", 1.0),
            ("0.num_batches_tracked".to_string(), vec![], "int64", 0.0),
        ]
    );
    let one = ModelSpec::from_json(
        r#"{"input": [7], "layers": [{"batchnorm1d": {"momentum": null, "eps": 0.001,
        "affine": false}}]}"#,
    )
    .unwrap();
    assert_eq!(one.num_parameters(), 0, "affine=false has no parameters");
    let repr = one.summary();
    assert!(
        repr.contains(
            "BatchNorm1d(7, eps=0.001, momentum=None, affine=False, track_running_stats=True)"
        ),
        "{repr}"
    );
    let two = spec.summary();
    assert!(
        two.contains(
            "BatchNorm2d(3, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)"
        ),
        "{two}"
    );
    let untracked = ModelSpec::from_json(
        r#"{"input": [2, 5], "layers": [{"batchnorm1d": {"track_running_stats": false}}]}"#,
    )
    .unwrap();
    assert!(untracked.buffers().is_empty(), "no running statistics");
    for (json, want) in [
        (
            r#"{"batchnorm2d": {}}"#,
            "batchnorm2d needs a per-sample input",
        ),
        (
            r#"{"batchnorm2d": {"eps": 0}}"#,
            "`eps` must be finite and > 0",
        ),
        (
            r#"{"batchnorm2d": {"momentum": 2}}"#,
            "`momentum` must be in [0, 1]",
        ),
        (
            r#"{"batchnorm2d": {"moment": 0.1}}"#,
            "unknown field `moment`",
        ),
    ] {
        let input = if json.contains("{}") {
            "[3, 4]"
        } else {
            "[3, 4, 4]"
        };
        let model = format!(r#"{{"input": {input}, "layers": [{json}]}}"#);
        common::expect_err(ModelSpec::from_json(&model), &[want]);
    }
}

#[test]
fn training_updates_the_running_statistics_and_eval_reads_them() {
    let mut t = trainer(Precision::F32, ScalerConfig::default());
    let labels: Vec<u32> = (0..N as u32).map(|i| i % 5).collect();
    let (mut mean, mut var, mut count) = (vec![0.0f64; C], vec![1.0f64; C], 0i64);
    for step in 0..3u64 {
        let x: Vec<f32> = common::rand_vec(N * C * S, 20 + step)
            .iter()
            .map(|v| v * 2.0 + step as f32)
            .collect();
        t.train_batch(ctx(), N, &x, BatchTargets::Classes(&labels))
            .unwrap();
        t.finish(ctx()).unwrap();
        let stats = bnref::batch_stats(&x, (N, C, S));
        bnref::running_update((&mut mean, &mut var, &mut count), &stats, N * S, Some(0.1));
    }
    let (m, v, n) = running(&t);
    assert_eq!(n, count);
    common::assert_close("running_mean", &m, &bnref::to_f32(&mean), 1e-6, 1e-5);
    common::assert_close("running_var", &v, &bnref::to_f32(&var), 1e-6, 1e-5);
    // Evaluation normalises with the running statistics (PyTorch's model.eval()) and
    // updates nothing.
    let params = t.store.download(ctx()).unwrap();
    let get = |name: &str| params.iter().find(|p| p.0 == name).unwrap().1.clone();
    let (w, b) = (get("0.weight"), get("0.bias"));
    let (lw, lb) = (get("2.weight"), get("2.bias"));
    let x = common::rand_vec(N * C * S, 99);
    let logits = predict(ctx(), &mut t, N, &x).unwrap();
    let stats: Vec<(f64, f64)> = m
        .iter()
        .zip(&v)
        .map(|(&a, &b)| (a as f64, b as f64))
        .collect();
    let y = bnref::normalise(&x, (N, C, S), &stats, (Some(&w), Some(&b)), 1e-5);
    let want: Vec<f32> = (0..N * 5)
        .map(|i| {
            let (row, o) = (i / 5, i % 5);
            let dot: f64 = (0..C * S)
                .map(|k| y[row * C * S + k] * lw[o * C * S + k] as f64)
                .sum();
            (dot + lb[o] as f64) as f32
        })
        .collect();
    common::assert_close("eval logits", &logits, &want, 1e-5, 1e-4);
    assert_eq!(running(&t), (m, v, n), "evaluation wrote no buffer");
}

#[test]
fn a_skipped_step_leaves_the_running_statistics_bit_identical() {
    let mut t = trainer(Precision::AmpF16, skipping_scaler());
    let labels: Vec<u32> = (0..N as u32).map(|i| i % 5).collect();
    let initial = running(&t);
    let mut seen = Vec::new();
    for step in 0..3u64 {
        let x = common::rand_vec(N * C * S, 40 + step);
        t.train_batch(ctx(), N, &x, BatchTargets::Classes(&labels))
            .unwrap();
        let stats = t.finish(ctx()).unwrap();
        seen.push((stats[0].skipped, running(&t)));
    }
    assert_eq!(
        seen.iter().map(|s| s.0).collect::<Vec<_>>(),
        [true, false, false]
    );
    let after_skip = &seen[0].1;
    assert_eq!(bits(&after_skip.0), bits(&initial.0), "running_mean");
    assert_eq!(bits(&after_skip.1), bits(&initial.1), "running_var");
    assert_eq!(after_skip.2, 0, "num_batches_tracked");
    assert_eq!(seen[2].1.2, 2, "the applied steps counted");
    assert_ne!(bits(&seen[2].1.0), bits(&initial.0), "applied steps update");
}

#[test]
fn buffers_on_skip_update_keeps_a_skipped_steps_statistics_as_pytorch_does() {
    // pytorch#88474's behaviour, for parity runs (`--buffers-on-skip update`): the skipped
    // step's batch still updates the running statistics and counts.
    let mut t = trainer_on_skip(
        Precision::AmpF16,
        skipping_scaler(),
        OnSkippedStep::UpdateAnyway,
    );
    let labels: Vec<u32> = (0..N as u32).map(|i| i % 5).collect();
    let x = common::rand_vec(N * C * S, 40);
    t.train_batch(ctx(), N, &x, BatchTargets::Classes(&labels))
        .unwrap();
    assert!(
        t.finish(ctx()).unwrap()[0].skipped,
        "the step was not skipped"
    );
    let (mut mean, mut var, mut count) = (vec![0.0f64; C], vec![1.0f64; C], 0i64);
    let stats = bnref::batch_stats(&x, (N, C, S));
    bnref::running_update((&mut mean, &mut var, &mut count), &stats, N * S, Some(0.1));
    let (m, v, n) = running(&t);
    assert_eq!(n, 1, "num_batches_tracked");
    common::assert_close("running_mean", &m, &bnref::to_f32(&mean), 1e-6, 1e-5);
    common::assert_close("running_var", &v, &bnref::to_f32(&var), 1e-6, 1e-5);
}
