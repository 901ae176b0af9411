//! Every product the layers send to tensor cores, in the layouts and with the options the
//! layers use, against f64 references, with both fragment shapes (`--tensor-cores on:8x8`
//! and `on:16x16`): Linear's forward `y = x·Wᵀ + b`, input gradient `dx = dy·W` and weight
//! gradient `dW += round_f16(dyᵀ·x)` (src/nn/layers/linear.rs) at a GPT's sizes (the
//! attention and MLP projections, and the tied lm_head whose weight is the token embedding),
//! and attention's batched products Q·Kᵀ and P·V, forward and backward
//! (src/nn/layers/attention.rs). Where the adapter has no f16 cooperative matrices the tests
//! say NOT CHECKED; CI runs them on Mesa 26's lavapipe (`scripts/lavapipe-coop.sh`).

mod common;

use common::batched_ref::{self, Attention};
use common::matmul_ref::{Case, check, quantised, reference};
use common::{bits, coop_ctx};
use webgpu_amp::ops::matmul::{MatmulKernel, MatmulOpts, matmul};
use webgpu_amp::{DType, GpuContext, Storage, Tensor};

use DType::{F16 as H, F32 as F};

/// (name, rows, in, out): a GPT with C = 48, 4C-wide MLP and a 65-token vocabulary, at
/// B·T = 2·33 rows.
const LINEARS: [(&str, usize, usize, usize); 4] = [
    ("c_attn", 66, 48, 144),
    ("mlp c_fc", 66, 48, 192),
    ("mlp c_proj", 66, 192, 48),
    ("lm_head (tied to wte)", 66, 48, 65),
];

/// Linear's forward (with an f16 or f32 bias, or none as lm_head has) and input gradient.
#[test]
fn linear_forward_and_input_gradient_on_tensor_cores_match_f64() {
    for edge in [8, 16] {
        let Some(ctx) = coop_ctx(edge, "Linear's products on tensor cores") else {
            continue;
        };
        let body = MatmulKernel::Auto.resolve(ctx, Storage::F16, Storage::F16);
        assert_eq!(body, MatmulKernel::Coop, "f16 products run on tensor cores");
        for (i, &(name, rows, inp, out)) in LINEARS.iter().enumerate() {
            let bias = match i % 3 {
                0 => Some(H),
                1 => Some(F),
                _ => None,
            };
            let bias = if name.starts_with("lm_head") {
                None
            } else {
                bias
            };
            let seed = 10 * i as u64;
            // y[rows, out] = x[rows, in] · W[out, in]ᵀ + b
            let fwd: Case = (
                (rows, out, inp),
                (false, true),
                (H, H, H),
                bias,
                false,
                seed,
            );
            check(
                &format!("{edge}x{edge} {name} forward"),
                ctx,
                MatmulKernel::Auto,
                fwd,
            );
            // dx[rows, in] = dy[rows, out] · W[out, in]
            let dx: Case = (
                (rows, inp, out),
                (false, false),
                (H, H, H),
                None,
                false,
                seed + 5,
            );
            check(
                &format!("{edge}x{edge} {name} dx"),
                ctx,
                MatmulKernel::Auto,
                dx,
            );
        }
    }
}

