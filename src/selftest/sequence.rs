//! Selftest families of the losses and the transformer's ops: cross-entropy and MSE (loss
//! and gradient), LayerNorm, the token and position embedding, the causal softmax of the
//! unfused attention and the fused attention (every SIMT body).

use std::sync::Arc;

use super::{Case, Checker, reference, run, upload, values};
use crate::dtype::DType;
use crate::error::Result;
use crate::gpu::{GpuBuffer, GpuContext};
use crate::ops::attention::{
    SoftmaxBody, SoftmaxParams, causal_softmax_backward, causal_softmax_forward,
};
use crate::ops::embedding::{embedding_backward, embedding_forward};
use crate::ops::flash_attention::{self, FlashBody, FlashParams};
use crate::ops::layernorm::{layernorm_backward, layernorm_forward};
use crate::ops::loss;
use crate::tensor::Tensor;

pub(crate) fn check_all(checker: &mut Checker, case: &Case) -> Result<()> {
    checker.run(case, &[losses, layernorm, embedding, softmax, attention])
}

/// A raw buffer of u32 words (labels, tokens).
fn words(ctx: &GpuContext, data: &[u32]) -> Arc<GpuBuffer> {
    let b = ctx.alloc_storage("selftest words", 4 * data.len().max(1) as u64);
    ctx.write_buffer(&b, 0, bytemuck::cast_slice(data));
    b
}

/// Whether both SIMT bodies of the attention kernels run here (see `dense::matmul_bodies`).
fn all_bodies(case: &Case) -> bool {
    case.ctx.report.backend != "gl"
}

/// Cross-entropy and MSE: the mean loss (f32) and the gradient of the prediction.
fn losses(checker: &mut Checker, case: &Case) -> Result<()> {
    let (ctx, dt) = (case.ctx, case.dtype);
    let (rows, classes) = (9, 10);
    let logits = values(rows * classes, 20, 3.0, dt);
    let labels: Vec<u32> = (0..rows as u32).map(|r| (r * 7) % classes as u32).collect();
    let target = values(rows * classes, 21, 1.0, DType::F32);
    let seed = words(ctx, &[1f32.to_bits()]);
    let lt = upload(ctx, &logits, &[rows, classes], dt)?;
    let tt = upload(ctx, &target, &[rows, classes], DType::F32)?;
    let (ce, ce_grad) = (
        Tensor::zeros(ctx, &[1], DType::F32),
        Tensor::zeros(ctx, &[rows, classes], dt),
    );
    let (mse, mse_grad) = (
        Tensor::zeros(ctx, &[1], DType::F32),
        Tensor::zeros(ctx, &[rows, classes], dt),
    );
    let mut kernels = loss::cross_entropy(
        ctx,
        &lt,
        &words(ctx, &labels),
        &ce,
        Some((&ce_grad, &seed, 1.0)),
    )?;
    kernels.extend(loss::mse(
        ctx,
        &lt,
        &tt,
        &mse,
        Some((&mse_grad, &seed, 1.0)),
    )?);
    run(ctx, &kernels)?;
    let (want, want_grad) = reference::cross_entropy(&logits, &labels, classes);
    checker.compare("loss", "cross-entropy", case, &ce.read_f32(ctx)?, &[want]);
    checker.compare(
        "loss",
        "cross-entropy gradient",
        case,
        &ce_grad.read_f32(ctx)?,
        &want_grad,
    );
    let (want, want_grad) = reference::mse(&logits, &target);
    checker.compare("loss", "mse", case, &mse.read_f32(ctx)?, &[want]);
    checker.compare(
        "loss",
        "mse gradient",
        case,
        &mse_grad.read_f32(ctx)?,
        &want_grad,
    );
    Ok(())
}

