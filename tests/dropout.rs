//! Dropout with the counter-based mask: GPU masks equal the CPU `keep` bit for bit on every
//! storage and backend, depend on exactly (seed, counter, layer, index), keep 1 − p of the
//! elements, scale by 1/(1 − p), and are the identity in eval mode or at p = 0.

mod common;

use common::values::storages;
use common::{assert_close, ctx, ctx_packed, rand_vec};
use webgpu_amp::ops::dropout::{DropoutKey, DropoutState, dropout, keep};
use webgpu_amp::{DType, GpuContext, Tensor};

/// Run dropout forward on `x` (f32 values uploaded as `dtype`), return y.
fn forward(
    ctx: &GpuContext,
    state: &DropoutState,
    key: DropoutKey,
    xv: &[f32],
    dtype: DType,
    out: DType,
) -> Vec<f32> {
    let n = xv.len();
    let x = Tensor::from_f32(ctx, xv, &[n], dtype).unwrap();
    // Start y from garbage so a missed write shows.
    let y = Tensor::from_f32(ctx, &vec![-3.0; n], &[n], out).unwrap();
    let k = dropout(ctx, state, key, &x, &y).unwrap();
    ctx.run(&[&k]);
    y.read_f32(ctx).unwrap()
}

/// The mask read back from a forward over ones: kept elements are 1/(1 − p), dropped 0.
fn mask(
    ctx: &GpuContext,
    state: &DropoutState,
    key: DropoutKey,
    n: usize,
    dtype: DType,
) -> Vec<bool> {
    let y = forward(ctx, state, key, &vec![1.0; n], dtype, dtype);
    let kept = dtype.round(key.scale());
    y.iter()
        .enumerate()
        .map(|(i, &v)| {
            assert!(
                v == 0.0 || v == kept,
                "element {i} = {v}: neither dropped (0) nor kept ({kept})"
            );
            v != 0.0
        })
        .collect()
}

fn cpu_mask(seed: u64, counter: u64, key: DropoutKey, n: usize) -> Vec<bool> {
    (0..n as u64)
        .map(|i| keep(seed, counter, key.layer, i, key.p))
        .collect()
}

#[test]
fn gpu_masks_equal_cpu_keep_bit_for_bit_on_every_storage() {
    // Odd length (a final half word); thresholds that test different bits of the uniform;
    // a counter past 2^32 (its high word is keyed too); a large seed.
    let n = 1001;
    let cases = [
        (0u64, 0u64, DropoutKey { p: 0.1, layer: 0 }),
        (42, 7, DropoutKey { p: 0.5, layer: 3 }),
        (
            0xDEAD_BEEF_0123_4567,
            (1 << 32) + 5,
            DropoutKey { p: 0.37, layer: 11 },
        ),
        (
            9,
            1,
            DropoutKey {
                p: 0.9,
                layer: u32::MAX,
            },
        ),
    ];
    for (seed, counter, key) in cases {
        let want = cpu_mask(seed, counter, key, n);
        for (name, ctx, dt) in storages() {
            let state = DropoutState::new(ctx);
            state.write(ctx, seed, counter, true);
            let got = mask(ctx, &state, key, n, dt);
            for i in 0..n {
                assert_eq!(
                    got[i], want[i],
                    "{name}: seed {seed} counter {counter} {key:?}: element {i}"
                );
            }
        }
    }
}

#[test]
fn masks_depend_on_seed_counter_and_layer_only() {
    let n = 4096;
    let key = DropoutKey { p: 0.5, layer: 1 };
    let ctx = ctx();
    let state = DropoutState::new(ctx);
    let run = |seed: u64, counter: u64, layer: u32| {
        state.write(ctx, seed, counter, true);
        mask(ctx, &state, DropoutKey { layer, ..key }, n, DType::F32)
    };
    let base = run(1, 10, 1);
    // Same key, later resumed: the same mask.
    let _ = run(1, 11, 1);
    assert_eq!(
        run(1, 10, 1),
        base,
        "a rerun of the same micro-batch must match"
    );
    // Any one of the key words changed: about half the decisions change.
    for (what, other) in [
        ("counter", run(1, 11, 1)),
        ("counter high word", run(1, 10 + (1 << 32), 1)),
        ("layer", run(1, 10, 2)),
        ("seed", run(2, 10, 1)),
        ("seed high word", run(1 + (1 << 32), 10, 1)),
    ] {
        let differ = base.iter().zip(&other).filter(|(a, b)| a != b).count();
        // Binomial(4096, 1/2): mean 2048, sd 32.
        assert!(
            (1800..2300).contains(&differ),
            "changing the {what} changed {differ} of {n} decisions"
        );
    }
}

#[test]
fn kept_fraction_is_one_minus_p_within_statistical_bounds() {
    let n = 200_000;
    let ctx = ctx();
    let state = DropoutState::new(ctx);
    state.write(ctx, 77, 3, true);
    for p in [0.1f32, 0.3, 0.5, 0.8] {
        let key = DropoutKey { p, layer: 5 };
        let kept = mask(ctx, &state, key, n, DType::F32)
            .iter()
            .filter(|&&k| k)
            .count() as f64;
        let q = 1.0 - p as f64;
        let sd = (n as f64 * q * (1.0 - q)).sqrt();
        assert!(
            (kept - n as f64 * q).abs() < 5.0 * sd,
            "p = {p}: kept {kept} of {n}, expected {} ± {}",
            n as f64 * q,
            5.0 * sd
        );
    }
}

