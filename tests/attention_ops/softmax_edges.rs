//! The causal softmax's edges: non-finite inputs as PyTorch treats them, bad arguments as
//! clear errors, and the rowwise and workgroup bodies giving the same bits.

use super::softmax::*;
use super::*;

#[test]
fn softmax_non_finite_inputs_follow_pytorch() {
    let (rows, t) = (ROWS, T); // rows 0..5 are i = 0..4 of (b0, h0), 5..10 of (b0, h1)
    let scale = 0.5;
    for (name, ctx, dt) in [
        ("f32", ctx(), DType::F32),
        ("f16 packed", ctx_packed(), DType::F16),
    ] {
        let mut sv = quantised(rows * t, 1200, 2.0, dt);
        sv[0] = f32::NEG_INFINITY; // row 0 (i = 0): all unmasked -inf -> NaN
        sv[3 * t + 1] = f32::NAN; // row 3: NaN -> row NaN
        sv[2 * t + 4] = f32::INFINITY; // row 2 (i = 2): masked +inf -> no effect
        sv[4 * t + 2] = f32::NEG_INFINITY; // row 4: -inf alone -> p = 0 there
        sv[6 * t] = f32::INFINITY; // row 6 (i = 1): +inf -> row NaN
        let params = SoftmaxParams {
            rows,
            t,
            scale,
            ..Default::default()
        };
        let got = run_forward(ctx, &sv, (rows, t), dt, &params);
        let what = format!("{name} forward");
        assert_masked_zero(&what, &got.p, rows, t);
        let nan_rows = [0usize, 3, 6];
        let mut clean = sv.clone();
        clean[2 * t + 4] = 0.0; // masked, so any value gives the same row
        let want = softmax_ref(&clean, rows, t, scale);
        for r in 0..rows {
            for j in 0..=(r % t) {
                let g = got.p[r * t + j];
                if nan_rows.contains(&r) {
                    assert!(g.is_nan(), "{what}: p[{r}, {j}] = {g}, want NaN");
                } else {
                    let w = want[r * t + j];
                    assert!(
                        (g as f64 - w).abs() <= 4e-6 * w,
                        "{what}: p[{r}, {j}] = {g}, want {w}"
                    );
                }
            }
        }
        assert_eq!(got.p[4 * t + 2], 0.0, "{what}: -inf logit gives p = 0");

        // Backward: an inf in a masked dpd entry poisons its row (PyTorch's row sum has
        // 0 · inf there); masked ds stay 0.
        let finite = softmax_ref(&quantised(rows * t, 1202, 2.0, dt), rows, t, scale);
        let finite: Vec<f32> = finite.iter().map(|&v| v as f32).collect();
        let p = Tensor::from_f32(ctx, &finite, &[rows, t], DType::F32).unwrap();
        let mut dpdv = quantised(rows * t, 1201, 1.0, dt);
        dpdv[7 * t + 4] = f32::INFINITY; // row 7 (i = 2), masked entry
        let dpd = Tensor::from_f32(ctx, &dpdv, &[rows, t], dt).unwrap();
        let ds = Tensor::zeros(ctx, &[rows, t], dt);
        let k = causal_softmax_backward(ctx, &p, &dpd, &ds, &params).unwrap();
        ctx.run(&[&k]);
        let g = ds.read_f32(ctx).unwrap();
        let what = format!("{name} backward");
        assert_masked_zero(&what, &g, rows, t);
        for r in 0..rows {
            for j in 0..=(r % t) {
                let v = g[r * t + j];
                assert_eq!(v.is_nan(), r == 7, "{what}: ds[{r}, {j}] = {v}");
            }
        }
    }
}

