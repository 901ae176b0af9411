//! Cross-entropy with label smoothing (`nn.CrossEntropyLoss(label_smoothing=ε)`) against an
//! f64 CPU reference written from PyTorch's formula, on every storage: the loss, its gradient
//! (also against finite differences), ε = 0 giving plain cross-entropy bit for bit, and the
//! range check.

mod common;

use common::values::{
    assert_rel, contexts, labels_for, quantised, run, scalar, ulp, upload, upload_u32,
};
use common::{assert_close, bits, ctx, expect_err, rand_vec};
use webgpu_amp::ops::loss;
use webgpu_amp::{DType, Tensor};

/// PyTorch's `cross_entropy_loss_label_smoothing` for class targets, no weights, mean
/// reduction: `(1 − ε) · mean(nll) + ε / C · mean(−Σ_j log p_j)`, and its gradient
/// `(p − ((1 − ε) onehot + ε / C)) / N`, in f64.
fn smoothed_ref(logits: &[f32], labels: &[u32], c: usize, eps: f64) -> (f64, Vec<f64>) {
    let n = labels.len();
    let (mut nll, mut smooth) = (0.0, 0.0);
    let mut grad = vec![0.0; n * c];
    for r in 0..n {
        let row: Vec<f64> = logits[r * c..][..c].iter().map(|&v| v as f64).collect();
        let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let lse = m + row.iter().map(|&v| (v - m).exp()).sum::<f64>().ln();
        let label = labels[r] as usize;
        nll += lse - row[label];
        smooth += row.iter().map(|&v| lse - v).sum::<f64>();
        for j in 0..c {
            let target = if j == label { 1.0 - eps } else { 0.0 } + eps / c as f64;
            grad[r * c + j] = ((row[j] - lse).exp() - target) / n as f64;
        }
    }
    let n = n as f64;
    ((1.0 - eps) * nll / n + eps / c as f64 * smooth / n, grad)
}

#[test]
fn reference_gradient_matches_finite_differences() {
    let (n, c, eps) = (3, 5, 0.1);
    let logits = rand_vec(n * c, 1);
    let labels = labels_for(n, c, 2);
    let (_, grad) = smoothed_ref(&logits, &labels, c, eps);
    for i in 0..n * c {
        let (mut up, mut down) = (logits.clone(), logits.clone());
        up[i] += 1e-3;
        down[i] -= 1e-3;
        let step = up[i] as f64 - down[i] as f64;
        let fd =
            (smoothed_ref(&up, &labels, c, eps).0 - smoothed_ref(&down, &labels, c, eps).0) / step;
        assert!(
            (fd - grad[i]).abs() < 1e-6,
            "d/dx[{i}]: fd {fd} vs {}",
            grad[i]
        );
    }
}

#[test]
fn loss_and_gradient_match_pytorchs_formula_on_every_storage() {
    let (multiplier, seed) = (0.5f32, 4.0f32);
    for (name, ctx) in contexts() {
        let seed_buf = upload_u32(ctx, &[seed.to_bits(), 0, 0, 0]);
        for dtype in DType::ALL {
            for eps in [0.1f32, 0.2, 1.0] {
                for (n, c) in [(7usize, 10usize), (4, 1001), (1, 1)] {
                    let logits_v = quantised(n * c, 3, 4.0, dtype);
                    let labels_v = labels_for(n, c, 4);
                    let logits = upload(ctx, &logits_v, &[n, c], dtype);
                    let labels = upload_u32(ctx, &labels_v);
                    let (out, out_eval) = (
                        Tensor::zeros(ctx, &[1], DType::F32),
                        Tensor::zeros(ctx, &[1], DType::F32),
                    );
                    let grad = Tensor::zeros(ctx, &[n, c], dtype);
                    let g = Some((&grad, &seed_buf, multiplier));
                    let mut ks =
                        loss::cross_entropy_smoothed(ctx, &logits, &labels, &out, g, eps).unwrap();
                    ks.extend(
                        loss::cross_entropy_smoothed(ctx, &logits, &labels, &out_eval, None, eps)
                            .unwrap(),
                    );
                    run(ctx, &ks);
                    let (want, want_grad) = smoothed_ref(&logits_v, &labels_v, c, eps as f64);
                    let what = format!("{name} {dtype} eps={eps} [{n}, {c}]");
                    let got = scalar(ctx, &out);
                    if want == 0.0 {
                        assert_eq!(got, 0.0, "{what}");
                    } else {
                        assert_rel(&format!("{what} loss"), got, want, 4e-6);
                    }
                    assert_eq!(
                        got.to_bits(),
                        scalar(ctx, &out_eval).to_bits(),
                        "{what}: eval loss"
                    );
                    let unit = (multiplier * seed) as f64;
                    let want_grad: Vec<f32> =
                        want_grad.iter().map(|&g| (g * unit) as f32).collect();
                    assert_close(
                        &format!("{what} grad"),
                        &grad.read_f32(ctx).unwrap(),
                        &want_grad,
                        1e-6 * unit as f32,
                        ulp(dtype).max(1e-5),
                    );
                }
            }
        }
    }
}

