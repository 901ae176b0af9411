//! Evaluation on the GPU: one read-back for a whole set, agreeing with the model's
//! outputs, and its loss as the finite differences that check a CNN's backward.

use webgpu_amp::amp::policy::Precision;
use webgpu_amp::nn::{LossKind, ModelSpec};
use webgpu_amp::optim::OptimizerConfig;
use webgpu_amp::train::evaluate::{evaluate, predict};
use webgpu_amp::train::{BatchTargets, StepConfig, Trainer};

use super::common::{self, ctx, rand_vec};
use super::mlp_trainer;

#[test]
fn evaluation_reads_back_once_and_agrees_with_predict() {
    // Its own context: the host-wait count is per context.
    let owned = common::ctx_owned();
    let ctx = &owned;
    // f32: f16 logits could tie, and the argmax below need not break ties as the GPU does.
    let cfg = StepConfig::new(
        Precision::F32,
        LossKind::CrossEntropy,
        OptimizerConfig::sgd(0.01),
    );
    let mut t = mlp_trainer(ctx, 3, cfg);
    // Three batches, the last one partial (as a loader without drop_last gives them).
    let sizes = [8usize, 8, 5];
    let batches: Vec<(usize, Vec<f32>, Vec<u32>)> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let labels = (0..n).map(|j| ((i * 7 + j * 5) % 3) as u32).collect();
            (n, rand_vec(n * 4, 40 + i as u64), labels)
        })
        .collect();
    for &n in &sizes {
        t.network(ctx, n).unwrap();
    }
    let before = ctx.host_waits();
    let eval = evaluate(
        ctx,
        &mut t,
        batches
            .iter()
            .map(|(n, x, l)| (*n, x.clone(), BatchTargets::Classes(l))),
    )
    .unwrap();
    assert_eq!(
        ctx.host_waits() - before,
        1,
        "one readback for the whole set"
    );
    assert_eq!(eval.samples, 21);

    // The same numbers from the model's outputs, on the CPU.
    let (mut correct, mut loss_sum) = (0usize, 0.0f64);
    for (n, x, labels) in &batches {
        let out = predict(ctx, &mut t, *n, x).unwrap();
        for (row, &label) in out.chunks_exact(3).zip(labels) {
            let max = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            let lse = max + row.iter().map(|v| (v - max).exp()).sum::<f32>().ln();
            loss_sum += (lse - row[label as usize]) as f64;
            let argmax = (0..3).max_by(|&a, &b| row[a].total_cmp(&row[b])).unwrap();
            correct += (argmax == label as usize) as usize;
        }
    }
    let accuracy = eval.accuracy.expect("cross-entropy has accuracy");
    assert_eq!(accuracy, correct as f32 / 21.0);
    let cpu_loss = (loss_sum / 21.0) as f32;
    assert!(
        (eval.loss - cpu_loss).abs() < 1e-4,
        "loss {} vs {cpu_loss}",
        eval.loss
    );
}

#[test]
fn cnn_gradients_match_finite_differences() {
    // Two convolutions, so the gradient reaching the first one has passed through every
    // kind of backward kernel (and both activation-gradient buffers, several times).
    // GELU, not ReLU, after the first: ReLU's zeros would make the second convolution's
    // outputs tie exactly (bias only) inside pooling windows, where max-pool has no
    // derivative and finite differences of a weight disagree with any backward.
    let spec = ModelSpec::from_json(
        r#"{"input": [1, 6, 6], "layers": [
            {"conv2d": {"out": 2, "kernel": 3, "padding": 1}}, {"gelu": {}},
            {"conv2d": {"out": 3, "kernel": 3, "padding": 1}}, {"relu": {}},
            {"maxpool2d": {"kernel": 2}}, {"flatten": {}}, {"linear": {"out": 3}}]}"#,
    )
    .unwrap();
    let ctx = ctx();
    let init = spec.init_params(5);
    let mut t = Trainer::new(
        ctx,
        spec,
        StepConfig::new(
            Precision::F32,
            LossKind::CrossEntropy,
            OptimizerConfig::sgd(0.1),
        ),
        3,
        &init,
    )
    .unwrap();
    let n = 4;
    let x = rand_vec(n * 36, 77);
    let labels = [0u32, 2, 1, 2];
    t.train_batch(ctx, n, &x, BatchTargets::Classes(&labels))
        .unwrap();
    t.finish(ctx).unwrap();
    let grads = t.store.download_grads(ctx).unwrap();

    let mut loss_at = |params: &[(String, Vec<f32>)]| {
        t.store.upload(ctx, params).unwrap();
        let batch = [(n, x.clone(), BatchTargets::Classes(&labels))];
        evaluate(ctx, &mut t, batch).unwrap().loss as f64
    };
    let eps = 1e-3f32;
    for (name, index) in [
        ("0.weight", 4),
        ("0.bias", 1),
        ("2.weight", 10),
        ("2.bias", 2),
        ("6.weight", 7),
        ("6.bias", 0),
    ] {
        let p = init.iter().position(|(n, _)| n == name).unwrap();
        let mut plus = init.clone();
        plus[p].1[index] += eps;
        let mut minus = init.clone();
        minus[p].1[index] -= eps;
        let numeric = (loss_at(&plus) - loss_at(&minus)) / (2.0 * eps as f64);
        let g = grads.iter().find(|(n, _)| n == name).unwrap().1[index] as f64;
        // f32 losses: the difference quotient is good to about 1e-4 here.
        assert!(
            (g - numeric).abs() <= 3e-4 + 2e-2 * numeric.abs(),
            "{name}[{index}]: backward {g} vs finite difference {numeric}"
        );
    }
}
