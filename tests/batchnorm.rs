//! BatchNorm against f64 CPU references on f32, native f16, packed f16 and bf16 storages:
//! training forward (batch statistics), eval forward (running statistics), backward (analytic
//! reference and finite differences), the fused ReLU and GELU against the two kernels they
//! replace, and the shape and argument errors. The running statistics, their commit under the
//! GradScaler and determinism: tests/batchnorm_running.rs.

mod common;

use common::batchnorm_ref::{self as bnref, BnTensors, to_f32};
use common::values::{quantised, run, storages, ulp, upload};
use common::{assert_close, bits, ctx, expect_err, rand_vec};
use webgpu_amp::ops::batchnorm::{Activation, Affine, BatchNorm, RunningStats};
use webgpu_amp::ops::unary;
use webgpu_amp::{DType, GpuContext, Tensor};

const EPS: f64 = 1e-5;

/// Shapes: BatchNorm2d with an odd plane (packed words straddle planes), BatchNorm1d on
/// [N, C] and [N, C, L], and one whose channels span three chunks (the last one partial).
const SHAPES: [&[usize]; 4] = [&[4, 3, 5, 7], &[6, 5], &[3, 4, 6], &[4, 2, 33, 17]];

fn dims(shape: &[usize]) -> (usize, usize, usize) {
    (shape[0], shape[1], shape[2..].iter().product())
}

/// Inputs with a per-channel offset and scale, already in `act`.
fn input(shape: &[usize], seed: u64, act: DType) -> Vec<f32> {
    let (_, c, s) = dims(shape);
    quantised(shape.iter().product(), seed, 1.0, DType::F32)
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let ch = ((i / s) % c) as f32;
            act.round(v * (1.0 + ch) + 0.5 * ch - 0.3)
        })
        .collect()
}

#[test]
fn train_forward_matches_reference_on_every_storage() {
    for (name, ctx, act) in storages() {
        for param in [DType::F32, act] {
            for shape in SHAPES {
                for affine in [true, false] {
                    let d = dims(shape);
                    let xv = input(shape, 1, act);
                    let wv = quantised(d.1, 2, 1.5, param);
                    let bv = quantised(d.1, 3, 1.0, param);
                    let ab = if affine {
                        (Some(wv.as_slice()), Some(bv.as_slice()))
                    } else {
                        (None, None)
                    };
                    let t = BnTensors::new(ctx, (&xv, shape), ab, (act, param));
                    let y = t.train(ctx, &BatchNorm::default(), None);
                    let stats = bnref::batch_stats(&xv, d);
                    let want = bnref::normalise(&xv, d, &stats, ab, EPS);
                    let what = format!("{name} x={act} w={param} {shape:?} affine={affine}");
                    assert_close(
                        &format!("{what} y"),
                        &y,
                        &to_f32(&want),
                        2e-5,
                        ulp(act).max(2e-6),
                    );
                    let saved = t.saved.read_f32(ctx).unwrap();
                    let mean: Vec<f32> = stats.iter().map(|s| s.0 as f32).collect();
                    let invstd: Vec<f32> = stats
                        .iter()
                        .map(|s| (1.0 / (s.1 + EPS).sqrt()) as f32)
                        .collect();
                    assert_close(&format!("{what} mean"), &saved[..d.1], &mean, 1e-6, 1e-5);
                    assert_close(&format!("{what} invstd"), &saved[d.1..], &invstd, 0.0, 1e-5);
                }
            }
        }
    }
}

#[test]
fn eval_forward_normalises_with_the_running_statistics() {
    for (name, ctx, act) in storages() {
        for param in [DType::F32, act] {
            let shape: &[usize] = &[3, 4, 5, 3];
            let d = dims(shape);
            let xv = input(shape, 4, act);
            let wv = quantised(d.1, 5, 1.5, param);
            let bv = quantised(d.1, 6, 1.0, param);
            let rm: Vec<f32> = rand_vec(d.1, 7);
            let rv: Vec<f32> = rand_vec(d.1, 8).iter().map(|v| v.abs() + 0.25).collect();
            let running = RunningStats::new(ctx, "test running", d.1).unwrap();
            running.write(ctx, &rm, &rv, 3).unwrap();
            let t = BnTensors::new(ctx, (&xv, shape), (Some(&wv), Some(&bv)), (act, param));
            let k = BatchNorm::default()
                .eval_forward(ctx, (&t.x, &t.y), t.affine(), &running)
                .unwrap();
            run(ctx, &[k]);
            let stats: Vec<(f64, f64)> = rm
                .iter()
                .zip(&rv)
                .map(|(&m, &v)| (m as f64, v as f64))
                .collect();
            let want = bnref::normalise(&xv, d, &stats, (Some(&wv), Some(&bv)), EPS);
            let y = t.y.read_f32(ctx).unwrap();
            assert_close(
                &format!("{name} x={act} w={param} eval y"),
                &y,
                &to_f32(&want),
                2e-5,
                ulp(act).max(2e-6),
            );
            // The eval forward reads the running statistics and leaves them alone.
            assert_eq!(running.read(ctx).unwrap(), (rm.clone(), rv.clone(), 3));
        }
    }
}

