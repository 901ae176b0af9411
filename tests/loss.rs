//! Fused losses (cross-entropy, mse, accuracy count) against f64 CPU references on every
//! storage; gradients also by finite differences of the CPU forward; loss seeding,
//! determinism and NaN propagation.

mod common;

use std::sync::Arc;

use common::values::{
    assert_rel, contexts, labels_for, quantised, run, scalar, ulp, upload, upload_u32,
};
use common::{assert_close, ctx, ctx_packed, rand_vec};
use webgpu_amp::gpu::GpuBuffer;
use webgpu_amp::ops::loss;
use webgpu_amp::{DType, GpuContext, Tensor};

/// Spacing of the smallest (subnormal) values: f16 gradients of big batches land there.
fn subnormal_step(dtype: DType) -> f32 {
    match dtype {
        DType::F16 => 2f32.powi(-24),
        _ => 0.0,
    }
}

/// `grad` against the reference gradient `want_grad` times `unit` (the loss multiplier times
/// the seed), over `n` rows: absolute tolerance `abs` × unit / n (at least one subnormal step
/// of its dtype), relative at least `rel` (and one ulp of its dtype).
#[track_caller]
fn assert_scaled_grad(
    ctx: &GpuContext,
    what: &str,
    grad: &Tensor,
    want_grad: &[f64],
    unit: f64,
    n: usize,
    (abs, rel): (f32, f32),
) {
    let want: Vec<f32> = want_grad.iter().map(|&g| (g * unit) as f32).collect();
    let dtype = grad.dtype();
    assert_close(
        &format!("{what} grad"),
        &grad.read_f32(ctx).unwrap(),
        &want,
        (abs * unit as f32 / n as f32).max(subnormal_step(dtype)),
        ulp(dtype).max(rel),
    );
}

fn seed_buffer(ctx: &GpuContext, value: f32) -> Arc<GpuBuffer> {
    upload_u32(ctx, &[value.to_bits(), 0, 0, 0])
}

fn read_u32(ctx: &GpuContext, b: &GpuBuffer) -> u32 {
    let bytes = ctx.read_bytes(b, 0, 4).unwrap();
    u32::from_le_bytes(bytes[..4].try_into().unwrap())
}

// ---- cross-entropy ----------------------------------------------------------------------------

/// Mean softmax cross-entropy and its gradient (softmax - onehot) / N, in f64.
fn ce_ref(logits: &[f32], labels: &[u32], c: usize) -> (f64, Vec<f64>) {
    let n = labels.len();
    let mut loss = 0.0;
    let mut grad = vec![0.0; n * c];
    for r in 0..n {
        let row: Vec<f64> = logits[r * c..][..c].iter().map(|&v| v as f64).collect();
        let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let s: f64 = row.iter().map(|&v| (v - m).exp()).sum();
        let label = labels[r] as usize;
        loss += m + s.ln() - row[label];
        for j in 0..c {
            let onehot = if j == label { 1.0 } else { 0.0 };
            grad[r * c + j] = ((row[j] - m).exp() / s - onehot) / n as f64;
        }
    }
    (loss / n as f64, grad)
}

#[test]
fn cross_entropy_reference_gradient_matches_finite_differences() {
    let (n, c) = (3, 5);
    let logits = rand_vec(n * c, 71);
    let labels = labels_for(n, c, 72);
    let (_, grad) = ce_ref(&logits, &labels, c);
    for i in 0..n * c {
        let h = 1e-3f32;
        let (mut up, mut down) = (logits.clone(), logits.clone());
        up[i] += h;
        down[i] -= h;
        // The step in f32 is what is applied: divide by the actual difference.
        let step = up[i] as f64 - down[i] as f64;
        let fd = (ce_ref(&up, &labels, c).0 - ce_ref(&down, &labels, c).0) / step;
        assert!(
            (fd - grad[i]).abs() < 1e-6,
            "dCE/dx[{i}]: fd {fd} vs {}",
            grad[i]
        );
    }
}

