//! Selftest families of dense ops: matmul (every SIMT body), conv, max pooling, the
//! elementwise ops, reductions and the activations of the unary table.

use super::reference::{self, Conv};
use super::{Case, Checker, run, upload, values};
use crate::dtype::DType;
use crate::error::Result;
use crate::ops::conv::{
    Conv2dParams, conv2d_backward_input, conv2d_backward_weight, conv2d_forward,
};
use crate::ops::matmul::{MatmulKernel, MatmulOpts, matmul_with};
use crate::ops::pool::{Pool2dParams, indices_buffer, maxpool2d_backward, maxpool2d_forward};
use crate::ops::{Accumulate, elementwise, reduce, unary};
use crate::tensor::Tensor;

pub(crate) fn check_all(checker: &mut Checker, case: &Case) -> Result<()> {
    checker.run(
        case,
        &[matmul, conv, pool, elementwise, reductions, activations],
    )
}

/// The bodies to run: the one `auto` picks, and both SIMT bodies where they may run (GL
/// serialises every invocation of a workgroup on a CPU adapter: the tiled body only there on
/// a GPU).
fn matmul_bodies(case: &Case) -> Vec<MatmulKernel> {
    if case.ctx.report.backend == "gl" {
        vec![MatmulKernel::Auto]
    } else {
        vec![
            MatmulKernel::Auto,
            MatmulKernel::Tiled,
            MatmulKernel::Direct,
        ]
    }
}

/// A Linear's three products: `y = x·w + b` forward, `dx = dy·wᵀ` and `dw = xᵀ·dy` backward.
fn matmul(checker: &mut Checker, case: &Case) -> Result<()> {
    let (ctx, dt) = (case.ctx, case.dtype);
    let (m, k, n) = (13, 37, 11);
    let x = values(m * k, 1, 1.0, dt);
    let w = values(k * n, 2, 1.0, dt);
    let b = values(n, 3, 1.0, dt);
    let dy = values(m * n, 4, 1.0, dt);
    let (xt, wt, bt, dyt) = (
        upload(ctx, &x, &[m, k], dt)?,
        upload(ctx, &w, &[k, n], dt)?,
        upload(ctx, &b, &[n], dt)?,
        upload(ctx, &dy, &[m, n], dt)?,
    );
    let want_y = reference::matmul(&x, &w, Some(&b), m, k, n);
    let want_dx = reference::matmul(&dy, &reference::transpose(&w, k, n), None, m, n, k);
    let want_dw = reference::matmul(&reference::transpose(&x, m, k), &dy, None, k, m, n);
    for body in matmul_bodies(case) {
        let y = Tensor::zeros(ctx, &[m, n], dt);
        let dx = Tensor::zeros(ctx, &[m, k], dt);
        let dw = Tensor::zeros(ctx, &[k, n], DType::F32);
        let forward = MatmulOpts {
            bias: Some(&bt),
            ..Default::default()
        };
        let input_grad = MatmulOpts {
            trans_b: true,
            ..Default::default()
        };
        let weight_grad = MatmulOpts {
            trans_a: true,
            ..Default::default()
        };
        let kernels = vec![
            matmul_with(ctx, &xt, &wt, &y, forward, body)?,
            matmul_with(ctx, &dyt, &wt, &dx, input_grad, body)?,
            matmul_with(ctx, &xt, &dyt, &dw, weight_grad, body)?,
        ];
        run(ctx, &kernels)?;
        let name = body.name();
        checker.compare(
            "matmul",
            &format!("{name} forward"),
            case,
            &y.read_f32(ctx)?,
            &want_y,
        );
        checker.compare(
            "matmul",
            &format!("{name} backward dx"),
            case,
            &dx.read_f32(ctx)?,
            &want_dx,
        );
        checker.compare(
            "matmul",
            &format!("{name} backward dw"),
            case,
            &dw.read_f32(ctx)?,
            &want_dw,
        );
    }
    Ok(())
}