/// GPU backward after a training forward: (dx, dweight, dbias), the gradients added to
/// `prev` (None: that gradient is not asked for).
fn gpu_backward(
    ctx: &GpuContext,
    t: &BnTensors,
    bn: &BatchNorm,
    dyv: &[f32],
    prev: (Option<&[f32]>, Option<&[f32]>),
) -> (Vec<f32>, Option<Vec<f32>>, Option<Vec<f32>>) {
    let shape = t.x.shape().to_vec();
    let c = shape[1];
    let dy = upload(ctx, dyv, &shape, t.x.dtype());
    let dx = Tensor::zeros(ctx, &shape, t.x.dtype());
    let dw = prev.0.map(|p| upload(ctx, p, &[c], DType::F32));
    let db = prev.1.map(|p| upload(ctx, p, &[c], DType::F32));
    t.train_and_backward(ctx, bn, None, (&dy, &dx), (dw.as_ref(), db.as_ref()));
    let read = |t: Option<Tensor>| t.map(|t| t.read_f32(ctx).unwrap());
    (dx.read_f32(ctx).unwrap(), read(dw), read(db))
}

#[test]
fn backward_matches_the_analytic_reference_on_every_storage() {
    for (name, ctx, act) in storages() {
        for param in [DType::F32, act] {
            for shape in SHAPES {
                let d = dims(shape);
                let xv = input(shape, 11, act);
                let wv = quantised(d.1, 12, 1.5, param);
                let bv = quantised(d.1, 13, 1.0, param);
                let dyv = quantised(xv.len(), 14, 1.0, act);
                // Gradients accumulate (+=) into what is there.
                let prev_w = quantised(d.1, 15, 1.0, DType::F32);
                let prev_b = quantised(d.1, 16, 1.0, DType::F32);
                let t = BnTensors::new(ctx, (&xv, shape), (Some(&wv), Some(&bv)), (act, param));
                let (dx, dw, db) = gpu_backward(
                    ctx,
                    &t,
                    &BatchNorm::default(),
                    &dyv,
                    (Some(&prev_w), Some(&prev_b)),
                );
                let dy64: Vec<f64> = dyv.iter().map(|&v| v as f64).collect();
                let (dx_want, dw_want, db_want) = bnref::backward(&xv, &dy64, d, Some(&wv), EPS);
                let what = format!("{name} x={act} w={param} {shape:?}");
                let m = (d.0 * d.2) as f32;
                // dx: a difference of O(1) terms after sums of M values in f32.
                assert_close(
                    &format!("{what} dx"),
                    &dx,
                    &to_f32(&dx_want),
                    2e-5 * m.sqrt(),
                    ulp(act).max(1e-5),
                );
                let plus = |want: &[f64], prev: &[f32]| -> Vec<f32> {
                    want.iter()
                        .zip(prev)
                        .map(|(w, p)| (w + *p as f64) as f32)
                        .collect()
                };
                assert_close(
                    &format!("{what} dweight"),
                    &dw.unwrap(),
                    &plus(&dw_want, &prev_w),
                    1e-6 * m,
                    1e-5,
                );
                assert_close(
                    &format!("{what} dbias"),
                    &db.unwrap(),
                    &plus(&db_want, &prev_b),
                    1e-6 * m,
                    1e-5,
                );
            }
        }
    }
}

