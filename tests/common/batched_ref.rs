//! The batched-matmul reference the attention tests share (tests/attention_ops.rs on every
//! storage and body, tests/coop_layers.rs on tensor cores): operands anywhere in their
//! buffers (strided batches, interleaved heads), an f64 product with the magnitude bound of
//! any summation order, and every element of c checked, untouched ones included.

use webgpu_amp::ops::matmul::{MatmulKernel, MatmulOpts, MatrixLayout, batched_matmul_with};
use webgpu_amp::{DType, GpuContext, Tensor};

use super::matmul_ref::quantised;

/// One batched product to check: operand buffers of the given lengths, layouts and dtypes.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    pub mnk: (usize, usize, usize),
    pub batch: [usize; 2],
    pub trans: (bool, bool),
    pub accumulate: bool,
    pub a: (usize, MatrixLayout, DType),
    pub b: (usize, MatrixLayout, DType),
    pub c: (usize, MatrixLayout, DType),
    pub seed: u64,
}

pub fn index(l: &MatrixLayout, z: [usize; 2], r: usize, c: usize) -> usize {
    l.offset + z[0] * l.batch_stride[0] + z[1] * l.batch_stride[1] + r * l.ld + c
}

/// The whole expected c buffer (untouched elements keep their value) and, per element, the
/// magnitude sum Σ|terms| bounding any summation order's rounding error (None: untouched).
pub fn reference(case: &Case, av: &[f32], bv: &[f32], cv: &[f32]) -> (Vec<f64>, Vec<Option<f64>>) {
    let (m, n, k) = case.mnk;
    let (ta, tb) = case.trans;
    let (al, bl, cl) = (case.a.1, case.b.1, case.c.1);
    let mut want: Vec<f64> = cv.iter().map(|&v| v as f64).collect();
    let mut mag = vec![None; cv.len()];
    for z0 in 0..case.batch[0] {
        for z1 in 0..case.batch[1] {
            let z = [z0, z1];
            for i in 0..m {
                for j in 0..n {
                    let (mut s, mut g) = (0.0f64, 0.0f64);
                    for p in 0..k {
                        let a = if ta {
                            av[index(&al, z, p, i)]
                        } else {
                            av[index(&al, z, i, p)]
                        } as f64;
                        let b = if tb {
                            bv[index(&bl, z, j, p)]
                        } else {
                            bv[index(&bl, z, p, j)]
                        } as f64;
                        s += a * b;
                        g += (a * b).abs();
                    }
                    let idx = index(&cl, z, i, j);
                    assert!(mag[idx].is_none(), "test case has overlapping outputs");
                    if case.accumulate {
                        s += cv[idx] as f64;
                        g += (cv[idx] as f64).abs();
                    }
                    want[idx] = s;
                    mag[idx] = Some(g);
                }
            }
        }
    }
    (want, mag)
}

/// Upload, run, and compare every element of c: written ones within f32 accumulation error
/// (1e-5·sqrt(K) of the magnitude) plus half an ulp of c's dtype; untouched ones unchanged.
pub fn check(what: &str, ctx: &GpuContext, kernel: MatmulKernel, case: Case) {
    let what = format!("{what} {} {case:?}", kernel.name());
    let (m, n, k) = case.mnk;
    let av = quantised(case.a.0, case.seed, case.a.2);
    let bv = quantised(case.b.0, case.seed + 1, case.b.2);
    let cv = quantised(case.c.0, case.seed + 2, case.c.2);
    let a = Tensor::from_f32(ctx, &av, &[case.a.0], case.a.2).unwrap();
    let b = Tensor::from_f32(ctx, &bv, &[case.b.0], case.b.2).unwrap();
    let c = Tensor::from_f32(ctx, &cv, &[case.c.0], case.c.2).unwrap();
    let opts = MatmulOpts {
        trans_a: case.trans.0,
        trans_b: case.trans.1,
        accumulate: case.accumulate,
        bias: None,
        round_to: None,
        ..Default::default()
    };
    let kern = batched_matmul_with(
        ctx,
        (&a, case.a.1),
        (&b, case.b.1),
        (&c, case.c.1),
        (m, n, k),
        case.batch,
        opts,
        kernel,
    )
    .unwrap_or_else(|e| panic!("{what}: {e}"));
    ctx.run(&[&kern]);
    let got = c.read_f32(ctx).unwrap();
    let (want, mag) = reference(&case, &av, &bv, &cv);
    let (rel_out, abs_out) = match case.c.2 {
        DType::F32 => (0.0, 0.0),
        DType::F16 => (2f64.powi(-11), 2f64.powi(-25)),
        DType::BF16 => (2f64.powi(-8), 0.0),
        DType::U32 => unreachable!("ids are not computed in"),
    };
    let acc = 1e-5 * (k.max(1) as f64).sqrt();
    for (i, ((&g, &w), mg)) in got.iter().zip(&want).zip(&mag).enumerate() {
        match mg {
            None => assert_eq!(
                g.to_bits(),
                (w as f32).to_bits(),
                "{what}: element {i} is outside every output matrix and changed"
            ),
            Some(mg) => {
                let tol = acc * mg * (1.0 + rel_out) + rel_out * w.abs() + abs_out + 1e-30;
                let err = (g as f64 - w).abs();
                assert!(
                    err <= tol,
                    "{what}: element {i}: got {g}, want {w} (|err| {err:e} > tol {tol:e})"
                );
            }
        }
    }
}