/// LayerNorm forward, and backward into dx and the weight and bias gradients.
fn layernorm(checker: &mut Checker, case: &Case) -> Result<()> {
    let (ctx, dt) = (case.ctx, case.dtype);
    let (rows, cols) = (6, 37);
    let x: Vec<f32> = values(rows * cols, 22, 2.0, dt)
        .iter()
        .enumerate()
        .map(|(i, &v)| dt.round(v + (i / cols) as f32 * 0.5))
        .collect();
    let (w, b, dy) = (
        values(cols, 23, 1.5, dt),
        values(cols, 24, 1.0, dt),
        values(rows * cols, 25, 1.0, dt),
    );
    let xt = upload(ctx, &x, &[rows, cols], dt)?;
    let (wt, bt) = (upload(ctx, &w, &[cols], dt)?, upload(ctx, &b, &[cols], dt)?);
    let dyt = upload(ctx, &dy, &[rows, cols], dt)?;
    let y = Tensor::zeros(ctx, &[rows, cols], dt);
    let (mean, rstd) = (
        Tensor::zeros(ctx, &[rows], DType::F32),
        Tensor::zeros(ctx, &[rows], DType::F32),
    );
    let dx = Tensor::zeros(ctx, &[rows, cols], dt);
    let (dw, db) = (
        Tensor::zeros(ctx, &[cols], DType::F32),
        Tensor::zeros(ctx, &[cols], DType::F32),
    );
    let mut kernels = vec![layernorm_forward(
        ctx,
        &xt,
        &wt,
        Some(&bt),
        &y,
        &mean,
        &rstd,
        1e-5,
    )?];
    kernels.extend(layernorm_backward(
        ctx,
        &dyt,
        &xt,
        &wt,
        &mean,
        &rstd,
        &dx,
        &dw,
        Some(&db),
    )?);
    run(ctx, &kernels)?;
    let want = reference::layernorm(&x, &w, &b, &dy, cols, 1e-5);
    checker.compare("layernorm", "forward", case, &y.read_f32(ctx)?, &want.y);
    checker.compare(
        "layernorm",
        "backward dx",
        case,
        &dx.read_f32(ctx)?,
        &want.dx,
    );
    checker.compare(
        "layernorm",
        "backward dweight",
        case,
        &dw.read_f32(ctx)?,
        &want.dw,
    );
    checker.compare(
        "layernorm",
        "backward dbias",
        case,
        &db.read_f32(ctx)?,
        &want.db,
    );
    Ok(())
}

/// Token plus position embedding, and the gradients of both tables (repeated tokens).
fn embedding(checker: &mut Checker, case: &Case) -> Result<()> {
    let (ctx, dt) = (case.ctx, case.dtype);
    let (batch, t, t_max, vocab, cols) = (3, 7, 9, 11, 6);
    let tokens: Vec<u32> = (0..(batch * t) as u32).map(|i| (i * 5 + 3) % 8).collect();
    let (wte, wpe) = (
        values(vocab * cols, 26, 1.0, dt),
        values(t_max * cols, 27, 1.0, dt),
    );
    let dy = values(batch * t * cols, 28, 1.0, dt);
    let tok = words(ctx, &tokens);
    let (wtet, wpet) = (
        upload(ctx, &wte, &[vocab, cols], dt)?,
        upload(ctx, &wpe, &[t_max, cols], dt)?,
    );
    let dyt = upload(ctx, &dy, &[batch, t, cols], dt)?;
    let y = Tensor::zeros(ctx, &[batch, t, cols], dt);
    let (dwte, dwpe) = (
        Tensor::zeros(ctx, &[vocab, cols], DType::F32),
        Tensor::zeros(ctx, &[t_max, cols], DType::F32),
    );
    let mut kernels = vec![embedding_forward(
        ctx,
        &tok,
        &wtet,
        Some(&wpet),
        &y,
        batch,
        t,
    )?];
    kernels.extend(embedding_backward(
        ctx,
        &tok,
        &dyt,
        &dwte,
        Some(&dwpe),
        batch,
        t,
    )?);
    run(ctx, &kernels)?;
    let (mut want_y, mut want_dwte, mut want_dwpe) = (
        vec![0.0; y.numel()],
        vec![0.0; vocab * cols],
        vec![0.0; t_max * cols],
    );
    for (i, &token) in tokens.iter().enumerate() {
        for c in 0..cols {
            let (v, p, g) = (
                token as usize * cols + c,
                (i % t) * cols + c,
                dy[i * cols + c] as f64,
            );
            want_y[i * cols + c] = wte[v] as f64 + wpe[p] as f64;
            want_dwte[v] += g;
            want_dwpe[p] += g;
        }
    }
    checker.compare("embedding", "forward", case, &y.read_f32(ctx)?, &want_y);
    checker.compare(
        "embedding",
        "backward token table",
        case,
        &dwte.read_f32(ctx)?,
        &want_dwte,
    );
    checker.compare(
        "embedding",
        "backward position table",
        case,
        &dwpe.read_f32(ctx)?,
        &want_dwpe,
    );
    Ok(())
}

