//! GradScaler and gradient clipping on the GPU against CPU re-implementations of PyTorch's
//! `_amp_foreach_non_finite_check_and_unscale_`, `_amp_update_scale_` and `clip_grad_norm_`.

mod common;

use std::sync::Arc;

use common::{ctx, rand_vec};
use webgpu_amp::GpuContext;
use webgpu_amp::amp::scaler::inv_scale_of;
use webgpu_amp::amp::{GradClipper, GradScaler, ScalerConfig, ScalerStateDict};
use webgpu_amp::gpu::GpuBuffer;

fn upload(ctx: &GpuContext, data: &[f32]) -> Arc<GpuBuffer> {
    let b = ctx.alloc_storage("test.grads", 4 * data.len() as u64);
    ctx.queue
        .write_buffer(b.raw(), 0, bytemuck::cast_slice(data));
    b
}

fn download(ctx: &GpuContext, b: &GpuBuffer, n: usize) -> Vec<f32> {
    bytemuck::pod_collect_to_vec(&ctx.read_bytes(b, 0, 4 * n as u64).unwrap())
}

fn config(init_scale: f32, growth_interval: u32) -> ScalerConfig {
    ScalerConfig {
        init_scale,
        growth_interval,
        ..ScalerConfig::default()
    }
}

/// PyTorch's `_amp_update_scale_` (CPU kernel: factors are doubles, scale is f32).
fn torch_update_scale(scale: &mut f32, tracker: &mut i32, found_inf: bool, c: &ScalerConfig) {
    if found_inf {
        *scale = (*scale as f64 * c.backoff_factor) as f32;
        *tracker = 0;
    } else {
        let successful = *tracker + 1;
        if successful == c.growth_interval as i32 {
            let new_scale = (*scale as f64 * c.growth_factor) as f32;
            if new_scale.is_finite() {
                *scale = new_scale;
            }
            *tracker = 0;
        } else {
            *tracker = successful;
        }
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
            let grads = upload(ctx, &data);
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
    let grads = upload(ctx, &data);
    let mut scaler = GradScaler::new(ctx, ScalerConfig::default()).unwrap();
    scaler.unscale(ctx, &grads, n).unwrap();
    assert!(!scaler.snapshot(ctx).unwrap().found_inf);
    // A stale found_inf is cleared at the start of the next step.
    let poisoned = upload(ctx, &[1.0, f32::NAN]);
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
        let grads = upload(ctx, &data);
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
    let grads = upload(ctx, &data);
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
    let grads = upload(ctx, &[1.0, 2.0, 3.0]);
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
fn update_halves_on_inf_and_doubles_after_growth_interval_clean_steps() {
    let ctx = ctx();
    let clean = upload(ctx, &[1.0; 64]);
    let poisoned = upload(ctx, &[f32::NAN; 64]);
    let mut scaler = GradScaler::new(ctx, config(1024.0, 3)).unwrap();
    let mut step = |grads: &Arc<GpuBuffer>| {
        scaler.unscale(ctx, grads, 64).unwrap();
        scaler.update(ctx).unwrap();
        let s = scaler.snapshot(ctx).unwrap();
        (s.scale, s.growth_tracker)
    };
    assert_eq!(step(&clean), (1024.0, 1));
    assert_eq!(step(&clean), (1024.0, 2));
    assert_eq!(
        step(&poisoned),
        (512.0, 0),
        "inf halves and resets the tracker"
    );
    assert_eq!(step(&clean), (512.0, 1));
    assert_eq!(step(&clean), (512.0, 2));
    assert_eq!(step(&clean), (1024.0, 0), "3 clean steps double the scale");
    assert_eq!(step(&clean), (1024.0, 1));
}

#[test]
fn scripted_inf_pattern_follows_pytorchs_update_rule_exactly() {
    let ctx = ctx();
    let clean = upload(ctx, &rand_vec(3000, 4));
    let poisoned = {
        let mut d = rand_vec(3000, 5);
        d[1234] = f32::NEG_INFINITY;
        upload(ctx, &d)
    };
    let pattern = "ccicccciicccccccciccccccccccicccc";
    let configs = [
        config(65536.0, 3),
        // Factors and a scale whose products round: the GPU's product must be PyTorch's
        // (f32 scale × f64 factor, rounded to f32), and inv_scale its f64 reciprocal. With
        // the factors rounded to f32 this sequence differs (checked below).
        ScalerConfig {
            init_scale: 1000.0,
            growth_factor: 1.7,
            backoff_factor: 0.3,
            growth_interval: 2,
            enabled: true,
        },
    ];
    let f32_factors = ScalerConfig {
        growth_factor: configs[1].growth_factor as f32 as f64,
        backoff_factor: configs[1].backoff_factor as f32 as f64,
        ..configs[1]
    };
    let scales = |c: &ScalerConfig| {
        let (mut scale, mut tracker) = (c.init_scale, 0i32);
        let mut out = vec![];
        for ch in pattern.chars() {
            torch_update_scale(&mut scale, &mut tracker, ch == 'i', c);
            out.push(scale);
        }
        out
    };
    assert_ne!(
        scales(&configs[1]),
        scales(&f32_factors),
        "the case must tell f64 factors from f32 ones"
    );
    for c in configs {
        let mut scaler = GradScaler::new(ctx, c).unwrap();
        let (mut scale, mut tracker) = (c.init_scale, 0i32);
        for (k, ch) in pattern.chars().enumerate() {
            let inf = ch == 'i';
            scaler
                .unscale(ctx, if inf { &poisoned } else { &clean }, 3000)
                .unwrap();
            scaler.update(ctx).unwrap();
            torch_update_scale(&mut scale, &mut tracker, inf, &c);
            let s = scaler.snapshot(ctx).unwrap();
            assert_eq!(s.found_inf, inf, "{c:?} step {k}");
            assert_eq!(s.scale.to_bits(), scale.to_bits(), "{c:?} step {k}: scale");
            assert_eq!(s.growth_tracker, tracker, "{c:?} step {k}: tracker");
            assert_eq!(
                s.inv_scale.to_bits(),
                inv_scale_of(scale).to_bits(),
                "{c:?} step {k}: inv_scale of {scale}"
            );
        }
    }
}

#[test]
fn scale_never_grows_to_inf() {
    let ctx = ctx();
    let big = 1.5 * 2f32.powi(127);
    let grads = upload(ctx, &[0.0; 8]);
    let mut scaler = GradScaler::new(ctx, config(big, 1)).unwrap();
    for _ in 0..4 {
        scaler.unscale(ctx, &grads, 8).unwrap();
        scaler.update(ctx).unwrap();
        let s = scaler.snapshot(ctx).unwrap();
        assert_eq!(s.scale, big, "growth past f32::MAX is refused");
        assert_eq!(s.growth_tracker, 0, "the tracker still resets");
        // 1/scale is subnormal here, and must still be PyTorch's value.
        assert_eq!(s.inv_scale.to_bits(), inv_scale_of(big).to_bits());
    }
}

/// The GPU recomputes inv_scale with integers in every update; it must equal PyTorch's
/// `scale.double().reciprocal().float()` for scales of every magnitude, subnormal included.
#[test]
fn inv_scale_is_pytorchs_reciprocal_for_awkward_scales() {
    let ctx = ctx();
    let mut scales = vec![
        1.0f32,
        3.0,
        0.1,
        1000.0,
        65536.0,
        1.9999999,
        f32::MAX,
        2f32.powi(127),
        1.5 * 2f32.powi(126),
        2f32.powi(126),
        f32::MIN_POSITIVE,
        1e-40,
        f32::from_bits(1),
        f32::from_bits(3),
        f32::from_bits(0x0028_0000), // 1.25 * 2^-128: 1/s is finite, just below 2^127
        f32::from_bits(0x0020_0001), // just above 2^-128: 1/s rounds near f32::MAX
    ];
    // Random bit patterns over the whole positive range.
    let mut s = 0x2545F4914F6CDD1Du64;
    while scales.len() < 160 {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        let v = f32::from_bits((s >> 33) as u32 & 0x7fff_ffff);
        if v.is_finite() && v > 0.0 {
            scales.push(v);
        }
    }
    let grads = upload(ctx, &[0.0; 4]);
    let mut scaler = GradScaler::new(ctx, config(1.0, 1_000_000)).unwrap();
    for scale in scales {
        let d = ScalerStateDict {
            scale: Some(scale),
            growth_factor: Some(2.0),
            backoff_factor: Some(0.5),
            growth_interval: Some(1_000_000),
            growth_tracker: Some(0),
        };
        scaler.load_state_dict(ctx, &d).unwrap();
        // Fresh finite gradients (the last step may have left 0 * inf = NaN there).
        ctx.queue
            .write_buffer(grads.raw(), 0, bytemuck::cast_slice(&[0.0f32; 4]));
        scaler.unscale(ctx, &grads, 4).unwrap();
        scaler.update(ctx).unwrap(); // clean, no growth: the scale stays, inv_scale is recomputed
        let got = scaler.snapshot(ctx).unwrap();
        assert_eq!(got.scale.to_bits(), scale.to_bits());
        assert_eq!(
            got.inv_scale.to_bits(),
            inv_scale_of(scale).to_bits(),
            "1/{scale:e}: got {:e}, want {:e}",
            got.inv_scale,
            inv_scale_of(scale)
        );
    }
}

/// One update's product `scale × factor` for awkward scales and factors: subnormal scales
/// and results, ties, results past f32's range (growth refused, backoff never gets there)
/// and factors that are not f32 numbers. PyTorch computes it in f64 and rounds to f32.
#[test]
fn scale_updates_are_pytorchs_f64_products_for_awkward_factors() {
    let ctx = ctx();
    let scales = [
        1.0f32,
        1000.0,
        65536.0,
        3.0,
        1.9999999,
        f32::MAX,
        1.5 * 2f32.powi(126),
        f32::MIN_POSITIVE,
        1e-40,
        f32::from_bits(1),
        f32::from_bits(3),
        f32::from_bits(0x0080_0001),
        0.1,
        // × 1.7 in f64 lands exactly on an f32 tie (117821.35546875): the double, not the
        // exact product, is what rounds.
        69306.68,
    ];
    let growth = [2.0, 1.7, 1.0000001, 3.0000000000000004, 1e30, 1.5];
    let backoff = [0.5, 0.3, 0.1, 0.999_999_999, 1e-30, 0.75, 5e-324];
    // The tie case really is one: the f64 product is halfway between two f32s.
    let tie = 69306.68f32 as f64 * 1.7;
    let above = tie as f32; // rounds up, to the even neighbour
    let below = f32::from_bits(above.to_bits() - 1);
    assert_eq!(tie, (below as f64 + above as f64) / 2.0);
    let clean = upload(ctx, &[0.0; 4]);
    let poisoned = upload(ctx, &[f32::NAN; 4]);
    let mut scaler = GradScaler::new(ctx, config(1.0, 1)).unwrap();
    let mut distinguished = 0;
    for scale in scales {
        for (factor, grow) in growth
            .iter()
            .map(|f| (*f, true))
            .chain(backoff.iter().map(|f| (*f, false)))
        {
            let d = ScalerStateDict {
                scale: Some(scale),
                growth_factor: Some(if grow { factor } else { 2.0 }),
                backoff_factor: Some(if grow { 0.5 } else { factor }),
                growth_interval: Some(1),
                growth_tracker: Some(0),
            };
            scaler.load_state_dict(ctx, &d).unwrap();
            ctx.queue
                .write_buffer(clean.raw(), 0, bytemuck::cast_slice(&[0.0f32; 4]));
            scaler
                .unscale(ctx, if grow { &clean } else { &poisoned }, 4)
                .unwrap();
            scaler.update(ctx).unwrap();
            let product = (scale as f64 * factor) as f32;
            let want = if grow && !product.is_finite() {
                scale
            } else {
                product
            };
            if (scale * factor as f32).to_bits() != want.to_bits() {
                distinguished += 1;
            }
            let got = scaler.snapshot(ctx).unwrap().scale;
            assert_eq!(
                got.to_bits(),
                want.to_bits(),
                "{scale:e} × {factor:e} ({}): got {got:e}, want {want:e}",
                if grow { "growth" } else { "backoff" }
            );
        }
    }
    assert!(
        distinguished > 10,
        "only {distinguished} cases where an f32 product differs: the test must tell them apart"
    );
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
    let grads = upload(ctx, &data);
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
    let clean = upload(ctx, &[1.0; 16]);
    let poisoned = upload(ctx, &[f32::INFINITY; 16]);
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

// ---- clipping --------------------------------------------------------------------------

fn cpu_norm(data: &[f32]) -> f64 {
    data.iter()
        .map(|&v| (v as f64) * (v as f64))
        .sum::<f64>()
        .sqrt()
}

#[test]
fn clip_total_norm_matches_cpu_and_clips_only_above_max_norm() {
    let ctx = ctx();
    for n in [1usize, 3, 1025, 100_003] {
        let data = rand_vec(n, 7 + n as u64);
        let norm = cpu_norm(&data);
        for (ratio, clips) in [(0.5f64, true), (2.0, false)] {
            let max_norm = (norm * ratio) as f32;
            let grads = upload(ctx, &data);
            let clipper = GradClipper::new(ctx, &grads, n, max_norm).unwrap();
            clipper.clip(ctx);
            let total = clipper.total_norm(ctx).unwrap() as f64;
            assert!(
                ((total - norm) / norm).abs() < 2e-6,
                "n {n}: GPU norm {total}, CPU {norm}"
            );
            let got = download(ctx, &grads, n);
            if clips {
                let coef = max_norm / (total as f32 + 1e-6);
                for (i, (&g, &d)) in got.iter().zip(&data).enumerate() {
                    let want = d * coef;
                    assert!(
                        (g - want).abs() <= 1e-6 * want.abs() + 1e-12,
                        "n {n} element {i}: {g} vs {want}"
                    );
                }
                assert!(((cpu_norm(&got) - max_norm as f64) / max_norm as f64).abs() < 1e-5);
            } else {
                for (g, d) in got.iter().zip(&data) {
                    assert_eq!(g.to_bits(), d.to_bits(), "n {n}: below max_norm, untouched");
                }
            }
            // Deterministic: the same gradients give the same bits again.
            let again = upload(ctx, &data);
            let c2 = GradClipper::new(ctx, &again, n, max_norm).unwrap();
            c2.clip(ctx);
            assert_eq!(
                c2.total_norm(ctx).unwrap().to_bits(),
                (total as f32).to_bits()
            );
        }
    }
}

#[test]
fn clipping_after_unscale_sees_unscaled_gradients() {
    let ctx = ctx();
    let n = 20_000;
    let data = rand_vec(n, 11);
    let norm = cpu_norm(&data);
    let scaled: Vec<f32> = data.iter().map(|v| v * 65536.0).collect();
    let grads = upload(ctx, &scaled);
    let scaler = GradScaler::new(ctx, ScalerConfig::default()).unwrap();
    let clipper = GradClipper::new(ctx, &grads, n, 1.0).unwrap();
    // One submit, as a training step records it.
    let begin = scaler.begin_step_kernel(ctx).unwrap();
    let unscale = scaler.unscale_kernel(ctx, &grads, n).unwrap();
    let mut step = vec![&begin, &unscale];
    step.extend(clipper.kernels());
    ctx.run(&step);
    let total = clipper.total_norm(ctx).unwrap() as f64;
    assert!(((total - norm) / norm).abs() < 2e-6, "{total} vs {norm}");
    let got = download(ctx, &grads, n);
    assert!((cpu_norm(&got) - 1.0).abs() < 1e-5, "clipped to max_norm 1");
}

#[test]
fn clipping_a_nan_gradient_poisons_every_gradient_as_pytorch_does() {
    let ctx = ctx();
    let mut data = rand_vec(5000, 13);
    data[77] = f32::NAN;
    let grads = upload(ctx, &data);
    let clipper = GradClipper::new(ctx, &grads, 5000, 1.0).unwrap();
    clipper.clip(ctx);
    assert!(clipper.total_norm(ctx).unwrap().is_nan());
    assert!(download(ctx, &grads, 5000).iter().all(|v| v.is_nan()));
    common::expect_err(
        GradClipper::new(ctx, &grads, 5000, 0.0),
        &["max_norm must be finite and > 0, got 0"],
    );
    common::expect_err(
        GradClipper::new(ctx, &grads, 5001, 1.0),
        &["buffer of 20000 bytes cannot hold 5001 f32"],
    );
}
