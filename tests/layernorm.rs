//! LayerNorm against f64 CPU references on f32, native f16, packed f16 and bf16 storages:
//! forward, backward (analytic reference and finite differences), constant rows,
//! deterministic weight gradients and the shape and storage errors.

mod common;

use common::values::{quantised, run, storages, ulp, upload};
use common::{assert_close, bits, ctx, rand_vec};
use webgpu_amp::ops::layernorm::{layernorm_backward, layernorm_forward};
use webgpu_amp::{DType, GpuContext, Tensor};

const EPS: f32 = 1e-5;

struct LnRef {
    y: Vec<f64>,
    mean: Vec<f64>,
    rstd: Vec<f64>,
}

/// PyTorch's LayerNorm forward in f64: biased variance, rstd = 1 / sqrt(var + eps).
fn ln_forward_ref(x: &[f32], w: &[f32], b: Option<&[f32]>, cols: usize) -> LnRef {
    let rows = x.len() / cols;
    let mut r = LnRef {
        y: vec![0.0; x.len()],
        mean: vec![0.0; rows],
        rstd: vec![0.0; rows],
    };
    for row in 0..rows {
        let xs = &x[row * cols..(row + 1) * cols];
        let mean = xs.iter().map(|&v| v as f64).sum::<f64>() / cols as f64;
        let var = xs.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / cols as f64;
        let rstd = 1.0 / (var + EPS as f64).sqrt();
        for c in 0..cols {
            let bias = b.map_or(0.0, |b| b[c] as f64);
            r.y[row * cols + c] = (xs[c] as f64 - mean) * rstd * w[c] as f64 + bias;
        }
        r.mean[row] = mean;
        r.rstd[row] = rstd;
    }
    r
}

/// The analytic backward in f64: (dx, dweight, dbias).
fn ln_backward_ref(
    dy: &[f32],
    x: &[f32],
    w: &[f32],
    cols: usize,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let f = ln_forward_ref(x, w, None, cols);
    let rows = x.len() / cols;
    let mut dx = vec![0.0; x.len()];
    let mut dw = vec![0.0; cols];
    let mut db = vec![0.0; cols];
    for row in 0..rows {
        let i0 = row * cols;
        let xhat: Vec<f64> = (0..cols)
            .map(|c| (x[i0 + c] as f64 - f.mean[row]) * f.rstd[row])
            .collect();
        let g: Vec<f64> = (0..cols).map(|c| dy[i0 + c] as f64 * w[c] as f64).collect();
        let mg = g.iter().sum::<f64>() / cols as f64;
        let mgx = g.iter().zip(&xhat).map(|(a, b)| a * b).sum::<f64>() / cols as f64;
        for c in 0..cols {
            dx[i0 + c] = f.rstd[row] * (g[c] - mg - xhat[c] * mgx);
            dw[c] += dy[i0 + c] as f64 * xhat[c];
            db[c] += dy[i0 + c] as f64;
        }
    }
    (dx, dw, db)
}

fn to_f32(v: &[f64]) -> Vec<f32> {
    v.iter().map(|&x| x as f32).collect()
}

/// Forward outputs of one GPU LayerNorm: (y, mean, rstd).
fn gpu_ln_forward(
    ctx: &GpuContext,
    (xv, wv, bv): (&[f32], &[f32], Option<&[f32]>),
    (rows, cols): (usize, usize),
    (act, param): (DType, DType),
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let x = upload(ctx, xv, &[rows, cols], act);
    let w = upload(ctx, wv, &[cols], param);
    let b = bv.map(|b| upload(ctx, b, &[cols], param));
    let y = Tensor::zeros(ctx, &[rows, cols], act);
    let mean = Tensor::zeros(ctx, &[rows], DType::F32);
    let rstd = Tensor::zeros(ctx, &[rows], DType::F32);
    let k = layernorm_forward(ctx, &x, &w, b.as_ref(), &y, &mean, &rstd, EPS).unwrap();
    run(ctx, &[k]);
    (
        y.read_f32(ctx).unwrap(),
        mean.read_f32(ctx).unwrap(),
        rstd.read_f32(ctx).unwrap(),
    )
}

