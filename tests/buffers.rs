//! Layers' buffers (persistent state that is not a parameter: `nn::buffers`), through the
//! smallest layer that has one, `{"batch_counter": {}}` (an int64 `num_batches_tracked`,
//! BatchNorm's counter): it counts the batches of applied steps, a step the GradScaler skips
//! leaves it as it was (PyTorch's BatchNorm does not: pytorch#88474), it is no parameter,
//! and a checkpoint saves it in its own dtype under its name and resumes it bit for bit.
//! (Two MPI ranks holding it identically: tests/mpi.rs.)

mod common;

use std::path::Path;

use common::cli::{assert_success, command, fresh_dir};
use common::ctx;
use safetensors::tensor::{Dtype, TensorView};
use webgpu_amp::amp::policy::Precision;
use webgpu_amp::amp::scaler::ScalerConfig;
use webgpu_amp::nn::buffers::BufferValues;
use webgpu_amp::nn::{LossKind, ModelSpec};
use webgpu_amp::optim::OptimizerConfig;
use webgpu_amp::train::evaluate::predict;
use webgpu_amp::train::{BatchTargets, StepConfig, Trainer};

const MODEL: &str = r#"{"input": [4], "layers": [{"linear": {"out": 8}}, {"batch_counter": {}},
    {"relu": {}}, {"linear": {"out": 3}}]}"#;

fn counter(trainer: &Trainer) -> i64 {
    let buffers = trainer.store.buffers.download(ctx()).unwrap();
    assert_eq!(buffers.len(), 1, "{buffers:?}");
    assert_eq!(buffers[0].0, "1.num_batches_tracked");
    match &buffers[0].1 {
        BufferValues::I64(v) => v[0],
        other => panic!("an int64 buffer, got {other:?}"),
    }
}

#[test]
fn a_counter_counts_applied_steps_and_a_skipped_step_leaves_it() {
    let spec = ModelSpec::from_json(MODEL).unwrap();
    // Not a parameter: neither counted nor laid out with them.
    assert_eq!(spec.num_parameters(), 4 * 8 + 8 + 8 * 3 + 3);
    assert_eq!(spec.buffers().len(), 1);
    let init = spec.init_params(1);
    // A scale of 2^40 overflows the f16 gradients: step 1 is skipped, and the backoff
    // brings the scale to 2^16 for the rest.
    let scaler = ScalerConfig {
        init_scale: 2f32.powi(40),
        backoff_factor: 2f64.powi(-24),
        ..Default::default()
    };
    let config = StepConfig::new(
        Precision::AmpF16,
        LossKind::CrossEntropy,
        OptimizerConfig::sgd(0.1),
    )
    .scaler(scaler);
    let mut trainer = Trainer::new(ctx(), spec, config, 3, &init).unwrap();
    assert!(trainer.store.layout.get("1.num_batches_tracked").is_none());
    let x: Vec<f32> = common::rand_vec(8 * 4, 7);
    let labels: Vec<u32> = (0..8).map(|i| i % 3).collect();
    let mut counts = Vec::new();
    let mut skipped = Vec::new();
    for _ in 0..4 {
        trainer
            .train_batch(ctx(), 8, &x, BatchTargets::Classes(&labels))
            .unwrap();
        let stats = trainer.finish(ctx()).unwrap();
        skipped.push(stats[0].skipped);
        counts.push(counter(&trainer));
    }
    assert_eq!(
        skipped,
        [true, false, false, false],
        "the case skips step 1 only"
    );
    assert_eq!(
        counts,
        [0, 1, 2, 3],
        "the count of applied steps after each step"
    );
    // An evaluation plan reads the buffer and writes nothing.
    for _ in 0..2 {
        predict(ctx(), &mut trainer, 8, &x).unwrap();
    }
    assert_eq!(counter(&trainer), 3, "predictions counted as batches");
}

/// `x` [32, 4] and labels `y` [32] for `train --dataset FILE`.
fn data_file(path: &Path) {
    let x = common::rand_vec(32 * 4, 3);
    let y: Vec<i64> = (0..32).map(|i| i % 3).collect();
    let views = vec![
        (
            "x",
            TensorView::new(Dtype::F32, vec![32, 4], bytemuck::cast_slice(&x)).unwrap(),
        ),
        (
            "y",
            TensorView::new(Dtype::I64, vec![32], bytemuck::cast_slice(&y)).unwrap(),
        ),
    ];
    std::fs::write(path, safetensors::serialize(views, None).unwrap()).unwrap();
}

fn train(dir: &Path, steps: &str, save: &str, resume: Option<&str>) {
    let mut cmd = command();
    cmd.args(["train", "--model"])
        .arg(dir.join("model.json"))
        .arg("--dataset")
        .arg(dir.join("data.safetensors"))
        .args([
            "--batch-size",
            "8",
            "--no-validate",
            "--no-shuffle",
            "--precision",
            "amp-f16",
        ])
        .args(["--steps", steps, "--save"])
        .arg(dir.join(save));
    if let Some(r) = resume {
        cmd.arg("--resume").arg(dir.join(r));
    }
    assert_success(&cmd.output().unwrap(), &format!("train {steps} steps"));
}

/// Every tensor of a checkpoint: name, dtype, shape and bytes.
fn tensors(path: &Path) -> Vec<(String, Dtype, Vec<usize>, Vec<u8>)> {
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut out: Vec<_> = st
        .iter()
        .map(|(n, v)| {
            (
                n.to_string(),
                v.dtype(),
                v.shape().to_vec(),
                v.data().to_vec(),
            )
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[test]
fn a_checkpoint_saves_the_counter_as_int64_and_resumes_it_bit_for_bit() {
    let dir = fresh_dir("buffers-resume");
    std::fs::write(dir.join("model.json"), MODEL).unwrap();
    data_file(&dir.join("data.safetensors"));
    train(&dir, "3", "three.safetensors", None);
    train(&dir, "5", "resumed.safetensors", Some("three.safetensors"));
    train(&dir, "5", "straight.safetensors", None);
    let three = tensors(&dir.join("three.safetensors"));
    let counter = three
        .iter()
        .find(|t| t.0 == "1.num_batches_tracked")
        .expect("the counter is saved under its name");
    assert_eq!(counter.1, Dtype::I64, "in its own dtype, as PyTorch's");
    assert_eq!(counter.2, Vec::<usize>::new(), "a 0-d tensor, as PyTorch's");
    assert_eq!(counter.3, 3i64.to_le_bytes());
    // Resumed at 3 and trained to 5: the same bits as 5 steps straight, counter included.
    let (resumed, straight) = (
        tensors(&dir.join("resumed.safetensors")),
        tensors(&dir.join("straight.safetensors")),
    );
    assert_eq!(resumed, straight);
    let five = straight
        .iter()
        .find(|t| t.0 == "1.num_batches_tracked")
        .unwrap();
    assert_eq!(five.3, 5i64.to_le_bytes());
}