/// Conv2d forward (with bias), input gradient and weight gradient, padded and strided.
fn conv(checker: &mut Checker, case: &Case) -> Result<()> {
    let (ctx, dt) = (case.ctx, case.dtype);
    for d in [
        Conv {
            n: 2,
            c: 3,
            h: 9,
            w: 7,
            o: 5,
            k: 3,
            stride: 1,
            padding: 1,
        },
        Conv {
            n: 1,
            c: 2,
            h: 8,
            w: 8,
            o: 4,
            k: 5,
            stride: 2,
            padding: 0,
        },
    ] {
        let (ho, wo) = d.out_hw();
        let x = values(d.n * d.c * d.h * d.w, 5, 1.0, dt);
        let w = values(d.o * d.c * d.k * d.k, 6, 0.5, dt);
        let b = values(d.o, 7, 1.0, dt);
        let dy = values(d.n * d.o * ho * wo, 8, 1.0, dt);
        let xt = upload(ctx, &x, &[d.n, d.c, d.h, d.w], dt)?;
        let wt = upload(ctx, &w, &[d.o, d.c, d.k, d.k], dt)?;
        let bt = upload(ctx, &b, &[d.o], dt)?;
        let dyt = upload(ctx, &dy, &[d.n, d.o, ho, wo], dt)?;
        let y = Tensor::zeros(ctx, &[d.n, d.o, ho, wo], dt);
        let dx = Tensor::zeros(ctx, &[d.n, d.c, d.h, d.w], dt);
        let dw = Tensor::zeros(ctx, &[d.o, d.c, d.k, d.k], DType::F32);
        let p = Conv2dParams {
            stride: d.stride,
            padding: d.padding,
        };
        let mut kernels = vec![
            conv2d_forward(ctx, &xt, &wt, Some(&bt), &y, p)?,
            conv2d_backward_input(ctx, &dyt, &wt, &dx, p)?,
        ];
        kernels.extend(conv2d_backward_weight(
            ctx,
            &xt,
            &dyt,
            &dw,
            p,
            Accumulate::Overwrite,
            None,
        )?);
        run(ctx, &kernels)?;
        let k = format!("{0}x{0} stride {1} padding {2}", d.k, d.stride, d.padding);
        checker.compare(
            "conv",
            &format!("{k} forward"),
            case,
            &y.read_f32(ctx)?,
            &d.forward(&x, &w, &b),
        );
        let want = d.backward_input(&dy, &w);
        checker.compare(
            "conv",
            &format!("{k} backward dx"),
            case,
            &dx.read_f32(ctx)?,
            &want,
        );
        let want = d.backward_weight(&x, &dy);
        checker.compare(
            "conv",
            &format!("{k} backward dw"),
            case,
            &dw.read_f32(ctx)?,
            &want,
        );
    }
    Ok(())
}

/// MaxPool2d 2x2 forward and backward, on distinct inputs (no ties to break).
fn pool(checker: &mut Checker, case: &Case) -> Result<()> {
    let (ctx, dt) = (case.ctx, case.dtype);
    let (planes, h, w, k) = (2, 8, 6, 2);
    // Distinct multiples of 1/64 up to ±1 (exact in every dtype), in a scrambled order.
    let x: Vec<f32> = (0..planes * h * w)
        .map(|i| ((i * 37) % (planes * h * w)) as f32 / 64.0 - 0.75)
        .collect();
    let (want_y, at) = reference::maxpool(&x, planes, h, w, k, k);
    let dy = values(want_y.len(), 9, 1.0, dt);
    let mut want_dx = vec![0.0; x.len()];
    for (o, &i) in at.iter().enumerate() {
        want_dx[i] += dy[o] as f64;
    }
    let xt = upload(ctx, &x, &[1, planes, h, w], dt)?;
    let y = Tensor::zeros(ctx, &[1, planes, h / k, w / k], dt);
    let dyt = upload(ctx, &dy, &[1, planes, h / k, w / k], dt)?;
    let dx = Tensor::zeros(ctx, &[1, planes, h, w], dt);
    let indices = indices_buffer(ctx, want_y.len());
    let p = Pool2dParams {
        kernel: k,
        stride: k,
    };
    let kernels = [
        maxpool2d_forward(ctx, &xt, &y, &indices, p)?,
        maxpool2d_backward(ctx, &dyt, &indices, &dx, p)?,
    ];
    run(ctx, &kernels)?;
    checker.compare("pool", "maxpool forward", case, &y.read_f32(ctx)?, &want_y);
    checker.compare(
        "pool",
        "maxpool backward",
        case,
        &dx.read_f32(ctx)?,
        &want_dx,
    );
    Ok(())
}

