//! RMSNorm (`ops::layernorm::rmsnorm_*`, transformers' `LlamaRMSNorm`) against f64 CPU
//! references on f32, native f16, packed f16 and bf16 storages: the forward with its cast of
//! x̂ to x's dtype before the weight (shown to matter), the backward (analytic reference and
//! finite differences), the fusions LayerNorm has (the residual add before it, the
//! input gradient's low copy and accumulation: the bits of the kernels they replace),
//! deterministic weight gradients and the shape errors.

mod common;

use common::values::{quantised, run, storages, ulp, upload};
use common::{assert_close, bits, ctx, expect_err, rand_vec};
use webgpu_amp::ops::elementwise;
use webgpu_amp::ops::layernorm::{
    InputGrad, rmsnorm_backward_into, rmsnorm_forward, rmsnorm_forward_add,
};
use webgpu_amp::{DType, GpuContext, Tensor};

/// SmolLM2's `rms_norm_eps`.
const EPS: f32 = 1e-5;

/// transformers' LlamaRMSNorm in f64, with its cast: `rstd = 1/sqrt(mean(x²) + eps)`,
/// `c = (x · rstd).to(x_dtype)`, `y = w · c`. Returns (y, c, rstd).
fn rms_forward_ref(x: &[f32], w: &[f32], cols: usize, x_dtype: DType) -> RmsRef {
    let rows = x.len() / cols;
    let mut r = RmsRef {
        y: vec![0.0; x.len()],
        cast: vec![0.0; x.len()],
        rstd: vec![0.0; rows],
    };
    for row in 0..rows {
        let xs = &x[row * cols..(row + 1) * cols];
        let ms = xs.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / cols as f64;
        let rstd = 1.0 / (ms + EPS as f64).sqrt();
        for c in 0..cols {
            let xhat = xs[c] as f64 * rstd;
            let cast = x_dtype.round(xhat as f32) as f64;
            r.cast[row * cols + c] = cast;
            r.y[row * cols + c] = w[c] as f64 * cast;
        }
        r.rstd[row] = rstd;
    }
    r
}

struct RmsRef {
    y: Vec<f64>,
    cast: Vec<f64>,
    rstd: Vec<f64>,
}

/// The backward in f64 as autograd forms it: (dx, dweight). `g = dy · w` in x's dtype, `dx =
/// rstd (g − x̂ mean(g x̂))`, `dweight = Σ dy · c`.
fn rms_backward_ref(
    dy: &[f32],
    x: &[f32],
    w: &[f32],
    cols: usize,
    x_dtype: DType,
) -> (Vec<f64>, Vec<f64>) {
    let f = rms_forward_ref(x, w, cols, x_dtype);
    let mut dx = vec![0.0; x.len()];
    let mut dw = vec![0.0; cols];
    for row in 0..x.len() / cols {
        let i0 = row * cols;
        let rs = f.rstd[row];
        let xhat: Vec<f64> = (0..cols).map(|c| x[i0 + c] as f64 * rs).collect();
        let g: Vec<f64> = (0..cols)
            .map(|c| x_dtype.round(dy[i0 + c] * w[c]) as f64)
            .collect();
        let mgx = g.iter().zip(&xhat).map(|(a, b)| a * b).sum::<f64>() / cols as f64;
        for c in 0..cols {
            dx[i0 + c] = rs * (g[c] - xhat[c] * mgx);
            dw[c] += dy[i0 + c] as f64 * f.cast[i0 + c];
        }
    }
    (dx, dw)
}

fn to_f32(v: &[f64]) -> Vec<f32> {
    v.iter().map(|&x| x as f32).collect()
}

