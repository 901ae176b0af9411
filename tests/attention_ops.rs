//! Attention kernels against f64 CPU references: the strided batched matmul (the exact
//! nanoGPT attention layouts, padded odd layouts, every transpose, both kernel bodies,
//! accumulate, large batches, errors; its reference is tests/common/batched_ref.rs) and the
//! causal softmax forward and backward (masking, attention dropout, finite differences, determinism, non-finite inputs, errors), on f32,
//! native f16, packed f16 and bf16 storages.

mod common;

use common::batched_ref::{Attention, Case, check};
use common::{ctx, ctx_native, ctx_packed, rand_vec};
use webgpu_amp::ops::attention::{
    SoftmaxBody, SoftmaxParams, causal_softmax_backward, causal_softmax_forward,
};
use webgpu_amp::ops::dropout::{DropoutKey, DropoutState, keep};
use webgpu_amp::ops::matmul::{MatmulKernel, MatmulOpts, MatrixLayout, batched_matmul};
use webgpu_amp::{DType, GpuContext, Tensor};

/// (name, context, low dtype): f32, native f16, packed f16, bf16.
fn storages() -> [(&'static str, &'static GpuContext, DType); 4] {
    [
        ("f32", ctx(), DType::F32),
        ("f16 native", ctx_native(), DType::F16),
        ("f16 packed", ctx_packed(), DType::F16),
        ("bf16", ctx(), DType::BF16),
    ]
}

/// Both matmul bodies, except the tiled one on GL over a CPU adapter (Mesa's GLSL compiler
/// takes ~30 s per tiled pipeline there and Auto runs the direct body): as tests/matmul.rs.
fn kernels(ctx: &GpuContext) -> Vec<MatmulKernel> {
    if ctx.report.backend == "gl" && ctx.report.device_type == "Cpu" {
        common::not_checked(&format!(
            "the tiled matmul body on GL over a CPU adapter (`{}`: Mesa's GLSL compiler takes \
             ~30 s per tiled pipeline; Auto runs the direct body there, which is tested)",
            ctx.report.name
        ));
        vec![MatmulKernel::Direct]
    } else {
        vec![MatmulKernel::Tiled, MatmulKernel::Direct]
    }
}

fn quantised(n: usize, seed: u64, scale: f32, dtype: DType) -> Vec<f32> {
    rand_vec(n, seed)
        .iter()
        .map(|&v| dtype.round(v * scale))
        .collect()
}

// ---- batched matmul ---------------------------------------------------------------------------

/// nanoGPT attention sizes for the tests: B = 2, nh = 2, T = 5 (odd), hs = 4, C = 8.
const B: usize = 2;
const NH: usize = 2;
const T: usize = 5;
const HS: usize = 4;
const C: usize = NH * HS;

/// The same sizes as layouts and products (tests/common/batched_ref.rs).
const DIMS: Attention = Attention {
    b: B,
    nh: NH,
    t: T,
    hs: HS,
};

fn qkv_layout(which: usize) -> MatrixLayout {
    DIMS.qkv_layout(which)
}

fn s_layout() -> MatrixLayout {
    DIMS.s_layout()
}

#[test]
fn attention_products_in_the_exact_nanogpt_layouts() {
    for (name, ctx, dt) in storages() {
        for kernel in kernels(ctx) {
            for (what, case) in DIMS.cases(dt, 100) {
                check(&format!("{name} {what}"), ctx, kernel, case);
            }
        }
    }
}

/// A padded layout for a stored [rows, cols] matrix of batch [3, 2]: offset, ld past the
/// columns, batch strides with gaps. Returns the layout and the buffer length it needs.
fn padded(rows: usize, cols: usize, offset: usize, extra_ld: usize) -> (usize, MatrixLayout) {
    let ld = cols + extra_ld;
    let inner = rows * ld + 3;
    let outer = 2 * inner + 5;
    let l = MatrixLayout {
        offset,
        ld,
        batch_stride: [outer, inner],
    };
    (offset + 2 * outer + inner + rows * ld + 4, l)
}