#[test]
fn cross_entropy_loss_and_gradient_match_cpu_on_every_storage() {
    let shapes = [(1usize, 1usize), (1, 7), (7, 10), (5, 1001), (33, 3)];
    let (multiplier, seed) = (0.5f32, 2.0f32);
    for (name, ctx) in contexts() {
        let seed_buf = seed_buffer(ctx, seed);
        for dtype in DType::ALL {
            for grad_dtype in [dtype, DType::F32] {
                for (n, c) in shapes {
                    let logits_v = quantised(n * c, 81, 4.0, dtype);
                    let labels_v = labels_for(n, c, 82);
                    let logits = upload(ctx, &logits_v, &[n, c], dtype);
                    let labels = upload_u32(ctx, &labels_v);
                    let loss_out = Tensor::zeros(ctx, &[1], DType::F32);
                    let loss_only = Tensor::zeros(ctx, &[1], DType::F32);
                    let grad = Tensor::zeros(ctx, &[n, c], grad_dtype);
                    let mut ks = loss::cross_entropy(
                        ctx,
                        &logits,
                        &labels,
                        &loss_out,
                        Some((&grad, &seed_buf, multiplier)),
                    )
                    .unwrap();
                    ks.extend(
                        loss::cross_entropy(ctx, &logits, &labels, &loss_only, None).unwrap(),
                    );
                    run(ctx, &ks);
                    let (want_loss, want_grad) = ce_ref(&logits_v, &labels_v, c);
                    let what = format!("{name} CE logits={dtype} grad={grad_dtype} [{n}, {c}]");
                    let got_loss = scalar(ctx, &loss_out);
                    if want_loss == 0.0 {
                        assert_eq!(got_loss, 0.0, "{what} loss");
                    } else {
                        assert_rel(&format!("{what} loss"), got_loss, want_loss, 2e-6);
                    }
                    assert_eq!(
                        got_loss.to_bits(),
                        scalar(ctx, &loss_only).to_bits(),
                        "{what}: loss with and without the gradient"
                    );
                    let unit = (multiplier * seed) as f64;
                    assert_scaled_grad(ctx, &what, &grad, &want_grad, unit, n, (1e-6, 1e-5));
                }
            }
        }
    }
}

#[test]
fn cross_entropy_gradient_scales_exactly_with_the_seed_and_overflows_f16_to_inf() {
    let (n, c) = (4, 3);
    let logits_v = quantised(n * c, 91, 3.0, DType::F16);
    let labels_v = labels_for(n, c, 92);
    for (name, ctx) in contexts() {
        let logits = upload(ctx, &logits_v, &[n, c], DType::F16);
        let labels = upload_u32(ctx, &labels_v);
        // f32 gradients: seed 1024 gives exactly 1024x the unseeded gradient; same loss.
        let one = seed_buffer(ctx, 1.0);
        let big = seed_buffer(ctx, 1024.0);
        let (l1, l2) = (
            Tensor::zeros(ctx, &[1], DType::F32),
            Tensor::zeros(ctx, &[1], DType::F32),
        );
        let g1 = Tensor::zeros(ctx, &[n, c], DType::F32);
        let g2 = Tensor::zeros(ctx, &[n, c], DType::F32);
        let mut ks =
            loss::cross_entropy(ctx, &logits, &labels, &l1, Some((&g1, &one, 0.25))).unwrap();
        ks.extend(
            loss::cross_entropy(ctx, &logits, &labels, &l2, Some((&g2, &big, 0.25))).unwrap(),
        );
        run(ctx, &ks);
        assert_eq!(
            scalar(ctx, &l1).to_bits(),
            scalar(ctx, &l2).to_bits(),
            "{name}"
        );
        let (a, b) = (g1.read_f32(ctx).unwrap(), g2.read_f32(ctx).unwrap());
        for (i, (&x, &y)) in a.iter().zip(&b).enumerate() {
            assert_eq!(
                (x * 1024.0).to_bits(),
                y.to_bits(),
                "{name} element {i}: {x} vs {y}"
            );
        }
        // f16 gradients with a scale of 2^20: the large entries overflow to +-inf in f16
        // storage (what the GradScaler detects), the small ones stay finite and correct.
        let huge = 1048576.0f32;
        let seed = seed_buffer(ctx, huge);
        let g = Tensor::zeros(ctx, &[n, c], DType::F16);
        let ks = loss::cross_entropy(ctx, &logits, &labels, &l1, Some((&g, &seed, 1.0))).unwrap();
        run(ctx, &ks);
        let got = g.read_f32(ctx).unwrap();
        let (_, want_grad) = ce_ref(&logits_v, &labels_v, c);
        let want: Vec<f32> = want_grad
            .iter()
            .map(|&v| DType::F16.round((v * huge as f64) as f32))
            .collect();
        assert!(want.iter().any(|v| v.is_infinite()) && want.iter().any(|v| v.is_finite()));
        assert!(got.iter().all(|v| !v.is_nan()), "{name}: {got:?}");
        assert_close(&format!("{name} f16 overflow"), &got, &want, 0.0, 2e-3);
    }
}

