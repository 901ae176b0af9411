//! Selftest families of the CNN ops: BatchNorm (training forward on batch statistics with the
//! running update, eval forward on the running statistics, backward) and average pooling
//! (windows and adaptive bins, forward and backward), with their f64 references.

use super::{Case, Checker, run, upload, values};
use crate::dtype::DType;
use crate::error::Result;
use crate::ops::avgpool::{self, AvgPool};
use crate::ops::batchnorm::{Affine, BatchNorm, RunningStats};
use crate::tensor::Tensor;

pub(crate) fn check_all(checker: &mut Checker, case: &Case) -> Result<()> {
    checker.run(case, &[batchnorm, avgpool])
}

const EPS: f64 = 1e-5;

/// Per-channel (mean, biased variance) of `x [n, c, s]`.
fn channel_stats(x: &[f32], (n, c, s): (usize, usize, usize)) -> Vec<(f64, f64)> {
    (0..c)
        .map(|ch| {
            let vals: Vec<f64> = (0..n)
                .flat_map(|i| x[(i * c + ch) * s..][..s].iter().map(|&v| v as f64))
                .collect();
            let m = vals.len() as f64;
            let mean = vals.iter().sum::<f64>() / m;
            (
                mean,
                vals.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / m,
            )
        })
        .collect()
}

/// BatchNorm2d: the training forward (its output and the running statistics it updates from
/// PyTorch's initial values), the eval forward on them, and the backward.
fn batchnorm(checker: &mut Checker, case: &Case) -> Result<()> {
    let (ctx, dt) = (case.ctx, case.dtype);
    let dims @ (n, c, s) = (3, 4, 5 * 3);
    let shape = [n, c, 5, 3];
    let x: Vec<f32> = values(n * c * s, 40, 2.0, dt)
        .iter()
        .enumerate()
        .map(|(i, &v)| dt.round(v + ((i / s) % c) as f32 * 0.5))
        .collect();
    let (w, b, dy) = (
        values(c, 41, 1.5, DType::F32),
        values(c, 42, 1.0, DType::F32),
        values(x.len(), 43, 1.0, dt),
    );
    let xt = upload(ctx, &x, &shape, dt)?;
    let (wt, bt) = (
        upload(ctx, &w, &[c], DType::F32)?,
        upload(ctx, &b, &[c], DType::F32)?,
    );
    let dyt = upload(ctx, &dy, &shape, dt)?;
    let (y, y_eval, dx) = (
        Tensor::zeros(ctx, &shape, dt),
        Tensor::zeros(ctx, &shape, dt),
        Tensor::zeros(ctx, &shape, dt),
    );
    let saved = Tensor::zeros(ctx, &[2 * c], DType::F32);
    let (dw, db) = (
        Tensor::zeros(ctx, &[c], DType::F32),
        Tensor::zeros(ctx, &[c], DType::F32),
    );
    let running = RunningStats::new(ctx, "selftest running statistics", c)?;
    let affine = Affine {
        weight: Some(&wt),
        bias: Some(&bt),
    };
    let bn = BatchNorm::default();
    let mut kernels = bn.train_forward(ctx, (&xt, &y), affine, &saved, Some(&running))?;
    kernels.extend(bn.backward(
        ctx,
        (&xt, &dyt, &dx),
        affine,
        &saved,
        (Some(&dw), Some(&db)),
    )?);
    kernels.push(bn.eval_forward(ctx, (&xt, &y_eval), affine, &running)?);
    run(ctx, &kernels)?;

    let stats = channel_stats(&x, dims);
    let m = (n * s) as f64;
    let momentum = 0.1;
    let running_want: Vec<(f64, f64)> = stats
        .iter()
        .map(|&(mean, var)| {
            (
                momentum * mean,
                (1.0 - momentum) + momentum * var * m / (m - 1.0),
            )
        })
        .collect();
    let normalise = |st: &[(f64, f64)]| -> Vec<f64> {
        x.iter()
            .enumerate()
            .map(|(i, &v)| {
                let ch = (i / s) % c;
                (v as f64 - st[ch].0) / (st[ch].1 + EPS).sqrt() * w[ch] as f64 + b[ch] as f64
            })
            .collect()
    };
    checker.compare(
        "batchnorm",
        "train forward",
        case,
        &y.read_f32(ctx)?,
        &normalise(&stats),
    );
    let (rm, rv, _) = running.read(ctx)?;
    let got: Vec<f32> = rm.into_iter().chain(rv).collect();
    let want: Vec<f64> = running_want
        .iter()
        .map(|r| r.0)
        .chain(running_want.iter().map(|r| r.1))
        .collect();
    checker.compare("batchnorm", "running statistics", case, &got, &want);
    checker.compare(
        "batchnorm",
        "eval forward",
        case,
        &y_eval.read_f32(ctx)?,
        &normalise(&running_want),
    );

    // Backward: dx = (dy − mean(dy) − x̂ mean(dy x̂)) invstd w; dw = Σ dy x̂; db = Σ dy.
    let xhat = |i: usize| {
        let (mean, var) = stats[(i / s) % c];
        (x[i] as f64 - mean) / (var + EPS).sqrt()
    };
    let (mut want_dw, mut want_db) = (vec![0.0; c], vec![0.0; c]);
    for i in 0..x.len() {
        want_dw[(i / s) % c] += dy[i] as f64 * xhat(i);
        want_db[(i / s) % c] += dy[i] as f64;
    }
    let want_dx: Vec<f64> = (0..x.len())
        .map(|i| {
            let ch = (i / s) % c;
            let invstd = 1.0 / (stats[ch].1 + EPS).sqrt();
            (dy[i] as f64 - want_db[ch] / m - xhat(i) * want_dw[ch] / m) * invstd * w[ch] as f64
        })
        .collect();
    checker.compare(
        "batchnorm",
        "backward dx",
        case,
        &dx.read_f32(ctx)?,
        &want_dx,
    );
    checker.compare(
        "batchnorm",
        "backward dweight",
        case,
        &dw.read_f32(ctx)?,
        &want_dw,
    );
    checker.compare(
        "batchnorm",
        "backward dbias",
        case,
        &db.read_f32(ctx)?,
        &want_db,
    );
    Ok(())
}