#[test]
fn padded_odd_layouts_every_transpose_and_storage() {
    let (m, n, k) = (7, 5, 9);
    for (name, ctx, dt) in storages() {
        for kernel in kernels(ctx) {
            for (ti, &(ta, tb)) in [(false, false), (true, false), (false, true), (true, true)]
                .iter()
                .enumerate()
            {
                // The tiled body is slow to compile on CPU adapters: all transposes in f32,
                // plain and doubly transposed in 16-bit storages (index math is shared).
                if kernel == MatmulKernel::Tiled && dt != DType::F32 && ta != tb {
                    continue;
                }
                let (ar, ac) = if ta { (k, m) } else { (m, k) };
                let (br, bc) = if tb { (n, k) } else { (k, n) };
                let a = padded(ar, ac, 3, 2);
                let b = padded(br, bc, 1, 1);
                // c: an odd offset and ld (every element stored on its own, atomically when
                // packed), and an all-even layout (whole-word column pairs).
                let even = MatrixLayout {
                    offset: 2,
                    ld: 8,
                    batch_stride: [126, 60],
                };
                for (ci, c) in [padded(m, n, 1, 0), (370, even)].into_iter().enumerate() {
                    for accumulate in [false, true] {
                        let case = Case {
                            mnk: (m, n, k),
                            batch: [3, 2],
                            trans: (ta, tb),
                            accumulate,
                            a: (a.0, a.1, dt),
                            b: (b.0, b.1, dt),
                            c: (c.0, c.1, dt),
                            seed: 200 + (ti * 4 + ci * 2) as u64 + accumulate as u64,
                        };
                        check(name, ctx, kernel, case);
                    }
                }
            }
        }
    }
}

#[test]
fn mixed_storages_f16_inputs_f32_output() {
    use DType::{BF16, F16, F32};
    for (name, ctx) in [("native", ctx_native()), ("packed", ctx_packed())] {
        for (a_dt, b_dt, c_dt) in [(F16, F16, F32), (F32, BF16, F16), (BF16, F16, BF16)] {
            let case = Case {
                mnk: (T, HS, T),
                batch: [B, NH],
                trans: (true, false),
                accumulate: true,
                a: (B * NH * T * T, s_layout(), a_dt),
                b: (B * T * 3 * C, qkv_layout(0), b_dt),
                c: (B * T * 3 * C, qkv_layout(1), c_dt),
                seed: 300,
            };
            check(name, ctx, MatmulKernel::Direct, case);
        }
    }
}

#[test]
fn batches_past_the_grid_limit_fold_into_y() {
    // 300 x 250 = 75,000 batches of 1x2 · 2x2 products: more than 65,535 workgroups in z.
    let batch = [300, 250];
    let nb = batch[0] * batch[1];
    let (m, n, k) = (1, 2, 2);
    let a = MatrixLayout::stacked(m, k, batch);
    let b = MatrixLayout::stacked(k, n, batch);
    let c = MatrixLayout::stacked(m, n, batch);
    for (name, ctx, dt) in [
        ("f32", ctx(), DType::F32),
        ("f16 packed", ctx_packed(), DType::F16),
    ] {
        let case = Case {
            mnk: (m, n, k),
            batch,
            trans: (false, false),
            accumulate: false,
            a: (nb * m * k, a, dt),
            b: (nb * k * n, b, dt),
            c: (nb * m * n, c, dt),
            seed: 400,
        };
        check(name, ctx, MatmulKernel::Direct, case);
    }
}

#[test]
fn zero_sized_products() {
    let ctx = ctx();
    for (m, n, k) in [(0, 3, 2), (3, 0, 2), (3, 4, 0)] {
        for accumulate in [false, true] {
            let case = Case {
                mnk: (m, n, k),
                batch: [2, 1],
                trans: (false, false),
                accumulate,
                a: (16, MatrixLayout::stacked(m, k, [2, 1]), DType::F32),
                b: (16, MatrixLayout::stacked(k, n, [2, 1]), DType::F32),
                c: (24, MatrixLayout::stacked(m, n, [2, 1]), DType::F32),
                seed: 500,
            };
            check("f32", ctx, MatmulKernel::Auto, case);
        }
    }
}

