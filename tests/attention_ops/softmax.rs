//! The causal softmax forward and backward against f64 references: masking, attention
//! dropout (the shared mask), finite differences and run-to-run determinism. Its edge cases
//! (non-finite inputs, bad arguments, the two bodies' bits) are in `softmax_edges.rs`.

use super::*;

pub(super) const ROWS: usize = B * NH * T;

/// f64 reference of the forward: masked softmax of scale·s per row (p = 0 for j > i).
pub(super) fn softmax_ref(s: &[f32], rows: usize, t: usize, scale: f32) -> Vec<f64> {
    let mut p = vec![0.0f64; rows * t];
    for r in 0..rows {
        let i = r % t;
        let x: Vec<f64> = (0..=i)
            .map(|j| scale as f64 * s[r * t + j] as f64)
            .collect();
        let mx = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = x.iter().map(|v| (v - mx).exp()).collect();
        let sum: f64 = e.iter().sum();
        for j in 0..=i {
            p[r * t + j] = e[j] / sum;
        }
    }
    p
}

/// The dropout of element e (kept: factor 1/(1-p), dropped: 0).
pub(super) fn drop_factor(key: Option<(DropoutKey, u64, u64)>, e: usize) -> f64 {
    match key {
        None => 1.0,
        Some((k, seed, counter)) => {
            if keep(seed, counter, k.layer, e as u64, k.p) {
                k.scale() as f64
            } else {
                0.0
            }
        }
    }
}

/// f64 reference of the backward from p and dpd.
pub(super) fn softmax_backward_ref(
    p: &[f64],
    dpd: &[f32],
    rows: usize,
    t: usize,
    scale: f32,
    key: Option<(DropoutKey, u64, u64)>,
) -> (Vec<f64>, Vec<f64>) {
    let mut ds = vec![0.0; rows * t];
    let mut mag = vec![0.0; rows * t];
    for r in 0..rows {
        let i = r % t;
        let dp: Vec<f64> = (0..=i)
            .map(|j| dpd[r * t + j] as f64 * drop_factor(key, r * t + j))
            .collect();
        let dot: f64 = (0..=i).map(|j| p[r * t + j] * dp[j]).sum();
        let dot_mag: f64 = (0..=i).map(|j| (p[r * t + j] * dp[j]).abs()).sum();
        for j in 0..=i {
            let pj = p[r * t + j];
            ds[r * t + j] = scale as f64 * pj * (dp[j] - dot);
            mag[r * t + j] = scale as f64 * pj * (dp[j].abs() + dot_mag);
        }
    }
    (ds, mag)
}

pub(super) fn assert_masked_zero(what: &str, v: &[f32], rows: usize, t: usize) {
    for r in 0..rows {
        for j in (r % t + 1)..t {
            assert_eq!(
                v[r * t + j].to_bits(),
                0,
                "{what}: masked element [{r}, {j}] must be +0 exactly"
            );
        }
    }
}

/// p within f32 softmax error: exp (≤ 3 + 2|x| ulp), the f32 scaling, tree sums of ≤ 1100
/// terms (≲ 25 ulp) and the division (2.5 ulp): 4e-6 relative is a few times that.
pub(super) fn assert_p_close(what: &str, got: &[f32], want: &[f64]) {
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let err = (g as f64 - w).abs();
        let tol = 4e-6 * w.abs() + 1e-12;
        assert!(
            err <= tol,
            "{what}: p[{i}] got {g}, want {w} (|err| {err:e} > {tol:e})"
        );
    }
}

pub(super) struct SoftmaxRun {
    pub(super) p: Vec<f32>,
    pub(super) pd: Vec<f32>,
}

pub(super) fn run_forward(
    ctx: &GpuContext,
    sv: &[f32],
    (rows, t): (usize, usize),
    dt: DType,
    params: &SoftmaxParams,
) -> SoftmaxRun {
    let s = Tensor::from_f32(ctx, sv, &[rows, t], dt).unwrap();
    let p = Tensor::zeros(ctx, &[rows, t], DType::F32);
    // Start pd from garbage so a missed write shows.
    let pd = Tensor::from_f32(ctx, &vec![7.0; rows * t], &[rows, t], dt).unwrap();
    let k = causal_softmax_forward(ctx, &s, &p, &pd, params).unwrap();
    ctx.run(&[&k]);
    SoftmaxRun {
        p: p.read_f32(ctx).unwrap(),
        pd: pd.read_f32(ctx).unwrap(),
    }
}

