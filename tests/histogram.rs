//! The log2|g| histogram kernel against its CPU reference: binades from the bit pattern,
//! zeros and non-finite values apart, the scaled histogram multiplied by the scaler state's
//! scale, ranges inside a flat buffer, and many workgroups.

mod common;

use std::sync::Arc;

use common::values::upload_f32;
use common::{ctx, rand_vec};
use webgpu_amp::GpuContext;
use webgpu_amp::gpu::GpuBuffer;
use webgpu_amp::ops::histogram::{
    GradHistograms, HistogramRange, MAX_BINS, binade, log2_histogram, log2_histogram_cpu,
};

/// A scaler-state-like buffer whose word 0 is `scale`.
fn scale_state(ctx: &GpuContext, scale: f32) -> Arc<GpuBuffer> {
    upload_f32(ctx, &[scale, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
}

fn gpu_histogram(
    values: &[f32],
    offset: usize,
    len: usize,
    scale: f32,
    range: HistogramRange,
) -> GradHistograms {
    let ctx = ctx();
    let v = upload_f32(ctx, values);
    let s = scale_state(ctx, scale);
    let counts = ctx.alloc_storage("counts", range.bytes());
    let k = log2_histogram(ctx, &v, offset, len, &s, &counts, range).unwrap();
    let mut encoder = ctx.device.create_command_encoder(&Default::default());
    encoder.clear_buffer(counts.raw(), 0, None);
    {
        let mut pass = encoder.begin_compute_pass(&Default::default());
        k.encode(&mut pass);
    }
    ctx.queue.submit([encoder.finish()]);
    let bytes = ctx.read_bytes(&counts, 0, range.bytes()).unwrap();
    let words: Vec<u32> = bytemuck::cast_slice(&bytes).to_vec();
    GradHistograms::from_words(range, &words).unwrap()
}

/// Gradient-like values over many binades (no f32 subnormals: GPUs may flush those when
/// scaling), with zeros, infinities and NaNs mixed in.
fn gradient_like(n: usize, seed: u64) -> Vec<f32> {
    let mantissas = rand_vec(n, seed);
    let exps = rand_vec(n, seed + 1);
    mantissas
        .iter()
        .zip(&exps)
        .enumerate()
        .map(|(i, (&m, &e))| match i % 97 {
            0 => 0.0,
            1 => -0.0,
            2 => f32::INFINITY,
            3 => f32::NEG_INFINITY,
            4 => f32::NAN,
            // Exact powers of two sit on bin edges.
            5 => 2f32.powi((e * 40.0) as i32),
            _ => m * 2f32.powf(e * 36.0 - 12.0),
        })
        .collect()
}

#[test]
fn known_values_land_in_their_binades() {
    let values = [
        1.0f32,
        1.5,
        0.25,
        3.0e-8,
        0.0,
        f32::INFINITY,
        f32::NAN,
        -2.0,
        70000.0,
        1e-30,
        1e30,
    ];
    let range = HistogramRange { lo: -30, bins: 50 };
    let want = log2_histogram_cpu(&values, 65536.0, range);
    let u = &want.unscaled;
    let bin = |h: &webgpu_amp::ops::histogram::Log2Histogram, e: i32| h.bins[(e - h.lo) as usize];
    assert_eq!(bin(u, 0), 2, "1.0 and 1.5");
    assert_eq!(bin(u, -2), 1, "0.25");
    assert_eq!(bin(u, -25), 1, "3e-8 is in [2^-25, 2^-24)");
    assert_eq!(bin(u, 1), 1, "-2.0");
    assert_eq!(bin(u, 16), 1, "70000");
    assert_eq!((u.zero, u.non_finite, u.below, u.above), (1, 2, 1, 1));
    // Scaled by 2^16: 3e-8 moves up 16 binades, 70000 leaves the range, 1e30 overflows
    // nothing in f32 (still finite: above), 1e-30 is still below.
    let s = &want.scaled;
    assert_eq!(bin(s, -9), 1, "3e-8 * 65536");
    assert_eq!(bin(s, 16), 2, "1.0 and 1.5 times 2^16");
    assert_eq!((s.zero, s.non_finite, s.below, s.above), (1, 2, 1, 2));
    let got = gpu_histogram(&values, 0, values.len(), 65536.0, range);
    assert_eq!(got, want);
}

#[test]
fn gpu_matches_cpu_reference_over_many_workgroups() {
    // 40,000 values: more than the 64 workgroups × 256 threads one pass covers, so the
    // grid-stride loop and the workgroup-local merge are both exercised.
    let values = gradient_like(40_000, 3);
    let range = HistogramRange::default();
    for scale in [1.0f32, 65536.0, 1000.0, 0.5] {
        let got = gpu_histogram(&values, 0, values.len(), scale, range);
        let want = log2_histogram_cpu(&values, scale, range);
        assert_eq!(got, want, "scale {scale}");
        assert_eq!(got.unscaled.total(), values.len() as u64);
        assert_eq!(got.scaled.total(), values.len() as u64);
    }
}

#[test]
fn histogram_of_a_range_inside_a_flat_buffer() {
    let values = gradient_like(5_000, 11);
    let (offset, len) = (1_234, 2_000);
    let range = HistogramRange { lo: -40, bins: 60 };
    let got = gpu_histogram(&values, offset, len, 256.0, range);
    let want = log2_histogram_cpu(&values[offset..offset + len], 256.0, range);
    assert_eq!(got, want);
    assert_eq!(got.unscaled.total(), len as u64);
}

#[test]
fn f32_subnormals_are_binned_from_their_bits() {
    // The unscaled histogram never does arithmetic on the values, so subnormals count
    // exactly even on GPUs that flush them.
    let values: Vec<f32> = (0..23)
        .map(|k| f32::from_bits(1u32 << k))
        .chain([f32::from_bits(3), -f32::from_bits(0x007f_ffff)])
        .collect();
    for &v in &values {
        let e = binade(v).unwrap();
        assert!(
            2f64.powi(e) <= v.abs() as f64 && (v.abs() as f64) < 2f64.powi(e + 1),
            "{v:e}"
        );
    }
    let range = HistogramRange {
        lo: -150,
        bins: 128,
    };
    let got = gpu_histogram(&values, 0, values.len(), 1.0, range);
    let want = log2_histogram_cpu(&values, 1.0, range);
    assert_eq!(got.unscaled, want.unscaled);
    assert_eq!(got.unscaled.bins[(-149 - range.lo) as usize], 1);
    assert_eq!(got.unscaled.bins[(-127 - range.lo) as usize], 2);
}

#[test]
fn bad_arguments_are_errors() {
    let ctx = ctx();
    let v = upload_f32(ctx, &[1.0; 16]);
    let s = scale_state(ctx, 1.0);
    let too_many = HistogramRange {
        lo: 0,
        bins: MAX_BINS + 1,
    };
    let counts = ctx.alloc_storage("counts", too_many.bytes());
    common::expect_err(
        log2_histogram(ctx, &v, 0, 16, &s, &counts, too_many),
        &["1 to 128 bins, got 129"],
    );
    let range = HistogramRange::default();
    common::expect_err(
        log2_histogram(ctx, &v, 8, 9, &s, &counts, range),
        &["range 8..17 is past the end"],
    );
    let small = ctx.alloc_storage("small", 16);
    common::expect_err(
        log2_histogram(ctx, &v, 0, 16, &s, &small, range),
        &["counts buffer of 16 bytes, need 608"],
    );
}
