//! The elementwise ops transformers add: `accumulate` (acc += x, residual gradients) and the
//! exact GELU (`nn.GELU()`, erf form) forward and backward, against f64 references on every
//! storage.

mod common;

use common::values::contexts;
use common::{assert_close, ctx, rand_vec};
use webgpu_amp::ops::elementwise::accumulate;
use webgpu_amp::ops::unary;
use webgpu_amp::{DType, GpuContext, Tensor};

// ---- f64 reference ------------------------------------------------------------------------

/// erf in f64 from the series erf(z) = 2/√π · e^(−z²) · Σ (2z²)^n z / (1·3·…·(2n+1)), whose
/// terms are all positive (no cancellation); converges for every z, used for |z| ≤ 8
/// (erf(8) = 1 − 1e-29). Error ~1e-16.
fn erf64(z: f64) -> f64 {
    if z < 0.0 {
        return -erf64(-z);
    }
    if z > 8.0 {
        return 1.0;
    }
    let mut term = z;
    let mut sum = z;
    let mut n = 0.0;
    while term > 1e-17 * sum {
        n += 1.0;
        term *= 2.0 * z * z / (2.0 * n + 1.0);
        sum += term;
    }
    2.0 / std::f64::consts::PI.sqrt() * (-z * z).exp() * sum
}

fn cdf64(x: f64) -> f64 {
    0.5 * (1.0 + erf64(x / std::f64::consts::SQRT_2))
}

fn gelu64(x: f64) -> f64 {
    x * cdf64(x)
}

fn gelu_grad64(x: f64) -> f64 {
    cdf64(x) + x * (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt()
}

#[test]
fn erf_reference_is_right() {
    // Known values (Abramowitz & Stegun table 7.1, and erf(x) → 1).
    for (z, want) in [
        (0.0, 0.0),
        (0.5, 0.520_499_877_813_046_5),
        (1.0, 0.842_700_792_949_714_9),
        (2.0, 0.995_322_265_018_952_7),
        (3.0, 0.999_977_909_503_001_4),
    ] {
        assert!((erf64(z) - want).abs() < 1e-15, "erf({z}) = {}", erf64(z));
        assert!((erf64(-z) + want).abs() < 1e-15);
    }
    // The derivative formula against central differences of the reference.
    for x in [-6.0, -2.5, -1.0, -0.1, 0.0, 0.3, 1.7, 4.0] {
        let h = 1e-5;
        let fd = (gelu64(x + h) - gelu64(x - h)) / (2.0 * h);
        assert!((fd - gelu_grad64(x)).abs() < 1e-9, "gelu'({x})");
    }
}

// ---- exact GELU -----------------------------------------------------------------------------

/// Every f32 step of 1/1024 over [-10, 10], plus values near 0 and the ends.
fn grid() -> Vec<f32> {
    let mut v: Vec<f32> = (-10240..=10240).map(|i| i as f32 / 1024.0).collect();
    v.extend([1e-30, -1e-30, 1e-7, -1e-7, 9.999_999, -9.999_999]);
    v.extend(rand_vec(999, 7).iter().map(|&x| 10.0 * x));
    v
}

fn run(ctx: &GpuContext, xv: &[f32], gv: &[f32], dt: DType, out: DType) -> (Vec<f32>, Vec<f32>) {
    let n = xv.len();
    let x = Tensor::from_f32(ctx, xv, &[n], dt).unwrap();
    let g = Tensor::from_f32(ctx, gv, &[n], dt).unwrap();
    let y = Tensor::zeros(ctx, &[n], out);
    let dx = Tensor::zeros(ctx, &[n], out);
    let f = unary::forward(ctx, &unary::GELU, &x, &y).unwrap();
    let b = unary::backward(ctx, &unary::GELU, &x, &g, &dx).unwrap();
    ctx.run(&[&f, &b]);
    (y.read_f32(ctx).unwrap(), dx.read_f32(ctx).unwrap())
}

#[test]
fn gelu_erf_f32_within_1e6_of_f64_for_x_up_to_10() {
    let ctx = ctx();
    let xv = grid();
    let ones = vec![1.0; xv.len()];
    let (y, dx) = run(ctx, &xv, &ones, DType::F32, DType::F32);
    let (mut worst_y, mut worst_g) = (0.0f64, 0.0f64);
    for (i, &x) in xv.iter().enumerate() {
        let ey = (y[i] as f64 - gelu64(x as f64)).abs();
        let eg = (dx[i] as f64 - gelu_grad64(x as f64)).abs();
        assert!(
            ey <= 1e-6,
            "gelu({x}) = {}, want {} (err {ey:e})",
            y[i],
            gelu64(x as f64)
        );
        assert!(
            eg <= 1e-6,
            "gelu'({x}) = {}, want {} (err {eg:e})",
            dx[i],
            gelu_grad64(x as f64)
        );
        worst_y = worst_y.max(ey);
        worst_g = worst_g.max(eg);
    }
    println!(
        "exact GELU on {} / {}: max |err| forward {worst_y:e}, backward {worst_g:e}",
        ctx.report.backend, ctx.report.name
    );
}

#[test]
fn gelu_erf_every_storage() {
    for (name, ctx) in contexts() {
        for dt in DType::ALL {
            let xv: Vec<f32> = rand_vec(1001, 8)
                .iter()
                .map(|&v| dt.round(6.0 * v))
                .collect();
            let gv: Vec<f32> = rand_vec(1001, 9)
                .iter()
                .map(|&v| dt.round(2.0 * v))
                .collect();
            let (y, dx) = run(ctx, &xv, &gv, dt, dt);
            // f32 math within 1e-6 (above), then the store's rounding: half an ulp.
            let (rel, abs) = match dt {
                DType::F32 => (0.0, 1e-6),
                DType::F16 => (2f32.powi(-11), 1e-6 + 2f32.powi(-25)),
                DType::BF16 => (2f32.powi(-8), 1e-6),
                DType::U32 => unreachable!("ids are not computed in"),
            };
            let want_y: Vec<f32> = xv.iter().map(|&x| gelu64(x as f64) as f32).collect();
            let want_g: Vec<f32> = xv
                .iter()
                .zip(&gv)
                .map(|(&x, &g)| (g as f64 * gelu_grad64(x as f64)) as f32)
                .collect();
            // The backward multiplies by g (|g| ≤ 2): twice the absolute part.
            assert_close(&format!("{name} gelu {dt}"), &y, &want_y, abs, rel);
            assert_close(&format!("{name} gelu' {dt}"), &dx, &want_g, 2.0 * abs, rel);
        }
    }
}

#[test]
fn gelu_erf_non_finite_and_saturated_inputs() {
    let ctx = ctx();
    let xv = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        50.0,
        -50.0,
        1e30,
        -1e30,
        0.0,
    ];
    let gv = [1.0, 1.0, 1.0, 3.0, 3.0, 1.0, f32::INFINITY, 2.0];
    let (y, dx) = run(ctx, &xv, &gv, DType::F32, DType::F32);
    assert!(y[0].is_nan(), "gelu(NaN) = {}", y[0]);
    assert_eq!(y[1], f32::INFINITY);
    assert!(
        y[2].is_nan(),
        "gelu(-inf) = {} (PyTorch: -inf · 0 = NaN)",
        y[2]
    );
    assert_eq!(&y[3..], &[50.0, 0.0, 1e30, 0.0, 0.0]);
    assert!(
        dx[..3].iter().all(|v| v.is_nan()),
        "gelu' of non-finite x: {:?}",
        &dx[..3]
    );
    assert_eq!(&dx[3..6], &[3.0, 0.0, 1.0]);
    assert!(
        dx[6].is_nan(),
        "0 · inf upstream must stay visible: {}",
        dx[6]
    );
    assert!(
        (dx[7] - 1.0).abs() <= 1e-6,
        "2 · gelu'(0) = 2 · 1/2, got {}",
        dx[7]
    );
}