#[test]
fn layernorm_forward_matches_reference_on_every_storage() {
    // Odd C: rows of packed storages start mid-word (per-half stores at the row edges).
    for (name, ctx, act) in storages() {
        for param in [DType::F32, act] {
            for (rows, cols) in [(5usize, 37usize), (3, 64), (1, 1)] {
                for with_bias in [true, false] {
                    let xv: Vec<f32> = quantised(rows * cols, 1, 2.0, act)
                        .iter()
                        .enumerate()
                        .map(|(i, &v)| act.round(v + (i / cols) as f32 * 0.5))
                        .collect();
                    let wv = quantised(cols, 2, 1.5, param);
                    let bv = quantised(cols, 3, 1.0, param);
                    let b = with_bias.then_some(bv.as_slice());
                    let (y, mean, rstd) =
                        gpu_ln_forward(ctx, (&xv, &wv, b), (rows, cols), (act, param));
                    let want = ln_forward_ref(&xv, &wv, b, cols);
                    let what =
                        format!("{name} x={act} w={param} [{rows}, {cols}] bias={with_bias}");
                    // f32 statistics of <= 64 values; then the output rounding of y.
                    assert_close(
                        &format!("{what} y"),
                        &y,
                        &to_f32(&want.y),
                        2e-5,
                        ulp(act).max(2e-6),
                    );
                    assert_close(
                        &format!("{what} mean"),
                        &mean,
                        &to_f32(&want.mean),
                        1e-6,
                        1e-5,
                    );
                    assert_close(
                        &format!("{what} rstd"),
                        &rstd,
                        &to_f32(&want.rstd),
                        0.0,
                        1e-5,
                    );
                }
            }
        }
    }
}