/// Softmax over `rows` rows of `t` logits scaled by `scale`, with attention dropout
/// `dropout` (masks drawn from `state`).
fn with_dropout(
    rows: usize,
    t: usize,
    scale: f32,
    dropout: Option<DropoutKey>,
    state: &DropoutState,
) -> SoftmaxParams<'_> {
    SoftmaxParams {
        rows,
        t,
        scale,
        dropout,
        dropout_state: Some(state),
        ..Default::default()
    }
}

#[test]
fn softmax_forward_matches_f64_and_masks_exactly() {
    let scale = 1.0 / (HS as f32).sqrt();
    for (name, ctx, dt) in storages() {
        for (rows, t) in [(ROWS, T), (B * NH * 17, 17), (3, 1), (2 * 16, 16)] {
            let sv = quantised(rows * t, 600 + t as u64, 4.0, dt);
            let params = SoftmaxParams {
                rows,
                t,
                scale,
                ..Default::default()
            };
            let got = run_forward(ctx, &sv, (rows, t), dt, &params);
            let what = format!("{name} T={t}");
            let want = softmax_ref(&sv, rows, t, scale);
            assert_p_close(&what, &got.p, &want);
            assert_masked_zero(&what, &got.p, rows, t);
            // Without dropout pd is p rounded to pd's storage, bit for bit.
            for (i, (&pd, &p)) in got.pd.iter().zip(&got.p).enumerate() {
                assert_eq!(pd.to_bits(), dt.round(p).to_bits(), "{what}: pd[{i}]");
            }
            // Rows sum to 1.
            for r in 0..rows {
                let sum: f64 = got.p[r * t..(r + 1) * t].iter().map(|&v| v as f64).sum();
                assert!((sum - 1.0).abs() < 1e-5, "{what}: row {r} sums to {sum}");
            }
        }
    }
}

#[test]
fn softmax_forward_long_rows() {
    // T = 1030: rows longer than 1024 and than 16 strides of the 64-thread workgroup.
    let t = 1030;
    let rows = t;
    let ctx = ctx();
    let sv = quantised(rows * t, 700, 3.0, DType::F16);
    let params = SoftmaxParams {
        rows,
        t,
        scale: 0.125,
        ..Default::default()
    };
    let got = run_forward(ctx, &sv, (rows, t), DType::F16, &params);
    assert_p_close("T=1030", &got.p, &softmax_ref(&sv, rows, t, 0.125));
    assert_masked_zero("T=1030", &got.p, rows, t);
}

#[test]
fn softmax_forward_attention_dropout_uses_the_shared_mask() {
    let scale = 0.5;
    let (rows, t) = (B * NH * 17, 17);
    for (name, ctx, dt) in storages() {
        let state = DropoutState::new(ctx);
        let key = DropoutKey { p: 0.3, layer: 7 };
        let params = with_dropout(rows, t, scale, Some(key), &state);
        let sv = quantised(rows * t, 800, 4.0, dt);
        for (seed, counter, training) in [(42u64, 3u64, true), (42, 4, true), (42, 3, false)] {
            state.write(ctx, seed, counter, training);
            let got = run_forward(ctx, &sv, (rows, t), dt, &params);
            let what = format!("{name} seed {seed} counter {counter} training {training}");
            assert_p_close(&what, &got.p, &softmax_ref(&sv, rows, t, scale));
            assert_masked_zero(&what, &got.pd, rows, t);
            let mut dropped = 0;
            for e in 0..rows * t {
                let kept = !training || keep(seed, counter, key.layer, e as u64, key.p);
                let factor = if training { key.scale() } else { 1.0 };
                let want = if kept {
                    dt.round(got.p[e] * factor)
                } else {
                    0.0
                };
                dropped += (!kept && e % t <= (e / t) % t) as usize;
                assert_eq!(
                    got.pd[e].to_bits(),
                    want.to_bits(),
                    "{what}: pd[{e}] = {} (p {}, kept {kept})",
                    got.pd[e],
                    got.p[e]
                );
            }
            assert_eq!(dropped > 0, training, "{what}: dropped {dropped}");
        }
    }
}