/// add, mul, scale, bias_add and cast forward; accumulate (the residual's gradient sum).
fn elementwise(checker: &mut Checker, case: &Case) -> Result<()> {
    let (ctx, dt) = (case.ctx, case.dtype);
    let (rows, cols) = (7, 9);
    let n = rows * cols;
    let x = values(n, 10, 2.0, dt);
    let y = values(n, 11, 2.0, dt);
    let b = values(cols, 12, 1.0, dt);
    let (xt, yt, bt) = (
        upload(ctx, &x, &[rows, cols], dt)?,
        upload(ctx, &y, &[rows, cols], dt)?,
        upload(ctx, &b, &[cols], dt)?,
    );
    let outs: Vec<Tensor> = (0..5)
        .map(|_| Tensor::zeros(ctx, &[rows, cols], dt))
        .collect();
    let acc = upload(ctx, &y, &[rows, cols], DType::F32)?;
    let kernels = [
        elementwise::add(ctx, &xt, &yt, &outs[0])?,
        elementwise::mul(ctx, &xt, &yt, &outs[1])?,
        elementwise::scale(ctx, &xt, 0.375, &outs[2])?,
        elementwise::bias_add(ctx, &xt, &bt, &outs[3])?,
        elementwise::cast(ctx, &acc, &outs[4])?,
        elementwise::accumulate(ctx, &xt, &acc)?,
    ];
    run(ctx, &kernels)?;
    let pair = |f: fn(f64, f64) -> f64| -> Vec<f64> {
        x.iter()
            .zip(&y)
            .map(|(&a, &b)| f(a as f64, b as f64))
            .collect()
    };
    let wants = [
        ("add", pair(|a, b| a + b)),
        ("mul", pair(|a, b| a * b)),
        ("scale", x.iter().map(|&a| 0.375 * a as f64).collect()),
        (
            "bias_add",
            x.iter()
                .enumerate()
                .map(|(i, &a)| a as f64 + b[i % cols] as f64)
                .collect(),
        ),
        ("cast", y.iter().map(|&a| a as f64).collect()),
    ];
    for ((what, want), out) in wants.iter().zip(&outs) {
        checker.compare("elementwise", what, case, &out.read_f32(ctx)?, want);
    }
    checker.compare(
        "elementwise",
        "accumulate",
        case,
        &acc.read_f32(ctx)?,
        &pair(|a, b| a + b),
    );
    Ok(())
}

/// sum and mean (forward), the bias gradient (the backward of bias_add), over positive
/// values (a sum that cancels to near zero has no relative error to speak of).
fn reductions(checker: &mut Checker, case: &Case) -> Result<()> {
    let (ctx, dt) = (case.ctx, case.dtype);
    let (rows, cols) = (300, 13);
    let x: Vec<f32> = values(rows * cols, 13, 1.0, dt)
        .iter()
        .map(|v| v.abs())
        .collect();
    let xt = upload(ctx, &x, &[rows, cols], dt)?;
    let (sum, mean) = (
        Tensor::zeros(ctx, &[1], DType::F32),
        Tensor::zeros(ctx, &[1], DType::F32),
    );
    let db = Tensor::zeros(ctx, &[cols], DType::F32);
    let mut kernels = reduce::sum(ctx, &xt, &sum)?;
    kernels.extend(reduce::mean(ctx, &xt, &mean)?);
    kernels.push(reduce::bias_grad(
        ctx,
        &xt,
        &db,
        Accumulate::Overwrite,
        None,
    )?);
    run(ctx, &kernels)?;
    let total: f64 = x.iter().map(|&v| v as f64).sum();
    checker.compare("reduce", "sum", case, &sum.read_f32(ctx)?, &[total]);
    checker.compare(
        "reduce",
        "mean",
        case,
        &mean.read_f32(ctx)?,
        &[total / x.len() as f64],
    );
    let want_db: Vec<f64> = (0..cols)
        .map(|c| (0..rows).map(|r| x[r * cols + c] as f64).sum())
        .collect();
    checker.compare(
        "reduce",
        "bias gradient",
        case,
        &db.read_f32(ctx)?,
        &want_db,
    );
    Ok(())
}

/// Every row of the unary table, forward and backward, over [-4, 4].
fn activations(checker: &mut Checker, case: &Case) -> Result<()> {
    let (ctx, dt) = (case.ctx, case.dtype);
    let n = 257;
    let x = values(n, 14, 4.0, dt);
    let dy = values(n, 15, 1.0, dt);
    let (xt, dyt) = (upload(ctx, &x, &[n], dt)?, upload(ctx, &dy, &[n], dt)?);
    for op in unary::UNARY_OPS {
        let (y, dx) = (Tensor::zeros(ctx, &[n], dt), Tensor::zeros(ctx, &[n], dt));
        let kernels = [
            unary::forward(ctx, op, &xt, &y)?,
            unary::backward(ctx, op, &xt, &dyt, &dx)?,
        ];
        run(ctx, &kernels)?;
        let (mut want_y, mut want_dx) = (Vec::new(), Vec::new());
        for (&v, &g) in x.iter().zip(&dy) {
            // A row without a reference here fails its checks (an empty reference).
            if let Some((f, d)) = reference::unary(op.name, v as f64) {
                want_y.push(f);
                want_dx.push(d * g as f64);
            }
        }
        checker.compare(
            "unary",
            &format!("{} forward", op.name),
            case,
            &y.read_f32(ctx)?,
            &want_y,
        );
        checker.compare(
            "unary",
            &format!("{} backward", op.name),
            case,
            &dx.read_f32(ctx)?,
            &want_dx,
        );
    }
    Ok(())
}