/// `AvgPool2d(2)` on a plane that floor mode cuts, and `AdaptiveAvgPool2d((3, 2))` on one
/// whose bins overlap: forward and backward.
fn avgpool(checker: &mut Checker, case: &Case) -> Result<()> {
    let (ctx, dt) = (case.ctx, case.dtype);
    let (planes, h, w) = (3, 7, 5);
    let x = values(planes * h * w, 44, 1.0, dt);
    for (pool, what) in [
        (AvgPool::window(2), "window"),
        (
            AvgPool::Adaptive {
                height: 3,
                width: 2,
            },
            "adaptive",
        ),
    ] {
        let (ho, wo) = pool.output_hw(h, w)?;
        let dy = values(planes * ho * wo, 45, 1.0, dt);
        let xt = upload(ctx, &x, &[1, planes, h, w], dt)?;
        let dyt = upload(ctx, &dy, &[1, planes, ho, wo], dt)?;
        let y = Tensor::zeros(ctx, &[1, planes, ho, wo], dt);
        let dx = Tensor::zeros(ctx, &[1, planes, h, w], dt);
        run(
            ctx,
            &[
                avgpool::forward(ctx, &xt, &y, pool)?,
                avgpool::backward(ctx, &dyt, &dx, pool)?,
            ],
        )?;
        let bin = |o: usize, size: usize, outs: usize| match pool {
            AvgPool::Window { kernel, stride } => (o * stride, o * stride + kernel),
            AvgPool::Adaptive { .. } => (o * size / outs, ((o + 1) * size).div_ceil(outs)),
        };
        let (mut want_y, mut want_dx) = (Vec::new(), vec![0.0; x.len()]);
        for p in 0..planes {
            for oy in 0..ho {
                for ox in 0..wo {
                    let ((r0, r1), (c0, c1)) = (bin(oy, h, ho), bin(ox, w, wo));
                    let area = ((r1 - r0) * (c1 - c0)) as f64;
                    let cells =
                        (r0..r1).flat_map(|r| (c0..c1).map(move |col| (p * h + r) * w + col));
                    want_y.push(cells.clone().map(|i| x[i] as f64).sum::<f64>() / area);
                    for i in cells {
                        want_dx[i] += dy[(p * ho + oy) * wo + ox] as f64 / area;
                    }
                }
            }
        }
        checker.compare(
            "avgpool",
            &format!("{what} forward"),
            case,
            &y.read_f32(ctx)?,
            &want_y,
        );
        checker.compare(
            "avgpool",
            &format!("{what} backward"),
            case,
            &dx.read_f32(ctx)?,
            &want_dx,
        );
    }
    Ok(())
}