#[test]
fn backward_without_affine_or_with_frozen_parameters() {
    let ctx = ctx();
    let shape: &[usize] = &[5, 3, 4];
    let d = dims(shape);
    let xv = input(shape, 21, DType::F32);
    let dyv = rand_vec(xv.len(), 22);
    let dy64: Vec<f64> = dyv.iter().map(|&v| v as f64).collect();
    // affine=False: no weight, no gradients of it.
    let t = BnTensors::new(ctx, (&xv, shape), (None, None), (DType::F32, DType::F32));
    let (dx, dw, db) = gpu_backward(ctx, &t, &BatchNorm::default(), &dyv, (None, None));
    let (dx_want, _, _) = bnref::backward(&xv, &dy64, d, None, EPS);
    assert_close("affine=False dx", &dx, &to_f32(&dx_want), 2e-5, 1e-5);
    assert!(dw.is_none() && db.is_none());
    // A frozen weight (airbench's BatchNorm): its gradient is not written, the bias's is.
    let wv = quantised(d.1, 23, 1.5, DType::F32);
    let t = BnTensors::new(
        ctx,
        (&xv, shape),
        (Some(&wv), None),
        (DType::F32, DType::F32),
    );
    let zeros = vec![0.0; d.1];
    let (dx, _, db) = gpu_backward(ctx, &t, &BatchNorm::default(), &dyv, (None, Some(&zeros)));
    let (dx_want, _, db_want) = bnref::backward(&xv, &dy64, d, Some(&wv), EPS);
    assert_close("frozen weight dx", &dx, &to_f32(&dx_want), 2e-5, 1e-5);
    assert_close(
        "frozen weight dbias",
        &db.unwrap(),
        &to_f32(&db_want),
        1e-5,
        1e-5,
    );
}

#[test]
fn gradients_match_finite_differences_f32() {
    // L = Σ R · batchnorm(x; w, b) in f64 on the CPU (dL/dy = R): central differences check
    // the GPU's dx, dweight and dbias, and so the reference's formula.
    let shape: &[usize] = &[3, 2, 2, 3];
    let d = dims(shape);
    let xv = rand_vec(shape.iter().product(), 31);
    let wv: Vec<f32> = rand_vec(d.1, 32).iter().map(|v| v + 1.5).collect();
    let bv = rand_vec(d.1, 33);
    let r = rand_vec(xv.len(), 34);
    let loss = |x: &[f32], w: &[f32], b: &[f32]| -> f64 {
        let stats = bnref::batch_stats(x, d);
        let y = bnref::normalise(x, d, &stats, (Some(w), Some(b)), EPS);
        y.iter().zip(&r).map(|(y, r)| y * *r as f64).sum()
    };
    // f32 inputs perturbed in f64 would round: perturb with a step that f32 holds exactly.
    let h = 2f32.powi(-10);
    let fd = |which: usize, i: usize| -> f32 {
        let mut args = [xv.clone(), wv.clone(), bv.clone()];
        args[which][i] += h;
        let up = loss(&args[0], &args[1], &args[2]);
        args[which][i] -= 2.0 * h;
        let down = loss(&args[0], &args[1], &args[2]);
        ((up - down) / (2.0 * h as f64)) as f32
    };
    let fd_dx: Vec<f32> = (0..xv.len()).map(|i| fd(0, i)).collect();
    let fd_dw: Vec<f32> = (0..d.1).map(|i| fd(1, i)).collect();
    let fd_db: Vec<f32> = (0..d.1).map(|i| fd(2, i)).collect();
    let ctx = ctx();
    let t = BnTensors::new(
        ctx,
        (&xv, shape),
        (Some(&wv), Some(&bv)),
        (DType::F32, DType::F32),
    );
    let zeros = vec![0.0; d.1];
    let (dx, dw, db) = gpu_backward(
        ctx,
        &t,
        &BatchNorm::default(),
        &r,
        (Some(&zeros), Some(&zeros)),
    );
    assert_close("dx vs finite differences", &dx, &fd_dx, 2e-3, 2e-3);
    assert_close(
        "dweight vs finite differences",
        &dw.unwrap(),
        &fd_dw,
        2e-3,
        2e-3,
    );
    assert_close(
        "dbias vs finite differences",
        &db.unwrap(),
        &fd_db,
        2e-3,
        2e-3,
    );
}

