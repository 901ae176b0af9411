//! The matmul reference the matmul tests share: quantised inputs, an f64 product with the
//! magnitude bound of any summation order, and one GPU product checked against it.

use webgpu_amp::ops::matmul::{MatmulKernel, MatmulOpts, matmul_with};
use webgpu_amp::{DType, GpuContext, Tensor};

use super::rand_vec;

/// Both kernel bodies, except the tiled one on GL over a CPU adapter (llvmpipe): Mesa's GLSL
/// compiler takes about 30 s per tiled pipeline there, and `Auto` runs the direct body on
/// that adapter anyway. The tiled body is still checked on that machine through Vulkan
/// (lavapipe), and on every hardware adapter. Said out loud, never silently.
pub fn kernels(ctx: &GpuContext) -> Vec<MatmulKernel> {
    if ctx.adapter.get_info().backend == wgpu::Backend::Gl
        && ctx.device_type() == wgpu::DeviceType::Cpu
    {
        super::not_checked(&format!(
            "the tiled matmul body on GL over a CPU adapter (`{}`: Mesa's GLSL compiler takes \
             ~30 s per tiled pipeline; Auto runs the direct body there, which is tested)",
            ctx.report.name
        ));
        vec![MatmulKernel::Direct]
    } else {
        vec![MatmulKernel::Tiled, MatmulKernel::Direct]
    }
}

/// Values in [-1, 1) already rounded to `dtype`, so the GPU sees exactly these.
pub fn quantised(n: usize, seed: u64, dtype: DType) -> Vec<f32> {
    rand_vec(n, seed).iter().map(|&v| dtype.round(v)).collect()
}

/// One product of the reference: the value and the magnitude sum Σ|terms| that bounds the
/// rounding error of any summation order.
#[allow(clippy::too_many_arguments)]
pub fn reference(
    a: &[f32],
    b: &[f32],
    (m, n, k): (usize, usize, usize),
    trans_a: bool,
    trans_b: bool,
    bias: Option<&[f32]>,
    c0: Option<&[f32]>,
) -> (Vec<f64>, Vec<f64>) {
    let mut value = vec![0.0f64; m * n];
    let mut magnitude = vec![0.0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            let (mut s, mut mag) = (0.0f64, 0.0f64);
            for p in 0..k {
                let av = if trans_a { a[p * m + i] } else { a[i * k + p] } as f64;
                let bv = if trans_b { b[j * k + p] } else { b[p * n + j] } as f64;
                s += av * bv;
                mag += (av * bv).abs();
            }
            for extra in [bias.map(|v| v[j]), c0.map(|v| v[i * n + j])]
                .into_iter()
                .flatten()
            {
                s += extra as f64;
                mag += (extra as f64).abs();
            }
            value[i * n + j] = s;
            magnitude[i * n + j] = mag;
        }
    }
    (value, magnitude)
}

/// got ≈ want: f32 accumulation error (1e-5·sqrt(K) of the magnitude) plus the rounding of
/// the output dtype (half an ulp: 2^-11 f16, 2^-8 bf16, relative; subnormal f16 absolute).
#[track_caller]
pub fn assert_matches(
    what: &str,
    got: &[f32],
    want: &[f64],
    magnitude: &[f64],
    k: usize,
    out: DType,
) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let (rel_out, abs_out) = match out {
        DType::F32 => (0.0, 0.0),
        DType::F16 => (2f64.powi(-11), 2f64.powi(-25)),
        DType::BF16 => (2f64.powi(-8), 0.0),
        DType::U32 => unreachable!("ids are not computed in"),
    };
    let acc = 1e-5 * (k.max(1) as f64).sqrt();
    for (i, ((&g, &w), &mag)) in got.iter().zip(want).zip(magnitude).enumerate() {
        let tol = acc * mag * (1.0 + rel_out) + rel_out * w.abs() + abs_out + 1e-30;
        let err = (g as f64 - w).abs();
        assert!(
            err <= tol,
            "{what}: element {i}: got {g}, want {w} (|err| {err:e} > tol {tol:e})"
        );
    }
}

/// One product to check: (m, n, k), (trans_a, trans_b), (a, b, c) dtypes, bias dtype,
/// accumulate into c, data seed. A tuple so a test's cases read as a table.
pub type Case = (
    (usize, usize, usize),
    (bool, bool),
    (DType, DType, DType),
    Option<DType>,
    bool,
    u64,
);

/// Run one product on the GPU and compare it with the reference.
pub fn check(what: &str, ctx: &GpuContext, kernel: MatmulKernel, case: Case) {
    let ((m, n, k), (trans_a, trans_b), (a_dt, b_dt, c_dt), bias_dt, accumulate, seed) = case;
    let what = format!(
        "{what} {} {m}x{n}x{k} ta={trans_a} tb={trans_b} a={a_dt} b={b_dt} c={c_dt} bias={bias_dt:?} acc={accumulate}",
        kernel.name()
    );
    let av = quantised(m * k, seed, a_dt);
    let bv = quantised(k * n, seed + 1, b_dt);
    let a_shape = if trans_a { [k, m] } else { [m, k] };
    let b_shape = if trans_b { [n, k] } else { [k, n] };
    let a = Tensor::from_f32(ctx, &av, &a_shape, a_dt).unwrap();
    let b = Tensor::from_f32(ctx, &bv, &b_shape, b_dt).unwrap();
    let c0 = quantised(m * n, seed + 2, c_dt);
    let c = Tensor::from_f32(ctx, &c0, &[m, n], c_dt).unwrap();
    let biasv = bias_dt.map(|d| quantised(n, seed + 3, d));
    let bias = bias_dt.map(|d| Tensor::from_f32(ctx, biasv.as_ref().unwrap(), &[n], d).unwrap());
    let opts = MatmulOpts {
        trans_a,
        trans_b,
        accumulate,
        bias: bias.as_ref(),
        round_to: None,
    };
    let kern = matmul_with(ctx, &a, &b, &c, opts, kernel).unwrap();
    ctx.run(&[&kern]);
    let got = c.read_f32(ctx).unwrap();
    let (want, mag) = reference(
        &av,
        &bv,
        (m, n, k),
        trans_a,
        trans_b,
        biasv.as_deref(),
        accumulate.then_some(&c0[..]),
    );
    assert_matches(&what, &got, &want, &mag, k, c_dt);
}