// ---- accumulate -----------------------------------------------------------------------------

#[test]
fn accumulate_adds_in_f32_into_every_storage_pair() {
    for (name, ctx) in contexts() {
        for x_dt in DType::ALL {
            for acc_dt in DType::ALL {
                for n in [1usize, 2, 7, 1000] {
                    let xv: Vec<f32> = rand_vec(n, 10)
                        .iter()
                        .map(|&v| x_dt.round(4.0 * v))
                        .collect();
                    let av: Vec<f32> = rand_vec(n, 11)
                        .iter()
                        .map(|&v| acc_dt.round(4.0 * v))
                        .collect();
                    let x = Tensor::from_f32(ctx, &xv, &[n], x_dt).unwrap();
                    let acc = Tensor::from_f32(ctx, &av, &[n], acc_dt).unwrap();
                    let k = accumulate(ctx, &x, &acc).unwrap();
                    // Twice: acc + 2x (the second add reads the first's rounded result).
                    ctx.run(&[&k, &k]);
                    let got = acc.read_f32(ctx).unwrap();
                    let want: Vec<f32> = av
                        .iter()
                        .zip(&xv)
                        .map(|(&a, &x)| acc_dt.round(acc_dt.round(a + x) + x))
                        .collect();
                    assert_close(
                        &format!("{name} accumulate {x_dt} into {acc_dt} n={n}"),
                        &got,
                        &want,
                        0.0,
                        0.0,
                    );
                }
            }
        }
    }
}

#[test]
fn accumulate_errors() {
    let ctx = ctx();
    let a = Tensor::zeros(ctx, &[4], DType::F32);
    let b = Tensor::zeros(ctx, &[5], DType::F32);
    let e = accumulate(ctx, &a, &b)
        .err()
        .expect("length mismatch")
        .to_string();
    assert!(e.contains("differ in length"), "{e}");
    let e = accumulate(ctx, &a, &a).err().expect("aliasing").to_string();
    assert!(e.contains("share a buffer"), "{e}");
}