/// The unfused attention's causal softmax, forward and backward, on each body.
fn softmax(checker: &mut Checker, case: &Case) -> Result<()> {
    let (ctx, dt) = (case.ctx, case.dtype);
    let (rows, t) = (2 * 2 * 13, 13);
    let scale = 1.0 / 8f32.sqrt();
    let s = values(rows * t, 29, 4.0, dt);
    let dpd = values(rows * t, 30, 1.0, dt);
    let (want_p, want_ds) = reference::causal_softmax(&s, &dpd, t, scale as f64);
    let (st, dpdt) = (
        upload(ctx, &s, &[rows, t], dt)?,
        upload(ctx, &dpd, &[rows, t], dt)?,
    );
    let mut bodies = vec![SoftmaxBody::Auto];
    if all_bodies(case) {
        bodies.extend([SoftmaxBody::Workgroup, SoftmaxBody::Rowwise]);
    }
    for body in bodies {
        let p = Tensor::zeros(ctx, &[rows, t], DType::F32);
        let (pd, ds) = (
            Tensor::zeros(ctx, &[rows, t], dt),
            Tensor::zeros(ctx, &[rows, t], dt),
        );
        let params = SoftmaxParams {
            rows,
            t,
            scale,
            body,
            ..Default::default()
        };
        let kernels = [
            causal_softmax_forward(ctx, &st, &p, &pd, &params)?,
            causal_softmax_backward(ctx, &p, &dpdt, &ds, &params)?,
        ];
        run(ctx, &kernels)?;
        checker.compare(
            "softmax",
            &format!("{body:?} forward"),
            case,
            &pd.read_f32(ctx)?,
            &want_p,
        );
        checker.compare(
            "softmax",
            &format!("{body:?} backward"),
            case,
            &ds.read_f32(ctx)?,
            &want_ds,
        );
    }
    Ok(())
}

/// The fused attention, forward (output and row log-sum-exp) and backward, on each body.
fn attention(checker: &mut Checker, case: &Case) -> Result<()> {
    let (ctx, dt) = (case.ctx, case.dtype);
    let (b, nh, t, hs) = (2, 2, 13, 8);
    let c = nh * hs;
    let qkv = values(b * t * 3 * c, 31, 1.5, dt);
    let dy = values(b * t * c, 32, 1.0, dt);
    let (want_y, want_lse, want_dqkv) = reference::attention(&qkv, &dy, b, nh, t, hs);
    let (qkvt, dyt) = (
        upload(ctx, &qkv, &[b, t, 3 * c], dt)?,
        upload(ctx, &dy, &[b, t, c], dt)?,
    );
    let mut bodies = vec![FlashBody::Auto];
    if all_bodies(case) {
        bodies.extend([FlashBody::Tiled, FlashBody::Rowwise]);
    }
    for body in bodies {
        let y = Tensor::zeros(ctx, &[b, t, c], dt);
        let (lse, delta) = (
            Tensor::zeros(ctx, &[b * nh * t], DType::F32),
            Tensor::zeros(ctx, &[b * nh * t], DType::F32),
        );
        let dqkv = Tensor::zeros(ctx, &[b, t, 3 * c], dt);
        let p = FlashParams {
            batch: b,
            heads: nh,
            t,
            width: c,
            scale: 1.0 / (hs as f32).sqrt(),
            body,
            ..Default::default()
        };
        let mut kernels = vec![flash_attention::forward(ctx, &qkvt, &y, &lse, &p)?];
        kernels.extend(flash_attention::backward(
            ctx, &qkvt, &y, &lse, &dyt, &delta, &dqkv, &p,
        )?);
        run(ctx, &kernels)?;
        checker.compare(
            "attention",
            &format!("{body:?} forward"),
            case,
            &y.read_f32(ctx)?,
            &want_y,
        );
        checker.compare(
            "attention",
            &format!("{body:?} log-sum-exp"),
            case,
            &lse.read_f32(ctx)?,
            &want_lse,
        );
        checker.compare(
            "attention",
            &format!("{body:?} backward"),
            case,
            &dqkv.read_f32(ctx)?,
            &want_dqkv,
        );
    }
    Ok(())
}