#[test]
fn cross_entropy_and_mse_losses_are_bit_identical_run_to_run() {
    let ctx = ctx_packed();
    let (n, c) = (3000, 10);
    let logits = upload(
        ctx,
        &quantised(n * c, 101, 5.0, DType::F16),
        &[n, c],
        DType::F16,
    );
    let labels = upload_u32(ctx, &labels_for(n, c, 102));
    let seed = seed_buffer(ctx, 65536.0);
    let grad = Tensor::zeros(ctx, &[n, c], DType::F16);
    let out = Tensor::zeros(ctx, &[1], DType::F32);
    let ce = loss::cross_entropy(ctx, &logits, &labels, &out, Some((&grad, &seed, 1.0))).unwrap();
    let m = 100_001;
    let pred = upload(ctx, &rand_vec(m, 103), &[m], DType::BF16);
    let target = upload(ctx, &rand_vec(m, 104), &[m], DType::F32);
    let mse_out = Tensor::zeros(ctx, &[1], DType::F32);
    let mse = loss::mse(ctx, &pred, &target, &mse_out, None).unwrap();
    let mut seen = Vec::new();
    for _ in 0..3 {
        run(ctx, &ce);
        run(ctx, &mse);
        seen.push((scalar(ctx, &out).to_bits(), scalar(ctx, &mse_out).to_bits()));
    }
    assert!(seen.iter().all(|s| *s == seen[0]), "{seen:?}");
}

#[test]
fn cross_entropy_makes_nan_rows_and_out_of_range_labels_nan_without_reading_out_of_bounds() {
    let (n, c) = (4, 5);
    for (name, ctx) in contexts() {
        for dtype in [DType::F32, DType::F16] {
            let mut logits_v = quantised(n * c, 111, 2.0, dtype);
            let mut labels_v = labels_for(n, c, 112);
            let seed = seed_buffer(ctx, 1.0);
            let what = format!("{name} {dtype}");
            // Clean batch: finite loss and gradient.
            let run_ce = |logits_v: &[f32], labels_v: &[u32]| {
                let logits = upload(ctx, logits_v, &[n, c], dtype);
                let labels = upload_u32(ctx, labels_v);
                let out = Tensor::zeros(ctx, &[1], DType::F32);
                let grad = Tensor::zeros(ctx, &[n, c], dtype);
                let ks =
                    loss::cross_entropy(ctx, &logits, &labels, &out, Some((&grad, &seed, 1.0)))
                        .unwrap();
                run(ctx, &ks);
                (scalar(ctx, &out), grad.read_f32(ctx).unwrap())
            };
            let (l, g) = run_ce(&logits_v, &labels_v);
            assert!(l.is_finite() && g.iter().all(|v| v.is_finite()), "{what}");
            // A NaN logit in row 1: loss NaN, row 1's gradient NaN, other rows untouched.
            logits_v[c + 2] = f32::NAN;
            let (l, g) = run_ce(&logits_v, &labels_v);
            assert!(l.is_nan(), "{what}: loss {l}");
            for (i, v) in g.iter().enumerate() {
                assert_eq!(v.is_nan(), i / c == 1, "{what}: NaN logit, grad[{i}] = {v}");
            }
            // A label out of range in row 3 (and a huge one, -1 as u32): NaN loss and row.
            logits_v[c + 2] = 0.5;
            labels_v[3] = c as u32;
            labels_v[0] = u32::MAX;
            let (l, g) = run_ce(&logits_v, &labels_v);
            assert!(l.is_nan(), "{what}: loss {l}");
            for (i, v) in g.iter().enumerate() {
                assert_eq!(
                    v.is_nan(),
                    i / c == 0 || i / c == 3,
                    "{what}: label, grad[{i}] = {v}"
                );
            }
        }
    }
}

