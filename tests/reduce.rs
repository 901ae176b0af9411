//! Reductions (sum, mean, bias gradient) against f64 CPU references on every storage: odd
//! lengths, a million elements bit for bit run to run, accumulation, the bias gradient by
//! finite differences, and the shape errors.

mod common;

use common::values::{assert_rel, contexts, quantised, run, scalar, ulp, upload};
use common::{assert_close, ctx, ctx_packed, rand_vec};
use webgpu_amp::ops::{Accumulate, reduce};
use webgpu_amp::{DType, Tensor};

// ---- sum and mean -----------------------------------------------------------------------------

/// Multiples of 1/16 in [-1, 1]: exact in every dtype, and every partial sum of up to 2^20 of
/// them is exact in f32, so a GPU sum must equal the CPU sum bit for bit (a dropped or doubled
/// element shows).
fn sixteenths(n: usize, seed: u64) -> Vec<f32> {
    rand_vec(n, seed)
        .iter()
        .map(|&v| (v * 16.0).round() / 16.0)
        .collect()
}

#[test]
fn sum_and_mean_on_every_storage_and_odd_lengths() {
    for (name, ctx) in contexts() {
        for dtype in DType::ALL {
            // 1, 7, 1001 take the one-pass path; 5001 takes two passes.
            for n in [1usize, 7, 1001, 5001] {
                let data = sixteenths(n, n as u64);
                let x = upload(ctx, &data, &[n], dtype);
                let s = Tensor::zeros(ctx, &[1], DType::F32);
                let m = Tensor::zeros(ctx, &[1], DType::F32);
                let mut ks = reduce::sum(ctx, &x, &s).unwrap();
                assert_eq!(ks.len(), if n > 2048 { 2 } else { 1 });
                ks.extend(reduce::mean(ctx, &x, &m).unwrap());
                run(ctx, &ks);
                let want: f64 = data.iter().map(|&v| v as f64).sum();
                assert_eq!(scalar(ctx, &s) as f64, want, "{name} sum {dtype} n={n}");
                assert_rel(
                    &format!("{name} mean {dtype} n={n}"),
                    scalar(ctx, &m),
                    want / n as f64,
                    1e-6,
                );
            }
        }
    }
}

#[test]
fn sum_of_a_million_elements_matches_f64_and_is_deterministic() {
    let n = 1_000_003;
    let ctx = ctx_packed();
    // Exact data: bit-exact sum, f32 and packed f16 storage.
    let data = sixteenths(n, 77);
    let want: f64 = data.iter().map(|&v| v as f64).sum();
    for dtype in [DType::F32, DType::F16] {
        let x = upload(ctx, &data, &[n], dtype);
        let s = Tensor::zeros(ctx, &[1], DType::F32);
        let ks = reduce::sum(ctx, &x, &s).unwrap();
        assert_eq!(ks.len(), 2);
        run(ctx, &ks);
        assert_eq!(
            scalar(ctx, &s) as f64,
            want,
            "sum of {n} sixteenths ({dtype})"
        );
    }
    // General data (positive mean, so no cancellation hides errors): f32 accumulation in a
    // tree is within a few e-7 relative of the f64 sum, and the same every run.
    let data: Vec<f32> = rand_vec(n, 78).iter().map(|&v| v + 0.5).collect();
    let want: f64 = data.iter().map(|&v| v as f64).sum();
    let x = upload(ctx, &data, &[n], DType::F32);
    let s = Tensor::zeros(ctx, &[1], DType::F32);
    let ks = reduce::sum(ctx, &x, &s).unwrap();
    run(ctx, &ks);
    let first = scalar(ctx, &s);
    assert_rel("sum of a million", first, want, 1e-6);
    run(ctx, &ks);
    assert_eq!(
        first.to_bits(),
        scalar(ctx, &s).to_bits(),
        "sum is deterministic"
    );
}

#[test]
fn sum_rejects_an_output_that_is_not_one_element() {
    let ctx = ctx();
    let x = Tensor::zeros(ctx, &[4], DType::F32);
    let out = Tensor::zeros(ctx, &[2], DType::F32);
    common::expect_err(
        reduce::sum(ctx, &x, &out),
        &["sum: out must hold one element"],
    );
    common::expect_err(
        reduce::mean(ctx, &x, &out),
        &["mean: out must hold one element"],
    );
}

// ---- bias gradient --------------------------------------------------------------------------

/// db[c] = sum of dy[b, c, s] over b and s, in f64.
fn bias_grad_ref(dy: &[f32], shape: &[usize]) -> Vec<f64> {
    let (c, inner) = (shape[1], shape[2..].iter().product::<usize>());
    let mut db = vec![0.0f64; c];
    for (i, &v) in dy.iter().enumerate() {
        db[(i / inner) % c] += v as f64;
    }
    db
}