#[test]
fn forward_and_backward_values_match_cpu_reference() {
    let n = 777;
    let (seed, counter) = (314, 15);
    let key = DropoutKey { p: 0.25, layer: 4 };
    for (name, ctx, dt) in storages() {
        let state = DropoutState::new(ctx);
        state.write(ctx, seed, counter, true);
        let xv: Vec<f32> = rand_vec(n, 1).iter().map(|&v| dt.round(3.0 * v)).collect();
        let gv: Vec<f32> = rand_vec(n, 2).iter().map(|&v| dt.round(3.0 * v)).collect();
        let x = Tensor::from_f32(ctx, &xv, &[n], dt).unwrap();
        let dy = Tensor::from_f32(ctx, &gv, &[n], dt).unwrap();
        let y = Tensor::zeros(ctx, &[n], dt);
        let dx = Tensor::zeros(ctx, &[n], dt);
        // Backward into f32 too (a mixed-storage call).
        let dx32 = Tensor::zeros(ctx, &[n], DType::F32);
        let f = dropout(ctx, &state, key, &x, &y).unwrap();
        let b = dropout(ctx, &state, key, &dy, &dx).unwrap();
        let b32 = dropout(ctx, &state, key, &dy, &dx32).unwrap();
        ctx.run(&[&f, &b, &b32]);
        let reference = |v: &[f32], out: DType| -> Vec<f32> {
            v.iter()
                .enumerate()
                .map(|(i, &v)| {
                    if keep(seed, counter, key.layer, i as u64, key.p) {
                        out.round(v * key.scale())
                    } else {
                        0.0
                    }
                })
                .collect()
        };
        // One f32 multiply then the store's rounding: exact.
        let what = format!("{name} dropout");
        assert_close(
            &what,
            &y.read_f32(ctx).unwrap(),
            &reference(&xv, dt),
            0.0,
            0.0,
        );
        assert_close(
            &what,
            &dx.read_f32(ctx).unwrap(),
            &reference(&gv, dt),
            0.0,
            0.0,
        );
        assert_close(
            &what,
            &dx32.read_f32(ctx).unwrap(),
            &reference(&gv, DType::F32),
            0.0,
            0.0,
        );
    }
}

#[test]
fn eval_mode_and_p_zero_are_the_identity() {
    let n = 101;
    for (name, ctx, dt) in storages() {
        let state = DropoutState::new(ctx);
        let xv: Vec<f32> = rand_vec(n, 3).iter().map(|&v| dt.round(v)).collect();
        // A fresh state is in eval mode.
        let y = forward(ctx, &state, DropoutKey { p: 0.5, layer: 0 }, &xv, dt, dt);
        assert_close(&format!("{name} fresh state"), &y, &xv, 0.0, 0.0);
        state.write(ctx, 1, 2, false);
        let y = forward(ctx, &state, DropoutKey { p: 0.5, layer: 0 }, &xv, dt, dt);
        assert_close(&format!("{name} eval"), &y, &xv, 0.0, 0.0);
        // Eval into another storage is a cast.
        let y = forward(
            ctx,
            &state,
            DropoutKey { p: 0.5, layer: 0 },
            &xv,
            dt,
            DType::BF16,
        );
        let want: Vec<f32> = xv.iter().map(|&v| DType::BF16.round(v)).collect();
        assert_close(&format!("{name} eval cast"), &y, &want, 0.0, 0.0);
        state.write(ctx, 1, 2, true);
        let y = forward(ctx, &state, DropoutKey { p: 0.0, layer: 0 }, &xv, dt, dt);
        assert_close(&format!("{name} p = 0"), &y, &xv, 0.0, 0.0);
        // p = 1 drops everything.
        let y = forward(ctx, &state, DropoutKey { p: 1.0, layer: 0 }, &xv, dt, dt);
        assert!(y.iter().all(|&v| v == 0.0), "{name} p = 1: {y:?}");
    }
}

#[test]
fn dropped_inf_and_nan_give_nan_like_pytorch() {
    let ctx = ctx_packed();
    let state = DropoutState::new(ctx);
    let (seed, counter) = (5, 6);
    state.write(ctx, seed, counter, true);
    let key = DropoutKey { p: 0.5, layer: 9 };
    let n = 64;
    let xv: Vec<f32> = (0..n)
        .map(|i| match i % 3 {
            0 => f32::INFINITY,
            1 => f32::NAN,
            _ => 1.0,
        })
        .collect();
    let y = forward(ctx, &state, key, &xv, DType::F16, DType::F16);
    for i in 0..n {
        let kept = keep(seed, counter, key.layer, i as u64, key.p);
        let (v, x) = (y[i], xv[i]);
        match (i % 3, kept) {
            (0, true) => assert_eq!(v, f32::INFINITY, "element {i}"),
            (0 | 1, _) => assert!(v.is_nan(), "element {i}: {x} dropped={} gave {v}", !kept),
            (_, true) => assert_eq!(v, 2.0, "element {i}"),
            (_, false) => assert_eq!(v, 0.0, "element {i}"),
        }
    }
}

#[test]
fn bad_arguments_are_clear_errors() {
    let ctx = ctx();
    let state = DropoutState::new(ctx);
    let x = Tensor::zeros(ctx, &[10], DType::F32);
    let y = Tensor::zeros(ctx, &[11], DType::F32);
    let err = |r: webgpu_amp::Result<_>| match r {
        Ok(_) => panic!("should fail"),
        Err(e) => e.to_string(),
    };
    let key = DropoutKey { p: 0.1, layer: 0 };
    let e = err(dropout(ctx, &state, key, &x, &y));
    assert!(e.contains("differ in length"), "{e}");
    let e = err(dropout(ctx, &state, key, &x, &x));
    assert!(e.contains("in place"), "{e}");
    let e = err(dropout(
        ctx,
        &state,
        DropoutKey { p: -0.5, layer: 0 },
        &x,
        &x.reshape(&[2, 5]).unwrap(),
    ));
    assert!(e.contains("[0, 1]"), "{e}");
}