#[test]
fn cross_entropy_rejects_bad_shapes() {
    let ctx = ctx();
    let out = Tensor::zeros(ctx, &[1], DType::F32);
    let labels = upload_u32(ctx, &[0, 1]);
    let flat = Tensor::zeros(ctx, &[6], DType::F32);
    common::expect_err(
        loss::cross_entropy(ctx, &flat, &labels, &out, None),
        &["logits must be [N, C], not [6]"],
    );
    let no_classes = Tensor::zeros(ctx, &[2, 0], DType::F32);
    common::expect_err(
        loss::cross_entropy(ctx, &no_classes, &labels, &out, None),
        &["no classes (C = 0)"],
    );
    let too_many_rows = Tensor::zeros(ctx, &[3, 2], DType::F32);
    common::expect_err(
        loss::cross_entropy(ctx, &too_many_rows, &labels, &out, None),
        &["labels buffer holds 8 bytes"],
    );
    let logits = Tensor::zeros(ctx, &[2, 3], DType::F32);
    let wide_out = Tensor::zeros(ctx, &[2], DType::F32);
    common::expect_err(
        loss::cross_entropy(ctx, &logits, &labels, &wide_out, None),
        &["loss_out must hold one element"],
    );
    let seed = seed_buffer(ctx, 1.0);
    let bad_grad = Tensor::zeros(ctx, &[3, 2], DType::F32);
    common::expect_err(
        loss::cross_entropy(ctx, &logits, &labels, &out, Some((&bad_grad, &seed, 1.0))),
        &["grad_logits [3, 2] differs from logits [2, 3]"],
    );
}

// ---- mean squared error -----------------------------------------------------------------------

fn mse_ref(pred: &[f32], target: &[f32]) -> (f64, Vec<f64>) {
    let n = pred.len() as f64;
    let loss = pred
        .iter()
        .zip(target)
        .map(|(&p, &t)| (p as f64 - t as f64).powi(2))
        .sum::<f64>()
        / n;
    let grad = pred
        .iter()
        .zip(target)
        .map(|(&p, &t)| 2.0 * (p as f64 - t as f64) / n)
        .collect();
    (loss, grad)
}

#[test]
fn mse_reference_gradient_matches_finite_differences() {
    let pred = rand_vec(9, 121);
    let target = rand_vec(9, 122);
    let (_, grad) = mse_ref(&pred, &target);
    for i in 0..pred.len() {
        let h = 1e-3f32;
        let (mut up, mut down) = (pred.clone(), pred.clone());
        up[i] += h;
        down[i] -= h;
        let step = up[i] as f64 - down[i] as f64;
        let fd = (mse_ref(&up, &target).0 - mse_ref(&down, &target).0) / step;
        assert!(
            (fd - grad[i]).abs() < 1e-9,
            "dMSE/dp[{i}]: fd {fd} vs {}",
            grad[i]
        );
    }
}

#[test]
fn mse_loss_and_gradient_match_cpu_on_every_storage() {
    let (multiplier, seed) = (0.5f32, 8.0f32);
    for (name, ctx) in contexts() {
        let seed_buf = seed_buffer(ctx, seed);
        for dtype in DType::ALL {
            // 1, 7, 1001: one pass; 5001: two passes.
            for n in [1usize, 7, 1001, 5001] {
                let pred_v = quantised(n, 131, 2.0, dtype);
                let target_v = rand_vec(n, 132);
                let pred = upload(ctx, &pred_v, &[n], dtype);
                let target = upload(ctx, &target_v, &[n], DType::F32);
                let out = Tensor::zeros(ctx, &[1], DType::F32);
                let grad = Tensor::zeros(ctx, &[n], dtype);
                let ks = loss::mse(
                    ctx,
                    &pred,
                    &target,
                    &out,
                    Some((&grad, &seed_buf, multiplier)),
                )
                .unwrap();
                assert_eq!(ks.len(), if n > 2048 { 2 } else { 1 });
                run(ctx, &ks);
                let (want_loss, want_grad) = mse_ref(&pred_v, &target_v);
                let what = format!("{name} mse {dtype} n={n}");
                assert_rel(&format!("{what} loss"), scalar(ctx, &out), want_loss, 2e-6);
                let unit = (multiplier * seed) as f64;
                assert_scaled_grad(ctx, &what, &grad, &want_grad, unit, n, (1e-7, 1e-6));
            }
        }
    }
}