#[test]
fn fused_activation_gives_the_bits_of_the_two_kernels() {
    for (name, ctx, act) in storages() {
        for (activation, op) in [
            (Activation::Relu, &unary::RELU),
            (Activation::Gelu, &unary::GELU),
        ] {
            let shape: &[usize] = &[3, 4, 5, 3];
            let d = dims(shape);
            let xv = input(shape, 41, act);
            let wv = quantised(d.1, 42, 1.5, DType::F32);
            let bv = quantised(d.1, 43, 1.0, DType::F32);
            let dyv = quantised(xv.len(), 44, 1.0, act);
            let dy = upload(ctx, &dyv, shape, act);
            let ab = (Some(wv.as_slice()), Some(bv.as_slice()));
            // Two kernels: BatchNorm into z, the activation of z; backward in reverse.
            let plain = BnTensors::new(ctx, (&xv, shape), ab, (act, DType::F32));
            let (a, dz, dx) = (
                Tensor::zeros(ctx, shape, act),
                Tensor::zeros(ctx, shape, act),
                Tensor::zeros(ctx, shape, act),
            );
            let (dw, db) = (
                Tensor::zeros(ctx, &[d.1], DType::F32),
                Tensor::zeros(ctx, &[d.1], DType::F32),
            );
            let bn = BatchNorm::default();
            let mut ks = bn
                .train_forward(
                    ctx,
                    (&plain.x, &plain.y),
                    plain.affine(),
                    &plain.saved,
                    None,
                )
                .unwrap();
            ks.push(unary::forward(ctx, op, &plain.y, &a).unwrap());
            ks.push(unary::backward(ctx, op, &plain.y, &dy, &dz).unwrap());
            ks.extend(
                bn.backward(
                    ctx,
                    (&plain.x, &dz, &dx),
                    plain.affine(),
                    &plain.saved,
                    (Some(&dw), Some(&db)),
                )
                .unwrap(),
            );
            run(ctx, &ks);
            // One each way.
            let fused_bn = BatchNorm { activation, ..bn };
            let fused = BnTensors::new(ctx, (&xv, shape), ab, (act, DType::F32));
            let fdx = Tensor::zeros(ctx, shape, act);
            let (fdw, fdb) = (
                Tensor::zeros(ctx, &[d.1], DType::F32),
                Tensor::zeros(ctx, &[d.1], DType::F32),
            );
            fused.train_and_backward(ctx, &fused_bn, None, (&dy, &fdx), (Some(&fdw), Some(&fdb)));
            let what = format!("{name} {activation:?}");
            let read = |t: &Tensor| bits(&t.read_f32(ctx).unwrap());
            assert_eq!(read(&fused.y), read(&a), "{what}: output");
            assert_eq!(read(&fdx), read(&dx), "{what}: input gradient");
            assert_eq!(read(&fdw), read(&dw), "{what}: dweight");
            assert_eq!(read(&fdb), read(&db), "{what}: dbias");
            assert!(
                read(&fused.y) != read(&plain.y),
                "{what}: the activation did something"
            );
        }
    }
}