#[test]
fn softmax_bad_arguments_are_clear_errors() {
    let ctx = ctx();
    let (rows, t) = (ROWS, T);
    let f32t = |n: usize| Tensor::zeros(ctx, &[n], DType::F32);
    let f16t = |n: usize| Tensor::zeros(ctx, &[n], DType::F16);
    let params = SoftmaxParams {
        rows,
        t,
        scale: 0.5,
        ..Default::default()
    };
    let n = rows * t;
    let err = |r: webgpu_amp::Result<_>| match r {
        Ok(_) => panic!("should fail"),
        Err(e) => e.to_string(),
    };
    let e = err(causal_softmax_forward(
        ctx,
        &f16t(n),
        &f16t(n),
        &f16t(n),
        &params,
    ));
    assert!(e.contains("p must be f32"), "{e}");
    let e = err(causal_softmax_forward(
        ctx,
        &f16t(n),
        &f32t(n),
        &f16t(n - 1),
        &params,
    ));
    assert!(e.contains("pd") && e.contains("elements"), "{e}");
    let bad = SoftmaxParams {
        rows: rows + 1,
        ..params
    };
    // The forward's error on well-shaped tensors with parameters `p`.
    let forward_err =
        |p: &SoftmaxParams| err(causal_softmax_forward(ctx, &f16t(n), &f32t(n), &f16t(n), p));
    let e = forward_err(&bad);
    assert!(e.contains("multiple of T"), "{e}");
    let no_state = SoftmaxParams {
        dropout: Some(DropoutKey { p: 0.1, layer: 0 }),
        ..params
    };
    let e = err(causal_softmax_backward(
        ctx,
        &f32t(n),
        &f16t(n),
        &f16t(n),
        &no_state,
    ));
    assert!(e.contains("dropout_state"), "{e}");
    let state = DropoutState::new(ctx);
    let bad_p = SoftmaxParams {
        dropout: Some(DropoutKey { p: 1.5, layer: 0 }),
        dropout_state: Some(&state),
        ..params
    };
    let e = forward_err(&bad_p);
    assert!(e.contains("[0, 1]"), "{e}");
}

/// The rowwise body (one invocation per row, no barriers: CPU adapters) and the workgroup
/// body (one workgroup per row: GPUs) give the same bits — forward p and pd, backward ds —
/// with and without dropout, with non-finite logits and gradients, and for rows shorter and
/// longer than the 64-thread workgroup (several strided elements per partial sum).
#[test]
fn softmax_bodies_give_the_same_bits() {
    let bits = |v: &[f32]| -> Vec<u32> { v.iter().map(|x| x.to_bits()).collect() };
    for (name, ctx, dt) in storages() {
        let state = DropoutState::new(ctx);
        state.write(ctx, 3, 2, true);
        for (rows, t) in [(ROWS, T), (B * NH * 17, 17), (3, 1), (2 * 130, 130)] {
            let mut sv = quantised(rows * t, 1300 + t as u64, 4.0, dt);
            let mut dpdv = quantised(rows * t, 1301 + t as u64, 2.0, dt);
            if t >= 5 {
                sv[t + 1] = f32::NEG_INFINITY; // row 1 (i = 1): -inf alone, p = 0 there
                sv[2 * t + 2] = f32::NAN; // row 2: NaN poisons the row
                dpdv[3 * t + t - 1] = f32::INFINITY; // row 3: masked inf poisons ds
            }
            for dropout in [None, Some(DropoutKey { p: 0.25, layer: 4 })] {
                let run = |body: SoftmaxBody| {
                    let params = SoftmaxParams {
                        rows,
                        t,
                        scale: 0.3,
                        dropout,
                        dropout_state: Some(&state),
                        body,
                    };
                    let fwd = run_forward(ctx, &sv, (rows, t), dt, &params);
                    let p = Tensor::from_f32(ctx, &fwd.p, &[rows, t], DType::F32).unwrap();
                    let dpd = Tensor::from_f32(ctx, &dpdv, &[rows, t], dt).unwrap();
                    let ds = Tensor::from_f32(ctx, &vec![7.0; rows * t], &[rows, t], dt).unwrap();
                    let k = causal_softmax_backward(ctx, &p, &dpd, &ds, &params).unwrap();
                    ctx.run(&[&k]);
                    [
                        bits(&fwd.p),
                        bits(&fwd.pd),
                        bits(&ds.read_f32(ctx).unwrap()),
                    ]
                };
                let what = format!("{name} T={t} dropout {dropout:?}");
                let (workgroup, rowwise) = (run(SoftmaxBody::Workgroup), run(SoftmaxBody::Rowwise));
                for (k, out) in ["p", "pd", "ds"].iter().enumerate() {
                    let first = workgroup[k]
                        .iter()
                        .zip(&rowwise[k])
                        .position(|(a, b)| a != b);
                    assert!(
                        first.is_none(),
                        "{what}: {out} differs between the bodies at {first:?}: {:?} vs {:?}",
                        first.map(|i| f32::from_bits(workgroup[k][i])),
                        first.map(|i| f32::from_bits(rowwise[k][i]))
                    );
                }
            }
        }
    }
}