#[test]
fn mse_propagates_nan_to_the_loss_and_that_element_of_the_gradient() {
    for (name, ctx) in contexts() {
        let n = 7;
        let mut pred_v = rand_vec(n, 141);
        pred_v[4] = f32::NAN;
        let pred = upload(ctx, &pred_v, &[n], DType::F16);
        let target = upload(ctx, &rand_vec(n, 142), &[n], DType::F32);
        let out = Tensor::zeros(ctx, &[1], DType::F32);
        let grad = Tensor::zeros(ctx, &[n], DType::F16);
        let seed = seed_buffer(ctx, 1.0);
        let ks = loss::mse(ctx, &pred, &target, &out, Some((&grad, &seed, 1.0))).unwrap();
        run(ctx, &ks);
        assert!(scalar(ctx, &out).is_nan(), "{name}");
        let g = grad.read_f32(ctx).unwrap();
        for (i, v) in g.iter().enumerate() {
            assert_eq!(v.is_nan(), i == 4, "{name}: grad[{i}] = {v}");
        }
    }
}

#[test]
fn mse_rejects_mismatched_shapes() {
    let ctx = ctx();
    let pred = Tensor::zeros(ctx, &[4, 3], DType::F32);
    let target = Tensor::zeros(ctx, &[3, 4], DType::F32);
    let out = Tensor::zeros(ctx, &[1], DType::F32);
    common::expect_err(
        loss::mse(ctx, &pred, &target, &out, None),
        &["pred [4, 3] and target [3, 4] differ"],
    );
}

// ---- accuracy ---------------------------------------------------------------------------------

/// torch.argmax: first maximum, NaN counts as the maximum.
fn argmax_ref(row: &[f32]) -> u32 {
    let mut best = 0;
    for (j, &v) in row.iter().enumerate() {
        if row[best].is_nan() {
            break;
        }
        if v.is_nan() || v > row[best] {
            best = j;
        }
    }
    best as u32
}

#[test]
fn count_correct_counts_argmax_hits_with_first_max_ties_and_nan_as_max() {
    // 300 rows (two workgroups), values in quarters so ties are common.
    let (n, c) = (300, 5);
    for (name, ctx) in contexts() {
        for dtype in DType::ALL {
            let mut logits_v: Vec<f32> = rand_vec(n * c, 151)
                .iter()
                .map(|&v| (v * 4.0).round() / 4.0)
                .collect();
            logits_v[7 * c + 3] = f32::NAN;
            logits_v[8 * c] = f32::NAN;
            let mut labels_v = labels_for(n, c, 152);
            labels_v[7] = 3; // the NaN's index is the argmax
            labels_v[9] = c as u32; // out of range: never counted
            let logits = upload(ctx, &logits_v, &[n, c], dtype);
            let labels = upload_u32(ctx, &labels_v);
            let correct = upload_u32(ctx, &[5]);
            let k = loss::count_correct(ctx, &logits, &labels, &correct).unwrap();
            ctx.run(&[&k, &k]);
            let hits = (0..n)
                .filter(|&r| argmax_ref(&logits_v[r * c..][..c]) == labels_v[r])
                .count() as u32;
            assert!(
                hits > 30 && hits < 270,
                "test data should mix hits and misses"
            );
            assert_eq!(read_u32(ctx, &correct), 5 + 2 * hits, "{name} {dtype}");
        }
    }
}
