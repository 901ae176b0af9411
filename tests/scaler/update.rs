//! GradScaler's scale update against PyTorch's `_amp_update_scale_`: backoff on inf,
//! growth after `growth_interval` clean steps, never to inf, and inv_scale and the products
//! `scale × factor` exactly as PyTorch rounds them.

use std::sync::Arc;

use webgpu_amp::amp::scaler::inv_scale_of;
use webgpu_amp::amp::{GradScaler, ScalerConfig, ScalerStateDict};
use webgpu_amp::gpu::GpuBuffer;

use super::common::values::upload_f32;
use super::common::{ctx, rand_vec};
use super::config;

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
fn update_halves_on_inf_and_doubles_after_growth_interval_clean_steps() {
    let ctx = ctx();
    let clean = upload_f32(ctx, &[1.0; 64]);
    let poisoned = upload_f32(ctx, &[f32::NAN; 64]);
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
    let clean = upload_f32(ctx, &rand_vec(3000, 4));
    let poisoned = {
        let mut d = rand_vec(3000, 5);
        d[1234] = f32::NEG_INFINITY;
        upload_f32(ctx, &d)
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
    let grads = upload_f32(ctx, &[0.0; 8]);
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
    let grads = upload_f32(ctx, &[0.0; 4]);
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
        // Clean, no growth: the scale stays and inv_scale is recomputed. Below 2^-128 1/s is
        // inf, the zero gradients unscale to NaN and the step is skipped (unlike PyTorch,
        // which checks before unscaling): the scale backs off.
        scaler.update(ctx).unwrap();
        let got = scaler.snapshot(ctx).unwrap();
        let kept = if inv_scale_of(scale).is_finite() {
            scale
        } else {
            (scale as f64 * 0.5) as f32
        };
        assert_eq!(got.scale.to_bits(), kept.to_bits(), "{scale:e}");
        assert_eq!(
            got.inv_scale.to_bits(),
            inv_scale_of(kept).to_bits(),
            "1/{kept:e}: got {:e}, want {:e}",
            got.inv_scale,
            inv_scale_of(kept)
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
    let clean = upload_f32(ctx, &[0.0; 4]);
    let poisoned = upload_f32(ctx, &[f32::NAN; 4]);
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
            // Below 2^-128 a "clean" step is skipped (its zero gradients unscale to NaN), so
            // the scale backs off by 0.5 instead of growing.
            let skipped = grow && !inv_scale_of(scale).is_finite();
            let product = (scale as f64 * if skipped { 0.5 } else { factor }) as f32;
            let want = if grow && !skipped && !product.is_finite() {
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