/// A model's `bn → relu` / `bn → gelu` (`nn::layers::fusion`): the normalisation made again
/// with the activation fused writes the BatchNorm's output and the activation's with the bits
/// of the normalisation kernel and the activation's kernel, in training and in eval.
#[test]
fn normalisation_made_fused_writes_both_outputs_with_the_two_kernels_bits() {
    for (name, ctx, act) in storages() {
        let shape: &[usize] = &[3, 4, 5, 3];
        let d = dims(shape);
        let xv = input(shape, 51, act);
        let wv = quantised(d.1, 52, 1.5, DType::F32);
        let bv = quantised(d.1, 53, 1.0, DType::F32);
        let ab = (Some(wv.as_slice()), Some(bv.as_slice()));
        let running = RunningStats::new(ctx, "test running", d.1).unwrap();
        let rv: Vec<f32> = rand_vec(d.1, 55).iter().map(|v| v.abs() + 0.25).collect();
        running.write(ctx, &rand_vec(d.1, 54), &rv, 3).unwrap();
        let read = |t: &Tensor| bits(&t.read_f32(ctx).unwrap());
        for (activation, op) in [
            (Activation::Relu, &unary::RELU),
            (Activation::Gelu, &unary::GELU),
        ] {
            for eval in [false, true] {
                let bn = BatchNorm::default();
                // Separate: the BatchNorm's kernels, then the activation's.
                let sep = BnTensors::new(ctx, (&xv, shape), ab, (act, DType::F32));
                let sep_out = Tensor::zeros(ctx, shape, act);
                let fused = BnTensors::new(ctx, (&xv, shape), ab, (act, DType::F32));
                let fused_out = Tensor::zeros(ctx, shape, act);
                let make = |t: &BnTensors| {
                    if eval {
                        let n = bn.eval_normalise((&t.x, &t.y), t.affine(), &running);
                        (Vec::new(), n.unwrap())
                    } else {
                        let r = bn.train_statistics(ctx, (&t.x, &t.y), t.affine(), &t.saved, None);
                        r.unwrap()
                    }
                };
                let (mut ks, normalise) = make(&sep);
                ks.push(normalise.kernel(ctx).unwrap());
                ks.push(unary::forward(ctx, op, &sep.y, &sep_out).unwrap());
                run(ctx, &ks);
                let (mut ks, normalise) = make(&fused);
                ks.push(normalise.fused(ctx, activation, &fused_out).unwrap());
                run(ctx, &ks);
                let what = format!("{name} {activation:?} eval={eval}");
                assert_eq!(
                    read(&fused.y),
                    read(&sep.y),
                    "{what}: the BatchNorm's output"
                );
                assert_eq!(read(&fused_out), read(&sep_out), "{what}: the activation's");
                assert_ne!(
                    read(&fused_out),
                    read(&fused.y),
                    "{what}: the activation acted"
                );
                // A wrong output (another shape) is an error, never a silent write.
                let short = Tensor::zeros(ctx, &shape[1..], act);
                assert!(normalise.fused(ctx, activation, &short).is_err(), "{what}");
                assert!(normalise.fused(ctx, Activation::None, &fused_out).is_err());
            }
        }
    }
}

#[test]
fn rejects_bad_shapes_and_arguments() {
    let ctx = ctx();
    let x = Tensor::zeros(ctx, &[4, 3, 2], DType::F32);
    let y = Tensor::zeros(ctx, &[4, 3, 2], DType::F32);
    let saved = Tensor::zeros(ctx, &[6], DType::F32);
    let none = Affine::default();
    let bn = BatchNorm::default();
    let x1 = Tensor::zeros(ctx, &[12], DType::F32);
    expect_err(
        bn.train_forward(ctx, (&x1, &x1), none, &saved, None),
        &["must be [N, C, ...]"],
    );
    let w = Tensor::zeros(ctx, &[4], DType::F32);
    let affine = Affine {
        weight: Some(&w),
        bias: None,
    };
    expect_err(
        bn.train_forward(ctx, (&x, &y), affine, &saved, None),
        &["weight [4] must hold 3 values"],
    );
    let saved16 = Tensor::zeros(ctx, &[6], DType::F16);
    expect_err(
        bn.train_forward(ctx, (&x, &y), none, &saved16, None),
        &["must be stored as f32"],
    );
    let small = Tensor::zeros(ctx, &[4], DType::F32);
    expect_err(
        bn.train_forward(ctx, (&x, &y), none, &small, None),
        &["must hold 2 × 3 values"],
    );
    let bad = BatchNorm {
        momentum: Some(1.5),
        ..bn
    };
    expect_err(
        bad.train_forward(ctx, (&x, &y), none, &saved, None),
        &["momentum must be in [0, 1]"],
    );
    let bad = BatchNorm { eps: 0.0, ..bn };
    expect_err(
        bad.train_forward(ctx, (&x, &y), none, &saved, None),
        &["eps must be finite and > 0"],
    );
    // PyTorch: "Expected more than 1 value per channel when training".
    let one = Tensor::zeros(ctx, &[1, 3], DType::F32);
    let running = RunningStats::new(ctx, "test", 3).unwrap();
    for running in [Some(&running), None] {
        expect_err(
            bn.train_forward(ctx, (&one, &one.clone()), none, &saved, running),
            &["one value per channel"],
        );
    }
    let running4 = RunningStats::new(ctx, "test", 4).unwrap();
    expect_err(
        bn.eval_forward(ctx, (&x, &y), none, &running4),
        &["running statistics of 4 channels"],
    );
    let dw16 = Tensor::zeros(ctx, &[3], DType::BF16);
    expect_err(
        bn.backward(ctx, (&x, &y, &y.clone()), none, &saved, (Some(&dw16), None)),
        &["dweight must be stored as f32"],
    );
}