#[test]
fn zero_smoothing_is_plain_cross_entropy_bit_for_bit() {
    let ctx = ctx();
    let (n, c) = (9, 13);
    let logits = upload(ctx, &rand_vec(n * c, 5), &[n, c], DType::F32);
    let labels = upload_u32(ctx, &labels_for(n, c, 6));
    let seed = upload_u32(ctx, &[1024f32.to_bits(), 0, 0, 0]);
    let outs: Vec<(Tensor, Tensor)> = (0..2)
        .map(|_| {
            (
                Tensor::zeros(ctx, &[1], DType::F32),
                Tensor::zeros(ctx, &[n, c], DType::F32),
            )
        })
        .collect();
    let mut ks = loss::cross_entropy(
        ctx,
        &logits,
        &labels,
        &outs[0].0,
        Some((&outs[0].1, &seed, 1.0)),
    )
    .unwrap();
    ks.extend(
        loss::cross_entropy_smoothed(
            ctx,
            &logits,
            &labels,
            &outs[1].0,
            Some((&outs[1].1, &seed, 1.0)),
            0.0,
        )
        .unwrap(),
    );
    run(ctx, &ks);
    let read = |t: &Tensor| bits(&t.read_f32(ctx).unwrap());
    assert_eq!(read(&outs[0].0), read(&outs[1].0), "loss");
    assert_eq!(read(&outs[0].1), read(&outs[1].1), "gradient");
}

#[test]
fn smoothing_outside_zero_to_one_is_refused() {
    let ctx = ctx();
    let logits = Tensor::zeros(ctx, &[2, 3], DType::F32);
    let labels = upload_u32(ctx, &[0, 1]);
    let out = Tensor::zeros(ctx, &[1], DType::F32);
    for bad in [-0.1f32, 1.5, f32::NAN] {
        expect_err(
            loss::cross_entropy_smoothed(ctx, &logits, &labels, &out, None, bad),
            &["label_smoothing must be in [0, 1]"],
        );
    }
}

#[test]
fn a_trainer_with_label_smoothing_evaluates_pytorchs_smoothed_loss() {
    use webgpu_amp::amp::policy::Precision;
    use webgpu_amp::nn::{LossKind, preset};
    use webgpu_amp::optim::OptimizerConfig;
    use webgpu_amp::train::evaluate::{evaluate, predict};
    use webgpu_amp::train::{BatchTargets, StepConfig, Trainer};
    // `--label-smoothing` travels as StepConfig::label_smoothing into the planned loss.
    let ctx = &common::ctx_owned();
    let (n, features, classes, eps) = (6, 10, 4, 0.25f32);
    let spec = preset("linear", &[features], classes).unwrap();
    let config = StepConfig::new(
        Precision::F32,
        LossKind::CrossEntropy,
        OptimizerConfig::sgd(0.1),
    )
    .label_smoothing(eps);
    let mut trainer =
        Trainer::new(ctx, spec.clone(), config, classes, &spec.init_params(3)).unwrap();
    let x = rand_vec(n * features, 7);
    let labels = labels_for(n, classes, 8);
    let logits = predict(ctx, &mut trainer, n, &x).unwrap();
    let (want, _) = smoothed_ref(&logits, &labels, classes, eps as f64);
    let got = evaluate(ctx, &mut trainer, [(n, x, BatchTargets::Classes(&labels))]).unwrap();
    assert_rel("smoothed evaluation loss", got.loss, want, 1e-5);
    let (plain, _) = smoothed_ref(&logits, &labels, classes, 0.0);
    assert!(
        (want - plain).abs() > 1e-3,
        "smoothing changes this loss: {want} vs {plain}"
    );
    // Out of range, or with mse: refused with the range or the reason.
    let mse = StepConfig::new(Precision::F32, LossKind::Mse, OptimizerConfig::sgd(0.1));
    expect_err(
        mse.label_smoothing(0.1).validate(),
        &["label smoothing applies to the cross-entropy loss"],
    );
    let bad = StepConfig::new(
        Precision::F32,
        LossKind::CrossEntropy,
        OptimizerConfig::sgd(0.1),
    );
    expect_err(
        bad.label_smoothing(1.5).validate(),
        &["label smoothing must be in [0, 1]", "1.5"],
    );
}