#[test]
fn softmax_backward_matches_f64_reference() {
    let scale = 1.0 / (HS as f32).sqrt();
    for (name, ctx, dt) in storages() {
        let state = DropoutState::new(ctx);
        state.write(ctx, 9, 1, true);
        for (rows, t) in [(ROWS, T), (B * NH * 17, 17)] {
            for dropout in [None, Some(DropoutKey { p: 0.2, layer: 2 })] {
                let params = with_dropout(rows, t, scale, dropout, &state);
                let sv = quantised(rows * t, 900, 4.0, dt);
                let fwd = run_forward(ctx, &sv, (rows, t), dt, &params);
                let dpdv = quantised(rows * t, 901, 2.0, dt);
                let p = Tensor::from_f32(ctx, &fwd.p, &[rows, t], DType::F32).unwrap();
                let dpd = Tensor::from_f32(ctx, &dpdv, &[rows, t], dt).unwrap();
                let ds = Tensor::from_f32(ctx, &vec![7.0; rows * t], &[rows, t], dt).unwrap();
                let k = causal_softmax_backward(ctx, &p, &dpd, &ds, &params).unwrap();
                ctx.run(&[&k]);
                let got = ds.read_f32(ctx).unwrap();
                let what = format!("{name} T={t} dropout {dropout:?}");
                assert_masked_zero(&what, &got, rows, t);
                let p64: Vec<f64> = fwd.p.iter().map(|&v| v as f64).collect();
                let key = dropout.map(|k| (k, 9, 1));
                let (want, mag) = softmax_backward_ref(&p64, &dpdv, rows, t, scale, key);
                // f32 math (≲ 30 ulp of the magnitude through the row sum) plus half an ulp
                // of ds's dtype (subnormal f16 steps absolute).
                let (rel_out, abs_out) = match dt {
                    DType::F32 => (0.0, 1e-30),
                    DType::F16 => (2f64.powi(-11), 2f64.powi(-25)),
                    DType::BF16 => (2f64.powi(-8), 1e-30),
                    DType::U32 => unreachable!("ids are not computed in"),
                };
                for (i, ((&g, &w), &mg)) in got.iter().zip(&want).zip(&mag).enumerate() {
                    let tol = 1e-5 * mg * (1.0 + rel_out) + rel_out * w.abs() + abs_out;
                    let err = (g as f64 - w).abs();
                    assert!(
                        err <= tol,
                        "{what}: ds[{i}] got {g}, want {w} (|err| {err:e} > {tol:e})"
                    );
                }
            }
        }
    }
}

/// L(s) = Σ w ⊙ dropout(softmax(scale · s masked)): its gradient is the backward with dpd = w.
pub(super) fn loss(
    s: &[f64],
    w: &[f32],
    rows: usize,
    t: usize,
    scale: f64,
    key: Option<(DropoutKey, u64, u64)>,
) -> f64 {
    let mut l = 0.0;
    for r in 0..rows {
        let i = r % t;
        let x: Vec<f64> = (0..=i).map(|j| scale * s[r * t + j]).collect();
        let mx = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = x.iter().map(|v| (v - mx).exp()).sum();
        for (j, xj) in x.iter().enumerate() {
            let e = r * t + j;
            l += w[e] as f64 * (xj - mx).exp() / sum * drop_factor(key, e);
        }
    }
    l
}

