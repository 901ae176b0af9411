//! GradScaler on the GPU against a CPU re-implementation of PyTorch's
//! `_amp_foreach_non_finite_check_and_unscale_`: unscaling bit for bit, inf and NaN found
//! anywhere, one unscale per step, the disabled scaler, the state dict and bad configs. The
//! scale's update rule is in `scaler/update.rs`.

mod common;
#[path = "scaler/update.rs"]
mod update;

use common::values::{download, upload_f32};
use common::{ctx, rand_vec};
use webgpu_amp::amp::scaler::inv_scale_of;
use webgpu_amp::amp::{GradScaler, ScalerConfig, ScalerStateDict};

fn config(init_scale: f32, growth_interval: u32) -> ScalerConfig {
    ScalerConfig {
        init_scale,
        growth_interval,
        ..ScalerConfig::default()
    }
}

#[test]
fn unscale_finds_inf_and_nan_at_first_middle_and_last_index() {
    let ctx = ctx();
    let n = 100_003;
    let clean = rand_vec(n, 1);
    for index in [0, n / 2, n - 1] {
        for bad in [f32::INFINITY, f32::NEG_INFINITY, f32::NAN] {
            let mut data = clean.clone();
            data[index] = bad;
            let grads = upload_f32(ctx, &data);
            let mut scaler = GradScaler::new(ctx, ScalerConfig::default()).unwrap();
            scaler.unscale(ctx, &grads, n).unwrap();
            let s = scaler.snapshot(ctx).unwrap();
            assert!(s.found_inf, "{bad} at index {index} of {n} was not found");
            scaler.update(ctx).unwrap();
            assert_eq!(scaler.get_scale(ctx).unwrap(), 32768.0);
        }
    }
    // A clean buffer sets nothing, and a value just below f32::MAX is finite.
    let mut data = clean.clone();
    data[n - 1] = f32::MAX;
    let grads = upload_f32(ctx, &data);
    let mut scaler = GradScaler::new(ctx, ScalerConfig::default()).unwrap();
    scaler.unscale(ctx, &grads, n).unwrap();
    assert!(!scaler.snapshot(ctx).unwrap().found_inf);
    // A stale found_inf is cleared at the start of the next step.
    let poisoned = upload_f32(ctx, &[1.0, f32::NAN]);
    scaler.update(ctx).unwrap();
    scaler.unscale(ctx, &poisoned, 2).unwrap();
    assert!(scaler.snapshot(ctx).unwrap().found_inf);
    scaler.update(ctx).unwrap();
    scaler.unscale(ctx, &grads, n).unwrap();
    assert!(!scaler.snapshot(ctx).unwrap().found_inf);
}

#[test]
fn unscale_multiplies_by_pytorchs_inv_scale_bit_for_bit() {
    let ctx = ctx();
    let n = 5_000;
    // A power of two (the usual case) and scales whose reciprocal rounds.
    for init_scale in [65536.0f32, 1000.0, 3.0, 0.7] {
        let data: Vec<f32> = rand_vec(n, 2).iter().map(|v| v * 1e4).collect();
        let grads = upload_f32(ctx, &data);
        let mut scaler = GradScaler::new(ctx, config(init_scale, 2000)).unwrap();
        scaler.unscale(ctx, &grads, n).unwrap();
        let got = download(ctx, &grads, n);
        let inv = inv_scale_of(init_scale);
        for (i, (&g, &d)) in got.iter().zip(&data).enumerate() {
            assert_eq!(
                g.to_bits(),
                (d * inv).to_bits(),
                "scale {init_scale}: element {i}: {d} * {inv} gave {g}"
            );
        }
        assert!(!scaler.snapshot(ctx).unwrap().found_inf);
    }
    // With an inf present every gradient is still unscaled (as PyTorch does).
    let mut data = rand_vec(1000, 3);
    data[500] = f32::INFINITY;
    let grads = upload_f32(ctx, &data);
    let mut scaler = GradScaler::new(ctx, config(4.0, 2000)).unwrap();
    scaler.unscale(ctx, &grads, 1000).unwrap();
    let got = download(ctx, &grads, 1000);
    assert_eq!(got[0], data[0] * 0.25);
    assert_eq!(got[999], data[999] * 0.25);
    assert_eq!(got[500], f32::INFINITY);
}

#[test]
fn second_unscale_before_update_is_an_error() {
    let ctx = ctx();
    let grads = upload_f32(ctx, &[1.0, 2.0, 3.0]);
    let mut scaler = GradScaler::new(ctx, ScalerConfig::default()).unwrap();
    let no_check = scaler.update(ctx).unwrap_err().to_string();
    assert!(
        no_check.contains("No inf checks were recorded"),
        "{no_check}"
    );
    scaler.unscale(ctx, &grads, 3).unwrap();
    let err = scaler.unscale(ctx, &grads, 3).unwrap_err().to_string();
    assert!(
        err.contains(
            "unscale_() has already been called on this optimizer since the last update()"
        ),
        "{err}"
    );
    // The refused call changed nothing: grads were divided once.
    assert_eq!(
        download(ctx, &grads, 3),
        [1.0 / 65536.0, 2.0 / 65536.0, 3.0 / 65536.0]
    );
    scaler.update(ctx).unwrap();
    scaler.unscale(ctx, &grads, 3).unwrap();
}