#[test]
fn layernorm_constant_rows_give_the_bias_and_finite_gradients() {
    let ctx = ctx();
    let cols = 48;
    let values = [0.5f32, -3.0, 0.0, 0.1, 1000.25];
    let rows = values.len();
    let xv: Vec<f32> = values
        .iter()
        .flat_map(|&v| std::iter::repeat_n(v, cols))
        .collect();
    let wv = quantised(cols, 4, 1.0, DType::F32);
    let bv = quantised(cols, 5, 1.0, DType::F32);
    let (y, mean, rstd) = gpu_ln_forward(
        ctx,
        (&xv, &wv, Some(&bv)),
        (rows, cols),
        (DType::F32, DType::F32),
    );
    let rstd_eps = 1.0 / EPS.sqrt();
    for (r, &v) in values.iter().enumerate() {
        assert!(
            (mean[r] - v).abs() <= 4e-7 * v.abs(),
            "row {r}: mean {}",
            mean[r]
        );
        assert!(
            (rstd[r] - rstd_eps).abs() <= 1e-3 * rstd_eps,
            "row {r}: rstd {} (want 1/sqrt(eps) = {rstd_eps})",
            rstd[r]
        );
        // y = bias up to (x − mean)·rstd·w: the f32 mean can be a few ulp off v, and rstd
        // (~316) amplifies that (PyTorch behaves the same); a row of zeros is exact.
        let row = &y[r * cols..(r + 1) * cols];
        let tol = 4.0 * v.abs() * 2f32.powi(-23) * rstd_eps;
        assert_close(&format!("constant row {v}: y"), row, &bv, tol, 0.0);
    }
    // Backward of constant rows: finite, and the analytic formula with the GPU's statistics.
    let dyv = quantised(rows * cols, 6, 1.0, DType::F32);
    let x = upload(ctx, &xv, &[rows, cols], DType::F32);
    let w = upload(ctx, &wv, &[cols], DType::F32);
    let dy = upload(ctx, &dyv, &[rows, cols], DType::F32);
    let mean_t = upload(ctx, &mean, &[rows], DType::F32);
    let rstd_t = upload(ctx, &rstd, &[rows], DType::F32);
    let dx = Tensor::zeros(ctx, &[rows, cols], DType::F32);
    let dw = Tensor::zeros(ctx, &[cols], DType::F32);
    let db = Tensor::zeros(ctx, &[cols], DType::F32);
    let ks = layernorm_backward(ctx, &dy, &x, &w, &mean_t, &rstd_t, &dx, &dw, Some(&db)).unwrap();
    run(ctx, &ks);
    let dx = dx.read_f32(ctx).unwrap();
    assert!(
        dx.iter().all(|v| v.is_finite()),
        "dx of constant rows is finite"
    );
    let mut dw_want = vec![0.0f64; cols];
    for r in 0..rows {
        let i0 = r * cols;
        let (mu, rs) = (mean[r] as f64, rstd[r] as f64);
        let xhat: Vec<f64> = (0..cols).map(|c| (xv[i0 + c] as f64 - mu) * rs).collect();
        let g: Vec<f64> = (0..cols)
            .map(|c| dyv[i0 + c] as f64 * wv[c] as f64)
            .collect();
        let mg = g.iter().sum::<f64>() / cols as f64;
        let mgx = g.iter().zip(&xhat).map(|(a, b)| a * b).sum::<f64>() / cols as f64;
        let want: Vec<f32> = (0..cols)
            .map(|c| (rs * (g[c] - mg - xhat[c] * mgx)) as f32)
            .collect();
        assert_close(
            &format!("constant row {r}: dx"),
            &dx[i0..i0 + cols],
            &want,
            1e-3,
            1e-5,
        );
        for c in 0..cols {
            dw_want[c] += dyv[i0 + c] as f64 * xhat[c];
        }
    }
    let (_, _, db_want) = ln_backward_ref(&dyv, &xv, &wv, cols);
    let dbv = db.read_f32(ctx).unwrap();
    assert_close("constant rows: dbias", &dbv, &to_f32(&db_want), 1e-5, 1e-5);
    let dwv = dw.read_f32(ctx).unwrap();
    assert_close(
        "constant rows: dweight",
        &dwv,
        &to_f32(&dw_want),
        1e-4,
        1e-4,
    );
}

/// GPU backward outputs: (dx, dweight, dbias) after adding into `prev_w` / `prev_b`.
#[allow(clippy::type_complexity)]
fn gpu_ln_backward(
    ctx: &GpuContext,
    (dyv, xv, wv): (&[f32], &[f32], &[f32]),
    (rows, cols): (usize, usize),
    (act, param): (DType, DType),
    prev: (&[f32], Option<&[f32]>),
) -> (Vec<f32>, Vec<f32>, Option<Vec<f32>>) {
    let x = upload(ctx, xv, &[rows, cols], act);
    let w = upload(ctx, wv, &[cols], param);
    let dy = upload(ctx, dyv, &[rows, cols], act);
    let y = Tensor::zeros(ctx, &[rows, cols], act);
    let mean = Tensor::zeros(ctx, &[rows], DType::F32);
    let rstd = Tensor::zeros(ctx, &[rows], DType::F32);
    let dx = Tensor::zeros(ctx, &[rows, cols], act);
    let dw = upload(ctx, prev.0, &[cols], DType::F32);
    let db = prev.1.map(|p| upload(ctx, p, &[cols], DType::F32));
    let mut ks = vec![layernorm_forward(ctx, &x, &w, None, &y, &mean, &rstd, EPS).unwrap()];
    ks.extend(layernorm_backward(ctx, &dy, &x, &w, &mean, &rstd, &dx, &dw, db.as_ref()).unwrap());
    run(ctx, &ks);
    (
        dx.read_f32(ctx).unwrap(),
        dw.read_f32(ctx).unwrap(),
        db.map(|d| d.read_f32(ctx).unwrap()),
    )
}

