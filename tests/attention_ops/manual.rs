//! The manual attention path (`ops::attention::manual_forward` / `manual_backward`: batched
//! products around the causal softmax) against the f64 reference of tests/common, with
//! grouped-query attention (no repeated k and v; dk and dv summed over each group), packed
//! and in tensors of their own, attention dropout on, on every storage.

use super::*;
use common::attention_ref::{self, Dims};
use common::flash_run::{DROP, check, dims, dims_gqa, subnormal, unit, values};
use webgpu_amp::ops::attention::{manual_backward, manual_forward};
use webgpu_amp::ops::qkv::Qkv;

/// y and dqkv (packed, laid out as the input) of one manual forward and backward.
fn run(
    ctx: &GpuContext,
    dtype: DType,
    d: Dims,
    (qkv, dy): (&[f32], &[f32]),
    separate: bool,
) -> (Vec<f32>, Vec<f32>) {
    let scores = [d.b, d.nh, d.t, d.t];
    let low = |shape: &[usize]| Tensor::zeros(ctx, shape, dtype);
    let (s, pd, dpd) = (low(&scores), low(&scores), low(&scores));
    let p = Tensor::zeros(ctx, &scores, DType::F32);
    let y = low(&[d.b, d.t, d.c()]);
    let dy_t = Tensor::from_f32(ctx, dy, &[d.b, d.t, d.c()], dtype).unwrap();
    let state = DropoutState::new(ctx);
    state.write(ctx, DROP.seed, DROP.counter, true);
    let params = SoftmaxParams {
        rows: d.b * d.nh * d.t,
        t: d.t,
        scale: d.scale() as f32,
        dropout: Some(DropoutKey {
            p: DROP.p,
            layer: DROP.layer,
        }),
        dropout_state: Some(&state),
        body: SoftmaxBody::Auto,
    };
    // Each of q, k, v: its columns of the packed rows (three tensors), or the packed one.
    let parts = [(0, d.nh), (d.nh, d.kv), (d.nh + d.kv, d.kv)].map(|(from, heads)| {
        let cols = from * d.hs..(from + heads) * d.hs;
        let host: Vec<f32> = qkv
            .chunks(d.row())
            .flat_map(|r| r[cols.clone()].to_vec())
            .collect();
        let shape = [d.b, d.t, heads * d.hs];
        let t = Tensor::from_f32(ctx, &host, &shape, dtype).unwrap();
        (t, low(&shape), cols)
    });
    let packed = Tensor::from_f32(ctx, qkv, &[d.b, d.t, d.row()], dtype).unwrap();
    let dpacked = low(&[d.b, d.t, d.row()]);
    let [(q, dq, _), (k, dk, _), (v, dv, _)] = &parts;
    let (inputs, grads) = if separate {
        let inputs = Qkv::separate((q, k, v), d.nh, d.kv, d.hs);
        (inputs, inputs.like((dq, dk, dv)))
    } else {
        let inputs = Qkv::packed(&packed, d.nh, d.kv, d.hs);
        (inputs, inputs.like((&dpacked, &dpacked, &dpacked)))
    };
    let mut kernels = manual_forward(ctx, inputs, (&s, &p, &pd), &y, &params).unwrap();
    kernels.extend(
        manual_backward(ctx, inputs, (&p, &pd), &dy_t, (&dpd, &s), grads, &params).unwrap(),
    );
    ctx.run(&kernels.iter().collect::<Vec<_>>());
    let dqkv = if separate {
        let mut out = vec![0.0; qkv.len()];
        for (_, grad, cols) in &parts {
            let g = grad.read_f32(ctx).unwrap();
            for (row, src) in out.chunks_mut(d.row()).zip(g.chunks(cols.len())) {
                row[cols.clone()].copy_from_slice(src);
            }
        }
        out
    } else {
        dpacked.read_f32(ctx).unwrap()
    };
    (y.read_f32(ctx).unwrap(), dqkv)
}

#[test]
fn manual_attention_matches_the_f64_reference_with_grouped_query_heads() {
    // Multi-head (nanoGPT's), groups of 2 and 3, multi-query; an odd T and head size.
    let shapes = [
        dims(2, 2, 5, 4),
        dims_gqa(2, 4, 2, 7, 4),
        dims_gqa(1, 6, 2, 9, 5),
        dims_gqa(1, 3, 1, 6, 8),
    ];
    let drop = Some(DROP);
    for (name, ctx, dtype) in storages() {
        for &d in &shapes {
            let qkv = values(d.b * d.t * d.row(), 31, 1.5, dtype);
            let dy = values(d.b * d.t * d.c(), 32, 1.0, dtype);
            let (y, dqkv) = run(ctx, dtype, d, (&qkv, &dy), false);
            let (want_y, y_mag, _) = attention_ref::forward(&d, &qkv, drop);
            let (want_g, g_mag) = attention_ref::backward(&d, &qkv, &dy, drop);
            // Beside f32 arithmetic, S, dropout(P), dP and dS are stored in the low dtype
            // (PyTorch's manual path under autocast rounds them too): a few of its units on
            // every term, scaled by the logits' size for the softmax.
            let u = unit(dtype);
            let f32_err = 64.0 * 2f64.powi(-24) * (d.t + d.hs) as f64;
            let terms = if dtype == DType::F32 { 0.0 } else { 8.0 * u };
            let what = format!("{name} {d:?}");
            check(&format!("{what}: y"), &y, &want_y, &y_mag, |w, m| {
                u * w.abs() + (terms + f32_err) * m + subnormal(dtype)
            });
            check(&format!("{what}: dqkv"), &dqkv, &want_g, &g_mag, |w, m| {
                u * w.abs() + (4.0 * terms + 4.0 * u + f32_err) * m + subnormal(dtype)
            });
            // q, k and v in tensors of their own: the packed run's bits.
            let (y2, dqkv2) = run(ctx, dtype, d, (&qkv, &dy), true);
            assert_eq!(common::bits(&y2), common::bits(&y), "{what}: y apart");
            assert_eq!(
                common::bits(&dqkv2),
                common::bits(&dqkv),
                "{what}: dqkv apart"
            );
        }
    }
}