#[test]
fn disabled_scaler_keeps_scale_one_and_leaves_grads_alone() {
    let ctx = ctx();
    let c = ScalerConfig {
        enabled: false,
        ..ScalerConfig::default()
    };
    let mut scaler = GradScaler::new(ctx, c).unwrap();
    assert!(!scaler.enabled());
    let data = [3.0, f32::INFINITY, -2.5, f32::NAN];
    let grads = upload_f32(ctx, &data);
    // The planned kernels record nothing; the host API does nothing.
    let kernels = [
        scaler.begin_step_kernel(ctx).unwrap(),
        scaler.unscale_kernel(ctx, &grads, 4).unwrap(),
        scaler.update_kernel(ctx).unwrap(),
    ];
    ctx.run(&kernels.iter().collect::<Vec<_>>());
    scaler.unscale(ctx, &grads, 4).unwrap();
    scaler.unscale(ctx, &grads, 4).unwrap();
    scaler.update(ctx).unwrap();
    let got = download(ctx, &grads, 4);
    for (g, d) in got.iter().zip(&data) {
        assert_eq!(g.to_bits(), d.to_bits());
    }
    let s = scaler.snapshot(ctx).unwrap();
    assert_eq!((s.scale, s.found_inf, s.inv_scale), (1.0, false, 1.0));
    assert_eq!(scaler.get_scale(ctx).unwrap(), 1.0);
    // As in PyTorch: a disabled scaler's state dict is empty and loading is a no-op.
    let d = scaler.state_dict(ctx).unwrap();
    assert_eq!(serde_json::to_string(&d).unwrap(), "{}");
    let mut enabled = GradScaler::new(ctx, ScalerConfig::default()).unwrap();
    let err = enabled.load_state_dict(ctx, &d).unwrap_err().to_string();
    assert!(err.contains("state dict is empty"), "{err}");
}

#[test]
fn state_dict_round_trips_through_json_with_pytorch_keys() {
    let ctx = ctx();
    let clean = upload_f32(ctx, &[1.0; 16]);
    let poisoned = upload_f32(ctx, &[f32::INFINITY; 16]);
    let c = ScalerConfig {
        init_scale: 4096.0,
        growth_factor: 4.0,
        backoff_factor: 0.25,
        growth_interval: 10,
        enabled: true,
    };
    let mut scaler = GradScaler::new(ctx, c).unwrap();
    for g in [&clean, &poisoned, &clean, &clean, &clean] {
        scaler.unscale(ctx, g, 16).unwrap();
        scaler.update(ctx).unwrap();
    }
    let d = scaler.state_dict(ctx).unwrap();
    let json = serde_json::to_value(&d).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "scale": 1024.0, "growth_factor": 4.0, "backoff_factor": 0.25,
            "growth_interval": 10, "_growth_tracker": 3
        })
    );
    let mut restored = GradScaler::new(ctx, ScalerConfig::default()).unwrap();
    let parsed: ScalerStateDict = serde_json::from_str(&json.to_string()).unwrap();
    restored.load_state_dict(ctx, &parsed).unwrap();
    let s = restored.snapshot(ctx).unwrap();
    assert_eq!((s.scale, s.growth_tracker, s.found_inf), (1024.0, 3, false));
    assert_eq!(restored.config().growth_interval, 10);
    // The restored scaler continues exactly: 7 more clean steps grow by 4.
    for _ in 0..7 {
        restored.unscale(ctx, &clean, 16).unwrap();
        restored.update(ctx).unwrap();
    }
    assert_eq!(restored.get_scale(ctx).unwrap(), 4096.0);

    // A dict written by PyTorch (`json.dumps(scaler.state_dict())`) loads.
    let torch = r#"{"scale": 32768.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000, "_growth_tracker": 17}"#;
    let d: ScalerStateDict = serde_json::from_str(torch).unwrap();
    restored.load_state_dict(ctx, &d).unwrap();
    let s = restored.snapshot(ctx).unwrap();
    assert_eq!((s.scale, s.growth_tracker), (32768.0, 17));
    assert_eq!(s.inv_scale, 1.0 / 32768.0);
    // A missing key is named.
    let partial: ScalerStateDict = serde_json::from_str(r#"{"scale": 2.0}"#).unwrap();
    let err = restored
        .load_state_dict(ctx, &partial)
        .unwrap_err()
        .to_string();
    assert!(err.contains("growth_factor"), "{err}");
}

#[test]
fn invalid_configs_are_rejected() {
    let ctx = ctx();
    let bad = [
        ("init_scale", config(0.0, 1)),
        ("init_scale", config(f32::INFINITY, 1)),
        ("init_scale", config(f32::NAN, 1)),
        ("init_scale", config(-1.0, 1)),
        ("growth_interval", config(1.0, 0)),
        (
            "growth_factor",
            ScalerConfig {
                growth_factor: 1.0,
                ..ScalerConfig::default()
            },
        ),
        (
            "growth_factor",
            ScalerConfig {
                growth_factor: f64::NAN,
                ..ScalerConfig::default()
            },
        ),
        (
            "backoff_factor",
            ScalerConfig {
                backoff_factor: 1.0,
                ..ScalerConfig::default()
            },
        ),
        (
            "backoff_factor",
            ScalerConfig {
                backoff_factor: 0.0,
                ..ScalerConfig::default()
            },
        ),
    ];
    for (field, c) in bad {
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains(field), "{c:?}: {err}");
        common::expect_err(GradScaler::new(ctx, c), &["GradScaler: ", "got"]);
    }
    ScalerConfig::default().validate().unwrap();
}