#[test]
fn layernorm_backward_matches_the_analytic_reference_on_every_storage() {
    // 100 rows: 4 chunks of 32 rows in the weight-gradient reduction (the last one partial).
    for (name, ctx, act) in storages() {
        for param in [DType::F32, act] {
            for (rows, cols) in [(100usize, 37usize), (2, 64)] {
                for with_bias in [true, false] {
                    let xv = quantised(rows * cols, 11, 2.0, act);
                    let wv = quantised(cols, 12, 1.5, param);
                    let dyv = quantised(rows * cols, 13, 1.0, act);
                    // Gradients accumulate (+=) into what is there.
                    let prev_w = quantised(cols, 14, 1.0, DType::F32);
                    let prev_b = quantised(cols, 15, 1.0, DType::F32);
                    let (dx, dw, db) = gpu_ln_backward(
                        ctx,
                        (&dyv, &xv, &wv),
                        (rows, cols),
                        (act, param),
                        (&prev_w, with_bias.then_some(prev_b.as_slice())),
                    );
                    let (dx_want, dw_want, db_want) = ln_backward_ref(&dyv, &xv, &wv, cols);
                    let what =
                        format!("{name} x={act} w={param} [{rows}, {cols}] bias={with_bias}");
                    assert_close(
                        &format!("{what} dx"),
                        &dx,
                        &to_f32(&dx_want),
                        5e-5,
                        ulp(act).max(1e-5),
                    );
                    let acc = |want: &[f64], prev: &[f32]| -> Vec<f32> {
                        want.iter()
                            .zip(prev)
                            .map(|(w, p)| (w + *p as f64) as f32)
                            .collect()
                    };
                    // f32 sums of 100 terms of size <= ~4.
                    assert_close(
                        &format!("{what} dweight"),
                        &dw,
                        &acc(&dw_want, &prev_w),
                        1e-4,
                        1e-5,
                    );
                    match db {
                        Some(db) => assert_close(
                            &format!("{what} dbias"),
                            &db,
                            &acc(&db_want, &prev_b),
                            1e-4,
                            1e-5,
                        ),
                        None => assert!(!with_bias),
                    }
                }
            }
        }
    }
}

#[test]
fn layernorm_gradients_match_finite_differences_f32() {
    // L = sum(R * layernorm(x; w, b)) in f64 on the CPU: dL/dy = R. Central differences of
    // the CPU forward check the GPU's dx, dweight and dbias (and so the reference's formula).
    let (rows, cols) = (3usize, 8usize);
    let xv = rand_vec(rows * cols, 21);
    let wv: Vec<f32> = rand_vec(cols, 22).iter().map(|v| v + 1.5).collect();
    let bv = rand_vec(cols, 23);
    let r = rand_vec(rows * cols, 24);
    let loss = |x: &[f64], w: &[f64], b: &[f64]| -> f64 {
        let mut l = 0.0;
        for row in 0..rows {
            let xs = &x[row * cols..(row + 1) * cols];
            let mean = xs.iter().sum::<f64>() / cols as f64;
            let var = xs.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / cols as f64;
            let rstd = 1.0 / (var + EPS as f64).sqrt();
            for c in 0..cols {
                l += r[row * cols + c] as f64 * ((xs[c] - mean) * rstd * w[c] + b[c]);
            }
        }
        l
    };
    let f64s = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<_>>();
    let (x64, w64, b64) = (f64s(&xv), f64s(&wv), f64s(&bv));
    let h = 1e-5;
    let fd = |which: usize, i: usize| -> f32 {
        let mut args = [x64.clone(), w64.clone(), b64.clone()];
        args[which][i] += h;
        let up = loss(&args[0], &args[1], &args[2]);
        args[which][i] -= 2.0 * h;
        let down = loss(&args[0], &args[1], &args[2]);
        ((up - down) / (2.0 * h)) as f32
    };
    let fd_dx: Vec<f32> = (0..rows * cols).map(|i| fd(0, i)).collect();
    let fd_dw: Vec<f32> = (0..cols).map(|i| fd(1, i)).collect();
    let fd_db: Vec<f32> = (0..cols).map(|i| fd(2, i)).collect();
    let zeros = vec![0.0; cols];
    let (dx, dw, db) = gpu_ln_backward(
        ctx(),
        (&r, &xv, &wv),
        (rows, cols),
        (DType::F32, DType::F32),
        (&zeros, Some(&zeros)),
    );
    assert_close("dx vs finite differences", &dx, &fd_dx, 1e-4, 1e-4);
    assert_close("dweight vs finite differences", &dw, &fd_dw, 1e-4, 1e-4);
    assert_close(
        "dbias vs finite differences",
        &db.unwrap(),
        &fd_db,
        1e-4,
        1e-4,
    );
}