/// nanoGPT's attention sizes: batch b, nh heads of hs, sequence t (C = nh · hs).
#[derive(Clone, Copy, Debug)]
pub struct Attention {
    pub b: usize,
    pub nh: usize,
    pub t: usize,
    pub hs: usize,
}

impl Attention {
    fn c(&self) -> usize {
        self.nh * self.hs
    }

    /// q, k or v of every (batch, head) inside qkv [B, T, 3C] (`which` 0, 1, 2): head h of
    /// batch b starts at b·T·3C + which·C + h·hs, rows 3C apart.
    pub fn qkv_layout(&self, which: usize) -> MatrixLayout {
        MatrixLayout {
            offset: which * self.c(),
            ld: 3 * self.c(),
            batch_stride: [self.t * 3 * self.c(), self.hs],
        }
    }

    /// y or dy [B, T, C] seen as [B, nh] matrices [T, hs] (transpose(1, 2).view is a layout).
    pub fn y_layout(&self) -> MatrixLayout {
        MatrixLayout {
            offset: 0,
            ld: self.c(),
            batch_stride: [self.t * self.c(), self.hs],
        }
    }

    pub fn s_layout(&self) -> MatrixLayout {
        MatrixLayout::stacked(self.t, self.t, [self.b, self.nh])
    }

    /// Attention's batched products forward and backward in these layouts, every operand of
    /// dtype `dt` (seeds from `seed`): S = q·kᵀ, y = Pd·v, dPd = dy·vᵀ, dv = Pdᵀ·dy,
    /// dq = dS·k, dk = dSᵀ·q, and dk again accumulating (a second micro-batch).
    pub fn cases(&self, dt: DType, seed: u64) -> Vec<(&'static str, Case)> {
        let (t, hs) = (self.t, self.hs);
        let qkv = |which| (self.b * t * 3 * self.c(), self.qkv_layout(which), dt);
        let att = (self.b * self.nh * t * t, self.s_layout(), dt);
        let y = (self.b * t * self.c(), self.y_layout(), dt);
        let products = [
            (
                "S = q kT",
                (t, t, hs),
                (false, true),
                false,
                qkv(0),
                qkv(1),
                att,
            ),
            (
                "y = Pd v",
                (t, hs, t),
                (false, false),
                false,
                att,
                qkv(2),
                y,
            ),
            (
                "dPd = dy vT",
                (t, t, hs),
                (false, true),
                false,
                y,
                qkv(2),
                att,
            ),
            (
                "dv = PdT dy",
                (t, hs, t),
                (true, false),
                false,
                att,
                y,
                qkv(2),
            ),
            (
                "dq = dS k",
                (t, hs, t),
                (false, false),
                false,
                att,
                qkv(1),
                qkv(0),
            ),
            (
                "dk = dST q",
                (t, hs, t),
                (true, false),
                false,
                att,
                qkv(0),
                qkv(1),
            ),
            (
                "dk += dST q",
                (t, hs, t),
                (true, false),
                true,
                att,
                qkv(0),
                qkv(1),
            ),
        ];
        products
            .into_iter()
            .enumerate()
            .map(|(i, (what, mnk, trans, accumulate, a, b, c))| {
                let case = Case {
                    mnk,
                    batch: [self.b, self.nh],
                    trans,
                    accumulate,
                    a,
                    b,
                    c,
                    seed: seed + i as u64,
                };
                (what, case)
            })
            .collect()
    }
}
