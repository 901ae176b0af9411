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
    check_split(what, ctx, kernel, case, None);
}

/// [`check`] with the reduction over K split into `split_k` parts (split-K), or as the
/// adapter's table says (None).
pub fn check_split(
    what: &str,
    ctx: &GpuContext,
    kernel: MatmulKernel,
    case: Case,
    split_k: Option<u32>,
) {
    let ((m, n, k), (trans_a, trans_b), (a_dt, b_dt, c_dt), bias_dt, accumulate, seed) = case;
    let what = format!(
        "{what} {} {m}x{n}x{k} ta={trans_a} tb={trans_b} a={a_dt} b={b_dt} c={c_dt} bias={bias_dt:?} acc={accumulate} split={split_k:?}",
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
        split_k,
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

/// A tensor of `shape` holding `values` in the middle of a larger buffer, between guard bands
/// of `guard` (at least one storage-offset alignment each side): the whole tensor and the
/// view of the values.
pub fn guarded(
    ctx: &GpuContext,
    values: &[f32],
    shape: &[usize],
    dtype: DType,
    guard: f32,
) -> (Tensor, Tensor) {
    let storage = ctx.storage_for(dtype);
    let align = ctx.caps.min_storage_buffer_offset_alignment.max(256) as usize;
    // Elements in `align` bytes (a packed 16-bit storage holds two per word).
    let pad = align * 2 / storage.bytes_for(2) as usize;
    let mut whole = vec![guard; pad];
    whole.extend_from_slice(values);
    whole.extend(std::iter::repeat_n(guard, pad));
    let t = Tensor::from_f32(ctx, &whole, &[whole.len()], dtype).unwrap();
    let view = Tensor::view(ctx, t.buffer().clone(), align as u64, shape, storage).unwrap();
    (t, view)
}

/// The interior variant of `kernel` (trusted: built without wgpu's runtime checks) keeps its
/// range invariant: a, b and c sit between guard bands, NaN around the inputs (a read past a
/// matrix would poison its outputs) and a sentinel around c (a write past it would change
/// one). `shape` must be whole tiles of the body here.
pub fn check_guarded(what: &str, ctx: &GpuContext, kernel: MatmulKernel, case: Case) {
    let ((m, n, k), (trans_a, trans_b), (a_dt, b_dt, c_dt), _, _, seed) = case;
    let what = format!("{what} guarded {m}x{n}x{k} ta={trans_a} tb={trans_b}");
    let av = quantised(m * k, seed, a_dt);
    let bv = quantised(k * n, seed + 1, b_dt);
    let a_shape = if trans_a { [k, m] } else { [m, k] };
    let b_shape = if trans_b { [n, k] } else { [k, n] };
    let (_, a) = guarded(ctx, &av, &a_shape, a_dt, f32::NAN);
    let (_, b) = guarded(ctx, &bv, &b_shape, b_dt, f32::NAN);
    let sentinel = 1536.0; // exact in f16 and bf16
    let (c_whole, c) = guarded(ctx, &vec![0.0; m * n], &[m, n], c_dt, sentinel);
    let opts = MatmulOpts {
        trans_a,
        trans_b,
        ..Default::default()
    };
    let kern = matmul_with(ctx, &a, &b, &c, opts, kernel).unwrap();
    if std::env::var("WEBGPU_AMP_CHECKED_KERNELS").as_deref() != Ok("1") {
        assert!(
            kern.is_trusted(),
            "{what}: not the trusted interior variant"
        );
    }
    ctx.run(&[&kern]);
    let whole = c_whole.read_f32(ctx).unwrap();
    let pad = (whole.len() - m * n) / 2;
    for (i, &v) in whole[..pad].iter().chain(&whole[pad + m * n..]).enumerate() {
        assert_eq!(
            v, sentinel,
            "{what}: guard element {i} of c was written ({v})"
        );
    }
    let (want, mag) = reference(&av, &bv, (m, n, k), trans_a, trans_b, None, None);
    assert_matches(&what, &whole[pad..pad + m * n], &want, &mag, k, c_dt);
}