/// One GPU forward: (y, rstd).
fn gpu_forward(
    ctx: &GpuContext,
    (xv, wv): (&[f32], &[f32]),
    (rows, cols): (usize, usize),
    (act, param, out): (DType, DType, DType),
) -> (Vec<f32>, Vec<f32>) {
    let x = upload(ctx, xv, &[rows, cols], act);
    let w = upload(ctx, wv, &[cols], param);
    let y = Tensor::zeros(ctx, &[rows, cols], out);
    let rstd = Tensor::zeros(ctx, &[rows], DType::F32);
    run(
        ctx,
        &[rmsnorm_forward(ctx, &x, &w, &y, &rstd, EPS).unwrap()],
    );
    (y.read_f32(ctx).unwrap(), rstd.read_f32(ctx).unwrap())
}

#[test]
fn rmsnorm_forward_matches_transformers_on_every_storage() {
    // Odd C: rows of packed storages start mid-word.
    for (name, ctx, act) in storages() {
        for param in [DType::F32, act] {
            for (rows, cols) in [(5usize, 37usize), (3, 64), (1, 1)] {
                let xv: Vec<f32> = quantised(rows * cols, 1, 2.0, act)
                    .iter()
                    .enumerate()
                    .map(|(i, &v)| act.round(v + (i / cols) as f32 * 0.5))
                    .collect();
                let wv = quantised(cols, 2, 1.5, param);
                let (y, rstd) = gpu_forward(ctx, (&xv, &wv), (rows, cols), (act, param, act));
                let want = rms_forward_ref(&xv, &wv, cols, act);
                let what = format!("{name} x={act} w={param} [{rows}, {cols}]");
                // The f32 rstd may flip the rounding of x̂ (one unit of x's dtype), then y's.
                let tol = 2.0 * ulp(act) + 4e-6;
                assert_close(&format!("{what} y"), &y, &to_f32(&want.y), 1e-6, tol);
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

/// `.to(input_dtype)` comes before the weight: with x in bf16 and y in f32 (bf16 would
/// round the difference away), y is w · round(x̂), not w · x̂.
#[test]
fn rmsnorm_casts_before_the_weight() {
    let ctx = ctx();
    let (rows, cols) = (4, 64);
    let xv = quantised(rows * cols, 3, 2.0, DType::BF16);
    let wv = quantised(cols, 4, 1.5, DType::F32);
    let (y, _) = gpu_forward(
        ctx,
        (&xv, &wv),
        (rows, cols),
        (DType::BF16, DType::F32, DType::F32),
    );
    let cast = rms_forward_ref(&xv, &wv, cols, DType::BF16);
    let plain = rms_forward_ref(&xv, &wv, cols, DType::F32);
    // Within a bf16 unit where the f32 rstd flips x̂'s rounding, else f32 rounding.
    let off_cast = y
        .iter()
        .zip(&cast.y)
        .filter(|(g, w)| (**g as f64 - **w).abs() > 1e-6 * w.abs());
    let flips = off_cast.count();
    assert!(
        flips <= 2,
        "{flips} of {} elements are not w · round(x̂)",
        y.len()
    );
    let off_plain = y
        .iter()
        .zip(&plain.y)
        .filter(|(g, w)| (**g as f64 - **w).abs() > 1e-6 * w.abs());
    assert!(
        off_plain.count() > y.len() / 2,
        "y looks like w · x̂ without the cast"
    );
}

/// Forward then backward on the GPU: (dx, dweight) with dweight accumulated onto `prev_w`.
fn gpu_backward(
    ctx: &GpuContext,
    (dyv, xv, wv): (&[f32], &[f32], &[f32]),
    (rows, cols): (usize, usize),
    (act, param): (DType, DType),
    prev_w: &[f32],
) -> (Vec<f32>, Vec<f32>) {
    let x = upload(ctx, xv, &[rows, cols], act);
    let w = upload(ctx, wv, &[cols], param);
    let dy = upload(ctx, dyv, &[rows, cols], act);
    let y = Tensor::zeros(ctx, &[rows, cols], act);
    let rstd = Tensor::zeros(ctx, &[rows], DType::F32);
    let dx = Tensor::zeros(ctx, &[rows, cols], act);
    let dw = upload(ctx, prev_w, &[cols], DType::F32);
    let mut ks = vec![rmsnorm_forward(ctx, &x, &w, &y, &rstd, EPS).unwrap()];
    let place = InputGrad {
        dx: &dx,
        accumulate: false,
        low_copy: None,
    };
    ks.extend(rmsnorm_backward_into(ctx, (&dy, &x, &w), &rstd, place, &dw).unwrap());
    run(ctx, &ks);
    (dx.read_f32(ctx).unwrap(), dw.read_f32(ctx).unwrap())
}

#[test]
fn rmsnorm_backward_matches_the_analytic_reference_on_every_storage() {
    // 100 rows: 4 chunks of 32 rows in the weight-gradient reduction (the last one partial).
    for (name, ctx, act) in storages() {
        for param in [DType::F32, act] {
            for (rows, cols) in [(100usize, 37usize), (2, 64)] {
                let xv = quantised(rows * cols, 11, 2.0, act);
                let wv = quantised(cols, 12, 1.5, param);
                let dyv = quantised(rows * cols, 13, 1.0, act);
                let prev_w = quantised(cols, 14, 1.0, DType::F32);
                let (dx, dw) =
                    gpu_backward(ctx, (&dyv, &xv, &wv), (rows, cols), (act, param), &prev_w);
                let (dx_want, dw_want) = rms_backward_ref(&dyv, &xv, &wv, cols, act);
                let what = format!("{name} x={act} w={param} [{rows}, {cols}]");
                let tol = ulp(act).max(1e-5);
                assert_close(&format!("{what} dx"), &dx, &to_f32(&dx_want), 5e-5, tol);
                let acc: Vec<f32> = dw_want
                    .iter()
                    .zip(&prev_w)
                    .map(|(w, p)| (w + *p as f64) as f32)
                    .collect();
                // f32 sums of 100 terms of size <= ~4 (x̂'s cast may flip a unit of x's dtype).
                assert_close(&format!("{what} dweight"), &dw, &acc, 1e-4, tol);
            }
        }
    }
}

#[test]
fn rmsnorm_gradients_match_finite_differences_f32() {
    // L = sum(R * rmsnorm(x; w)) in f64 on the CPU: dL/dy = R.
    let (rows, cols) = (3usize, 8usize);
    let xv = rand_vec(rows * cols, 21);
    let wv: Vec<f32> = rand_vec(cols, 22).iter().map(|v| v + 1.5).collect();
    let r = rand_vec(rows * cols, 24);
    let loss = |x: &[f64], w: &[f64]| -> f64 {
        let mut l = 0.0;
        for row in 0..rows {
            let xs = &x[row * cols..(row + 1) * cols];
            let ms = xs.iter().map(|v| v * v).sum::<f64>() / cols as f64;
            let rstd = 1.0 / (ms + EPS as f64).sqrt();
            for c in 0..cols {
                l += r[row * cols + c] as f64 * (w[c] * (xs[c] * rstd));
            }
        }
        l
    };
    let f64s = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<_>>();
    let (x64, w64) = (f64s(&xv), f64s(&wv));
    let h = 1e-5;
    let fd = |which: usize, i: usize| -> f32 {
        let mut args = [x64.clone(), w64.clone()];
        args[which][i] += h;
        let up = loss(&args[0], &args[1]);
        args[which][i] -= 2.0 * h;
        let down = loss(&args[0], &args[1]);
        ((up - down) / (2.0 * h)) as f32
    };
    let fd_dx: Vec<f32> = (0..rows * cols).map(|i| fd(0, i)).collect();
    let fd_dw: Vec<f32> = (0..cols).map(|i| fd(1, i)).collect();
    let zeros = vec![0.0; cols];
    let f32s = (DType::F32, DType::F32);
    let (dx, dw) = gpu_backward(ctx(), (&r, &xv, &wv), (rows, cols), f32s, &zeros);
    assert_close("dx vs finite differences", &dx, &fd_dx, 1e-4, 1e-4);
    assert_close("dweight vs finite differences", &dw, &fd_dw, 1e-4, 1e-4);
}

#[test]
fn rmsnorm_fusions_give_the_bits_of_the_kernels_they_replace() {
    let (rows, cols) = (70, 37); // three chunks of rows: 32, 32, 6
    let n = rows * cols;
    for (name, ctx, low) in storages() {
        // The residual add before it: the sum and y of `add` then `rmsnorm_forward`.
        for stream in [DType::F32, low] {
            let a = upload(ctx, &quantised(n, 1, 3.0, stream), &[rows, cols], stream);
            let b = upload(ctx, &quantised(n, 2, 3.0, low), &[rows, cols], low);
            let w = upload(
                ctx,
                &quantised(cols, 3, 1.0, DType::F32),
                &[cols],
                DType::F32,
            );
            let outputs = || {
                (
                    Tensor::zeros(ctx, &[rows, cols], stream),
                    Tensor::zeros(ctx, &[rows, cols], low),
                    Tensor::zeros(ctx, &[rows], DType::F32),
                )
            };
            let (sum1, y1, r1) = outputs();
            let add = elementwise::add(ctx, &a, &b, &sum1).unwrap();
            run(
                ctx,
                &[add, rmsnorm_forward(ctx, &sum1, &w, &y1, &r1, EPS).unwrap()],
            );
            let (sum2, y2, r2) = outputs();
            let fused = rmsnorm_forward_add(ctx, (&a, &b), &sum2, &w, (&y2, &r2), EPS);
            run(ctx, &[fused.unwrap()]);
            let read = |t: &Tensor| bits(&t.read_f32(ctx).unwrap());
            let what = format!("{name}, stream {stream:?}");
            assert_eq!(read(&sum1), read(&sum2), "{what}: the sum");
            assert_eq!(read(&y1), read(&y2), "{what}: y");
            assert_eq!(read(&r1), read(&r2), "{what}: rstd");
        }
        // The input gradient's low copy (= the backward, then `cast`), accumulated or not.
        for accumulate in [false, true] {
            let x = upload(
                ctx,
                &quantised(n, 5, 2.0, DType::F32),
                &[rows, cols],
                DType::F32,
            );
            let dy = upload(ctx, &quantised(n, 6, 1.0, low), &[rows, cols], low);
            let w = upload(
                ctx,
                &quantised(cols, 7, 1.0, DType::F32),
                &[cols],
                DType::F32,
            );
            let skip = quantised(n, 8, 1.0, DType::F32);
            let y = Tensor::zeros(ctx, &[rows, cols], low);
            let rstd = Tensor::zeros(ctx, &[rows], DType::F32);
            let grads = |copy: Option<&Tensor>, accumulate: bool| {
                let dx = upload(ctx, &skip, &[rows, cols], DType::F32);
                let dw = Tensor::zeros(ctx, &[cols], DType::F32);
                let place = InputGrad {
                    dx: &dx,
                    accumulate,
                    low_copy: copy,
                };
                let mut ks = vec![rmsnorm_forward(ctx, &x, &w, &y, &rstd, EPS).unwrap()];
                ks.extend(rmsnorm_backward_into(ctx, (&dy, &x, &w), &rstd, place, &dw).unwrap());
                (ks, dx, dw)
            };
            let cast_out = Tensor::zeros(ctx, &[rows, cols], low);
            let (mut ks, dx1, dw1) = grads(None, accumulate);
            ks.push(elementwise::cast(ctx, &dx1, &cast_out).unwrap());
            run(ctx, &ks);
            let copy = Tensor::zeros(ctx, &[rows, cols], low);
            let (ks, dx2, dw2) = grads(Some(&copy), accumulate);
            run(ctx, &ks);
            let read = |t: &Tensor| t.read_f32(ctx).unwrap();
            let what = format!("{name}, accumulate {accumulate}");
            assert_eq!(bits(&read(&dx1)), bits(&read(&dx2)), "{what}: dx");
            assert_eq!(
                bits(&read(&cast_out)),
                bits(&read(&copy)),
                "{what}: the low copy"
            );
            assert_eq!(bits(&read(&dw1)), bits(&read(&dw2)), "{what}: dweight");
            if accumulate {
                // dx landed on the skip connection's gradient (f32: one rounding).
                let (ks, fresh, _) = grads(None, false);
                run(ctx, &ks);
                let want: Vec<f32> = read(&fresh).iter().zip(&skip).map(|(a, b)| a + b).collect();
                assert_eq!(bits(&read(&dx2)), bits(&want), "{what}: dx + skip");
            }
        }
    }
}

#[test]
fn rmsnorm_weight_gradients_are_deterministic() {
    // 1000 rows: 32 chunks of 32 rows. Two runs from the same state give the same bits.
    let ctx = ctx();
    let (rows, cols) = (1000usize, 48usize);
    let xv = rand_vec(rows * cols, 31);
    let wv = rand_vec(cols, 32);
    let dyv = rand_vec(rows * cols, 33);
    let zeros = vec![0.0; cols];
    let f32s = (DType::F32, DType::F32);
    let run_once = || gpu_backward(ctx, (&dyv, &xv, &wv), (rows, cols), f32s, &zeros);
    let (dx1, dw1) = run_once();
    let (dx2, dw2) = run_once();
    assert_eq!(bits(&dw1), bits(&dw2), "dweight bits");
    assert_eq!(bits(&dx1), bits(&dx2), "dx bits");
    let (_, dw_want) = rms_backward_ref(&dyv, &xv, &wv, cols, DType::F32);
    assert_close("dweight of 1000 rows", &dw1, &to_f32(&dw_want), 1e-4, 1e-5);
}

#[test]
fn rmsnorm_rejects_bad_shapes_and_storages() {
    let ctx = ctx();
    let x = Tensor::zeros(ctx, &[4, 8], DType::F32);
    let w = Tensor::zeros(ctx, &[8], DType::F32);
    let y = Tensor::zeros(ctx, &[4, 8], DType::F32);
    let rstd = Tensor::zeros(ctx, &[4], DType::F32);
    let x3 = Tensor::zeros(ctx, &[2, 2, 8], DType::F32);
    expect_err(
        rmsnorm_forward(ctx, &x3, &w, &x3, &rstd, EPS),
        &["rmsnorm_forward", "must be a 2-D view"],
    );
    let w7 = Tensor::zeros(ctx, &[7], DType::F32);
    expect_err(
        rmsnorm_forward(ctx, &x, &w7, &y, &rstd, EPS),
        &["weight [7] must hold 8 elements"],
    );
    let rstd16 = Tensor::zeros(ctx, &[4], DType::F16);
    expect_err(
        rmsnorm_forward(ctx, &x, &w, &y, &rstd16, EPS),
        &["rstd must be stored as f32, not f16"],
    );
    expect_err(
        rmsnorm_forward(ctx, &x, &w, &y, &rstd, f32::NAN),
        &["eps must be finite"],
    );
    let dw16 = Tensor::zeros(ctx, &[8], DType::BF16);
    let place = InputGrad {
        dx: &y,
        accumulate: false,
        low_copy: None,
    };
    expect_err(
        rmsnorm_backward_into(ctx, (&y, &x, &w), &rstd, place, &dw16),
        &[
            "rmsnorm_backward",
            "dweight must be stored as f32, not bf16",
        ],
    );
    assert!(rmsnorm_forward(ctx, &x, &w, &y, &rstd, EPS).is_ok());
}