#[test]
fn layernorm_weight_gradients_are_deterministic() {
    // 1000 rows: 32 chunks of 32 rows. Two runs from the same state give the same bits.
    let ctx = ctx();
    let (rows, cols) = (1000usize, 48usize);
    let xv = rand_vec(rows * cols, 31);
    let wv = rand_vec(cols, 32);
    let dyv = rand_vec(rows * cols, 33);
    let zeros = vec![0.0; cols];
    let run_once = || {
        gpu_ln_backward(
            ctx,
            (&dyv, &xv, &wv),
            (rows, cols),
            (DType::F32, DType::F32),
            (&zeros, Some(&zeros)),
        )
    };
    let (dx1, dw1, db1) = run_once();
    let (dx2, dw2, db2) = run_once();
    assert_eq!(bits(&dw1), bits(&dw2), "dweight bits");
    assert_eq!(bits(&db1.unwrap()), bits(&db2.unwrap()), "dbias bits");
    assert_eq!(bits(&dx1), bits(&dx2), "dx bits");
    let (_, dw_want, _) = ln_backward_ref(&dyv, &xv, &wv, cols);
    assert_close("dweight of 1000 rows", &dw1, &to_f32(&dw_want), 1e-4, 1e-5);
}

#[test]
fn layernorm_rejects_bad_shapes_and_storages() {
    let ctx = ctx();
    let x = Tensor::zeros(ctx, &[4, 8], DType::F32);
    let w = Tensor::zeros(ctx, &[8], DType::F32);
    let y = Tensor::zeros(ctx, &[4, 8], DType::F32);
    let stat = Tensor::zeros(ctx, &[4], DType::F32);
    let x3 = Tensor::zeros(ctx, &[2, 2, 8], DType::F32);
    common::expect_err(
        layernorm_forward(ctx, &x3, &w, None, &x3, &stat, &stat, EPS),
        &["must be a 2-D view"],
    );
    let w7 = Tensor::zeros(ctx, &[7], DType::F32);
    common::expect_err(
        layernorm_forward(ctx, &x, &w7, None, &y, &stat, &stat, EPS),
        &["weight [7] must hold 8 elements"],
    );
    let stat16 = Tensor::zeros(ctx, &[4], DType::F16);
    common::expect_err(
        layernorm_forward(ctx, &x, &w, None, &y, &stat16, &stat, EPS),
        &["mean must be stored as f32, not f16"],
    );
    let dw16 = Tensor::zeros(ctx, &[8], DType::BF16);
    common::expect_err(
        layernorm_backward(ctx, &y, &x, &w, &stat, &stat, &y, &dw16, None),
        &["dweight must be stored as f32, not bf16"],
    );
    // mean and rstd in one buffer would be two writable bindings of one range: refused.
    common::expect_err(
        layernorm_forward(ctx, &x, &w, None, &y, &stat, &stat, EPS),
        &["as `mean_out` (writable", "WebGPU forbids"],
    );
    let rstd = Tensor::zeros(ctx, &[4], DType::F32);
    assert!(layernorm_forward(ctx, &x, &w, None, &y, &stat, &rstd, EPS).is_ok());
}