#[test]
fn bias_grad_matches_cpu_on_every_storage_with_and_without_accumulation() {
    // Linear [N, F] and conv [N, C, H, W] shapes, odd sizes included (packed db: neighbouring
    // channels share a word and are written by different workgroups).
    let shapes: [&[usize]; 5] = [&[1, 1], &[5, 3], &[2, 3, 5, 7], &[3, 1001], &[4, 7, 1, 1]];
    for (name, ctx) in contexts() {
        for dtype in DType::ALL {
            for db_dtype in [DType::F32, dtype] {
                for shape in shapes {
                    let n: usize = shape.iter().product();
                    let c = shape[1];
                    let dyv = quantised(n, 51, 2.0, dtype);
                    let prev = quantised(c, 52, 1.0, db_dtype);
                    let dy = upload(ctx, &dyv, shape, dtype);
                    let fresh = upload(ctx, &prev, &[c], db_dtype);
                    let accumulated = upload(ctx, &prev, &[c], db_dtype);
                    let k1 =
                        reduce::bias_grad(ctx, &dy, &fresh, Accumulate::Overwrite, None).unwrap();
                    let k2 =
                        reduce::bias_grad(ctx, &dy, &accumulated, Accumulate::Add, None).unwrap();
                    ctx.run(&[&k1, &k2]);
                    let want = bias_grad_ref(&dyv, shape);
                    let want_fresh: Vec<f32> = want.iter().map(|&v| v as f32).collect();
                    let want_acc: Vec<f32> = want
                        .iter()
                        .zip(&prev)
                        .map(|(&v, &p)| (v + p as f64) as f32)
                        .collect();
                    // f32 accumulation of up to ~1000 terms of size <= 2, then the db rounding.
                    let (atol, rtol) = (1e-5, ulp(db_dtype).max(1e-6));
                    let what = format!("{name} bias_grad dy={dtype} db={db_dtype} {shape:?}");
                    assert_close(
                        &what,
                        &fresh.read_f32(ctx).unwrap(),
                        &want_fresh,
                        atol,
                        rtol,
                    );
                    assert_close(
                        &format!("{what} accumulate"),
                        &accumulated.read_f32(ctx).unwrap(),
                        &want_acc,
                        atol,
                        rtol,
                    );
                }
            }
        }
    }
}

#[test]
fn bias_grad_is_the_gradient_of_bias_add_by_finite_differences() {
    // L(x, b) = sum(w * bias_add(x, b)): dL/db = bias_grad(w). Check the CPU gradient against
    // finite differences of the CPU forward, then the GPU against the CPU.
    let shape = [3usize, 4, 5];
    let (c, inner) = (4, 5);
    let n: usize = shape.iter().product();
    let x = rand_vec(n, 61);
    let w = rand_vec(n, 62);
    let b = rand_vec(c, 63);
    let loss = |b: &[f64]| -> f64 {
        (0..n)
            .map(|i| w[i] as f64 * (x[i] as f64 + b[(i / inner) % c]))
            .sum()
    };
    let analytic = bias_grad_ref(&w, &shape);
    let b64: Vec<f64> = b.iter().map(|&v| v as f64).collect();
    for ch in 0..c {
        let h = 1e-3;
        let (mut up, mut down) = (b64.clone(), b64.clone());
        up[ch] += h;
        down[ch] -= h;
        let fd = (loss(&up) - loss(&down)) / (2.0 * h);
        assert!(
            (fd - analytic[ch]).abs() < 1e-9,
            "dL/db[{ch}]: fd {fd} vs {}",
            analytic[ch]
        );
    }
    for (name, ctx) in contexts() {
        let wt = upload(ctx, &w, &shape, DType::F32);
        let db = Tensor::zeros(ctx, &[c], DType::F32);
        let k = reduce::bias_grad(ctx, &wt, &db, Accumulate::Overwrite, None).unwrap();
        ctx.run(&[&k]);
        let want: Vec<f32> = analytic.iter().map(|&v| v as f32).collect();
        assert_close(
            &format!("{name} GPU dL/db"),
            &db.read_f32(ctx).unwrap(),
            &want,
            1e-6,
            1e-6,
        );
    }
}

#[test]
fn bias_grad_rejects_mismatched_shapes() {
    let ctx = ctx();
    let dy = Tensor::zeros(ctx, &[4, 3], DType::F32);
    for bad in [&[4usize][..], &[3, 1]] {
        let db = Tensor::zeros(ctx, bad, DType::F32);
        common::expect_err(
            reduce::bias_grad(ctx, &dy, &db, Accumulate::Overwrite, None),
            &["bias_grad", "does not match dim 1"],
        );
    }
}