/// dW[out, in] += round_f16(dy[rows, out]ᵀ · x[rows, in]) into the f32 gradient (the tied
/// lm_head's lands in the embedding's gradient the same way), and the rounding is real: a sum
/// of 1 + 2^-12 lands as 1.
#[test]
fn linear_weight_gradient_on_tensor_cores_rounds_to_f16_and_accumulates() {
    for edge in [8, 16] {
        let Some(ctx) = coop_ctx(edge, "Linear's weight gradient on tensor cores") else {
            continue;
        };
        for (i, &(name, rows, inp, out)) in LINEARS.iter().enumerate() {
            let what = format!("{edge}x{edge} {name} dW");
            let seed = 100 + 10 * i as u64;
            let dyv = quantised(rows * out, seed, H);
            let xv = quantised(rows * inp, seed + 1, H);
            let before = quantised(out * inp, seed + 2, F);
            let got = weight_gradient(ctx, (&dyv, &xv, &before), (rows, inp, out));
            // got = f32(r + before) with r = round_f16(s'), s' the f32 sum: off from
            // s + before by f32 accumulation, one f16 rounding and one f32 rounding.
            let (s, mag) = reference(&dyv, &xv, (out, inp, rows), true, false, None, None);
            let acc = 1e-5 * (rows as f64).sqrt();
            for (j, ((&g, &b), (&s, &m))) in
                got.iter().zip(&before).zip(s.iter().zip(&mag)).enumerate()
            {
                let tol = acc * m * 1.001
                    + 2f64.powi(-11) * s.abs()
                    + 2f64.powi(-25)
                    + 2f64.powi(-24) * (g as f64).abs();
                let err = (g as f64 - b as f64 - s).abs();
                assert!(
                    err <= tol,
                    "{what}: element {j}: got {g} - {b}, want {s} (|err| {err:e} > {tol:e})"
                );
            }
        }
        let got = weight_gradient(
            ctx,
            (&[1.0, 1.0], &[1.0, 2f32.powi(-12)], &[0.5]),
            (2, 1, 1),
        );
        assert_eq!(
            got,
            [1.5],
            "{edge}x{edge}: 1 + 2^-12 must round to 1 in f16"
        );
    }
}

/// `dW += dyᵀ·x` as src/nn/layers/linear.rs runs it, with `before` in dW.
fn weight_gradient(
    ctx: &GpuContext,
    (dy, x, before): (&[f32], &[f32], &[f32]),
    (rows, inp, out): (usize, usize, usize),
) -> Vec<f32> {
    let dy = Tensor::from_f32(ctx, dy, &[rows, out], H).unwrap();
    let x = Tensor::from_f32(ctx, x, &[rows, inp], H).unwrap();
    let dw = Tensor::from_f32(ctx, before, &[out, inp], F).unwrap();
    let opts = MatmulOpts {
        trans_a: true,
        accumulate: true,
        round_to: Some(H),
        ..Default::default()
    };
    let k = matmul(ctx, &dy, &x, &dw, opts).unwrap();
    assert!(k.label.starts_with("matmul_coop::"), "{}", k.label);
    ctx.run(&[&k]);
    dw.read_f32(ctx).unwrap()
}

/// Q·Kᵀ and P·V forward and backward, heads interleaved in qkv [B, T, 3C] as nanoGPT keeps
/// them: T = 37 (odd, across fragments), hs = 16; and the same bits on a second run.
#[test]
fn attention_batched_products_on_tensor_cores_match_f64() {
    let dims = Attention {
        b: 2,
        nh: 3,
        t: 37,
        hs: 16,
    };
    for edge in [8, 16] {
        let Some(ctx) = coop_ctx(edge, "attention's batched products on tensor cores") else {
            continue;
        };
        for (what, case) in dims.cases(H, 300) {
            let what = format!("{edge}x{edge} {what}");
            batched_ref::check(&what, ctx, MatmulKernel::Coop, case);
            batched_ref::check(&what, ctx, MatmulKernel::Auto, case);
        }
        let q = Tensor::from_f32(ctx, &quantised(2 * 37 * 144, 7, H), &[2 * 37 * 144], H).unwrap();
        let run = || {
            let s = Tensor::zeros(ctx, &[2 * 3 * 37 * 37], F);
            let nt = MatmulOpts {
                trans_b: true,
                ..Default::default()
            };
            let k = webgpu_amp::ops::matmul::batched_matmul(
                ctx,
                &q,
                dims.qkv_layout(0),
                &q,
                dims.qkv_layout(1),
                &s,
                dims.s_layout(),
                37,
                37,
                16,
                [2, 3],
                nt,
            )
            .unwrap();
            assert!(k.label.starts_with("matmul_coop::"), "{}", k.label);
            ctx.run(&[&k]);
            bits(&s.read_f32(ctx).unwrap())
        };
        assert_eq!(run(), run(), "{edge}x{edge}: S = q·kᵀ differs run to run");
    }
}