#[test]
fn softmax_gradient_matches_finite_differences_in_f32() {
    let (rows, t) = (ROWS, T);
    let scale = 0.5f32;
    let ctx = ctx();
    let state = DropoutState::new(ctx);
    state.write(ctx, 5, 11, true);
    for dropout in [None, Some(DropoutKey { p: 0.25, layer: 1 })] {
        let params = with_dropout(rows, t, scale, dropout, &state);
        let key = dropout.map(|k| (k, 5, 11));
        let sv = quantised(rows * t, 1000, 3.0, DType::F32);
        let w = quantised(rows * t, 1001, 1.0, DType::F32);
        // GPU forward and backward, all f32.
        let s = Tensor::from_f32(ctx, &sv, &[rows, t], DType::F32).unwrap();
        let p = Tensor::zeros(ctx, &[rows, t], DType::F32);
        let pd = Tensor::zeros(ctx, &[rows, t], DType::F32);
        let dpd = Tensor::from_f32(ctx, &w, &[rows, t], DType::F32).unwrap();
        let ds = Tensor::zeros(ctx, &[rows, t], DType::F32);
        let fwd = causal_softmax_forward(ctx, &s, &p, &pd, &params).unwrap();
        let bwd = causal_softmax_backward(ctx, &p, &dpd, &ds, &params).unwrap();
        ctx.run(&[&fwd, &bwd]);
        let got = ds.read_f32(ctx).unwrap();
        let what = format!("dropout {dropout:?}");

        // Central differences of the f64 model at h = 1e-5 (truncation ~1e-10): tight.
        let s64: Vec<f64> = sv.iter().map(|&v| v as f64).collect();
        let h = 1e-5;
        for e in 0..rows * t {
            let mut sp = s64.clone();
            sp[e] += h;
            let up = loss(&sp, &w, rows, t, scale as f64, key);
            sp[e] -= 2.0 * h;
            let fd = (up - loss(&sp, &w, rows, t, scale as f64, key)) / (2.0 * h);
            let err = (got[e] as f64 - fd).abs();
            assert!(
                err <= 2e-6 + 1e-5 * fd.abs(),
                "{what}: ds[{e}] = {} vs f64 finite difference {fd}",
                got[e]
            );
        }

        // Central differences of the GPU's own f32 forward (Σ w ⊙ pd read back), at
        // h = 2^-6 on a few unmasked and masked entries: truncation ~h²·|L'''| and f32 noise
        // of the loss ~1e-6 / 2h leave ~1e-3.
        let h = 2f32.powi(-6);
        for e in [0, 6, 12, 13, 19, 24, 3 * t + 4, 7 * t + 1] {
            let mut lv = [0.0f64; 2];
            for (side, sign) in [(0, 1.0f32), (1, -1.0)] {
                let mut sp = sv.clone();
                sp[e] += sign * h;
                s.write_f32(ctx, &sp).unwrap();
                ctx.run(&[&fwd]);
                let pdv = pd.read_f32(ctx).unwrap();
                lv[side] = pdv.iter().zip(&w).map(|(&a, &b)| a as f64 * b as f64).sum();
            }
            let fd = (lv[0] - lv[1]) / (2.0 * h as f64);
            let err = (got[e] as f64 - fd).abs();
            assert!(
                err <= 1e-3,
                "{what}: ds[{e}] = {} vs GPU f32 finite difference {fd}",
                got[e]
            );
        }
    }
}

#[test]
fn softmax_is_deterministic_run_to_run() {
    let (rows, t) = (B * NH * 17, 17);
    for (name, ctx, dt) in [
        ("f16 native", ctx_native(), DType::F16),
        ("f16 packed", ctx_packed(), DType::F16),
    ] {
        let state = DropoutState::new(ctx);
        state.write(ctx, 1234, 99, true);
        let params = with_dropout(rows, t, 0.35, Some(DropoutKey { p: 0.1, layer: 3 }), &state);
        let s = Tensor::from_f32(ctx, &quantised(rows * t, 1100, 4.0, dt), &[rows, t], dt).unwrap();
        let p = Tensor::zeros(ctx, &[rows, t], DType::F32);
        let pd = Tensor::zeros(ctx, &[rows, t], dt);
        let dpd =
            Tensor::from_f32(ctx, &quantised(rows * t, 1101, 3.0, dt), &[rows, t], dt).unwrap();
        let ds1 = Tensor::zeros(ctx, &[rows, t], dt);
        let ds2 = Tensor::zeros(ctx, &[rows, t], dt);
        let fwd = causal_softmax_forward(ctx, &s, &p, &pd, &params).unwrap();
        let b1 = causal_softmax_backward(ctx, &p, &dpd, &ds1, &params).unwrap();
        let b2 = causal_softmax_backward(ctx, &p, &dpd, &ds2, &params).unwrap();
        ctx.run(&[&fwd, &b1, &b2]);
        let (p1, pd1) = (p.read_f32(ctx).unwrap(), pd.read_f32(ctx).unwrap());
        let (g1, g2) = (ds1.read_f32(ctx).unwrap(), ds2.read_f32(ctx).unwrap());
        ctx.run(&[&fwd, &b1]);
        let (p2, pd2) = (p.read_f32(ctx).unwrap(), pd.read_f32(ctx).unwrap());
        let g3 = ds1.read_f32(ctx).unwrap();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&p1), bits(&p2), "{name}: p differs run to run");
        assert_eq!(bits(&pd1), bits(&pd2), "{name}: pd differs run to run");
        assert_eq!(
            bits(&g1),
            bits(&g2),
            "{name}: ds differs between two kernels"
        );
        assert_eq!(bits(&g1), bits(&g3), "{name}: ds differs run to run");
    }
}