#[test]
fn bad_layouts_are_clear_errors() {
    let ctx = ctx();
    let t = |n: usize| Tensor::zeros(ctx, &[n], DType::F32);
    let (a, b, c) = (t(B * T * 3 * C), t(B * T * 3 * C), t(B * NH * T * T));
    let run = |al: MatrixLayout, bl: MatrixLayout, cl: MatrixLayout, c: &Tensor, opts| {
        match batched_matmul(ctx, &a, al, &b, bl, c, cl, T, T, HS, [B, NH], opts) {
            Ok(_) => panic!("{al:?} {bl:?} {cl:?} should fail"),
            Err(e) => e.to_string(),
        }
    };
    let trans_b = MatmulOpts {
        trans_b: true,
        ..Default::default()
    };
    // The valid product first.
    assert!(
        batched_matmul(
            ctx,
            &a,
            qkv_layout(0),
            &b,
            qkv_layout(1),
            &c,
            s_layout(),
            T,
            T,
            HS,
            [B, NH],
            trans_b
        )
        .is_ok()
    );
    // a reaches past its tensor (offset one head too far).
    let e = run(
        qkv_layout(0).with_offset(3 * C),
        qkv_layout(1),
        s_layout(),
        &c,
        trans_b,
    );
    assert!(
        e.contains("batched_matmul") && e.contains("a:") && e.contains("past the tensor"),
        "{e}"
    );
    // b's batch stride too large.
    let e = run(
        qkv_layout(0),
        qkv_layout(1).with_batch_stride([2 * T * 3 * C, HS]),
        s_layout(),
        &c,
        trans_b,
    );
    assert!(e.contains("b:") && e.contains("past the tensor"), "{e}");
    // c too small for the batch.
    let small = t(B * NH * T * T - 1);
    let e = run(qkv_layout(0), qkv_layout(1), s_layout(), &small, trans_b);
    assert!(e.contains("c:") && e.contains("past the tensor"), "{e}");
    // Rows that overlap (ld below the columns).
    let e = run(
        MatrixLayout {
            ld: HS - 1,
            ..qkv_layout(0)
        },
        qkv_layout(1),
        s_layout(),
        &c,
        trans_b,
    );
    assert!(e.contains("a:") && e.contains("row stride"), "{e}");
    // Output matrices that overlap (every batch entry onto the same matrix) would race.
    let e = run(
        qkv_layout(0),
        qkv_layout(1),
        MatrixLayout::contiguous(T, T),
        &c,
        trans_b,
    );
    assert!(e.contains("overlap"), "{e}");
    let e = run(
        qkv_layout(0),
        qkv_layout(1),
        s_layout().with_batch_stride([NH * T * T, T * T - 1]),
        &c,
        trans_b,
    );
    assert!(e.contains("overlap"), "{e}");
    // No bias here.
    let bias = t(T);
    let e = run(
        qkv_layout(0),
        qkv_layout(1),
        s_layout(),
        &c,
        MatmulOpts {
            bias: Some(&bias),
            trans_b: true,
            ..Default::default()
        },
    );
    assert!(e.contains("bias"), "{e}");
    // Native and packed f16 never meet in one call.
    let native = Tensor::zeros_with_storage(ctx, &[B * T * 3 * C], webgpu_amp::Storage::F16);
    let packed = Tensor::zeros_with_storage(ctx, &[B * NH * T * T], webgpu_amp::Storage::F16Packed);
    let e = match batched_matmul(
        ctx,
        &native,
        qkv_layout(0),
        &native,
        qkv_layout(1),
        &packed,
        s_layout(),
        T,
        T,
        HS,
        [B, NH],
        trans_b,
    ) {
        Ok(_) => panic!("native and packed should fail"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("native and packed"), "{e}");
}

// ---- causal softmax ---------------------------------------------------------------------------

const ROWS: usize = B * NH * T;

/// f64 reference of the forward: masked softmax of scale·s per row (p = 0 for j > i).
fn softmax_ref(s: &[f32], rows: usize, t: usize, scale: f32) -> Vec<f64> {
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
fn drop_factor(key: Option<(DropoutKey, u64, u64)>, e: usize) -> f64 {
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
fn softmax_backward_ref(
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

fn assert_masked_zero(what: &str, v: &[f32], rows: usize, t: usize) {
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
fn assert_p_close(what: &str, got: &[f32], want: &[f64]) {
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let err = (g as f64 - w).abs();
        let tol = 4e-6 * w.abs() + 1e-12;
        assert!(
            err <= tol,
            "{what}: p[{i}] got {g}, want {w} (|err| {err:e} > {tol:e})"
        );
    }
}

struct SoftmaxRun {
    p: Vec<f32>,
    pd: Vec<f32>,
}

fn run_forward(
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
        let params = SoftmaxParams {
            rows,
            t,
            scale,
            dropout: Some(key),
            dropout_state: Some(&state),
            ..Default::default()
        };
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
                let params = SoftmaxParams {
                    rows,
                    t,
                    scale,
                    dropout,
                    dropout_state: Some(&state),
                    ..Default::default()
                };
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
fn loss(
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
        let params = SoftmaxParams {
            rows,
            t,
            scale,
            dropout,
            dropout_state: Some(&state),
            ..Default::default()
        };
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
        let params = SoftmaxParams {
            rows,
            t,
            scale: 0.35,
            dropout: Some(DropoutKey { p: 0.1, layer: 3 }),
            dropout_state: Some(&state),
            ..Default::default()
        };
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
    let e = err(causal_softmax_forward(
        ctx,
        &f16t(n),
        &f32t(n),
        &f16t(n),
        &bad,
    ));
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
    let e = err(causal_softmax_forward(
        ctx,
        &f16t(n),
        &f32t(n),
        &f16t(n),
        &bad_p,
    ));
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
