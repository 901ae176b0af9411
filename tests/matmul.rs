//! Matmul against an f64 CPU reference on every storage, transpose, kernel body and awkward
//! shape; inf propagation; linear-layer gradients against finite differences.

mod common;

use common::matmul_ref::{
    Case, assert_matches, check, check_guarded, check_split, kernels, quantised,
};
use common::values::storages;
use common::{ctx, ctx_native, ctx_packed, rand_vec};
use webgpu_amp::ops::matmul::{MatmulKernel, MatmulOpts, matmul, matmul_with};
use webgpu_amp::{DType, Tensor};

const TRANSPOSES: [(bool, bool); 4] = [(false, false), (true, false), (false, true), (true, true)];

#[test]
fn every_storage_transpose_and_kernel_matches_f64_reference_at_awkward_shapes() {
    // 1x1x1; odd N (packed words span rows); even N (whole-word stores); sizes that are not
    // multiples of any tile; K larger than a tile.
    let shapes = [
        (1, 1, 1),
        (3, 6, 5),
        (17, 33, 65),
        (65, 127, 31),
        (65, 126, 31),
        (130, 2, 9),
    ];
    for (name, ctx, dt) in storages() {
        for kernel in kernels(ctx) {
            for (si, &shape) in shapes.iter().enumerate() {
                for (ti, &trans) in TRANSPOSES.iter().enumerate() {
                    // Transposes only change index arithmetic, shared by every storage: the
                    // tiled body (slow to compile on CPU adapters) runs all four in f32 and
                    // the plain and doubly transposed ones in 16-bit storages.
                    if kernel == MatmulKernel::Tiled && dt != DType::F32 && trans.0 != trans.1 {
                        continue;
                    }
                    let case: Case = (
                        shape,
                        trans,
                        (dt, dt, dt),
                        None,
                        false,
                        (si * 4 + ti) as u64,
                    );
                    check(name, ctx, kernel, case);
                }
            }
        }
    }
}

#[test]
fn mixed_storages_bias_and_accumulate() {
    use DType::{BF16 as BF, F16 as H, F32 as F};
    // Weight gradients of a linear layer: 16-bit inputs, f32 accumulating output.
    let weight_grads: [Case; 2] = [
        ((20, 37, 45), (true, false), (H, H, F), None, true, 10),
        ((20, 37, 45), (true, false), (BF, BF, F), None, true, 11),
    ];
    let mixes: [Case; 6] = [
        // Forward of a linear layer: f16 x, f16 W (transposed), f16 y, bias.
        ((9, 34, 40), (false, true), (H, H, H), Some(H), false, 12),
        ((9, 34, 40), (false, true), (H, H, H), Some(F), false, 13),
        // Every input a different storage, output packed/native half, odd N, accumulate.
        ((7, 19, 23), (false, false), (F, H, H), Some(BF), true, 14),
        ((7, 19, 23), (true, true), (BF, F, BF), Some(H), true, 15),
        ((8, 18, 23), (false, true), (H, BF, H), Some(F), true, 16),
        ((8, 18, 23), (false, false), (F, F, F), Some(F), true, 17),
    ];
    for (name, ctx) in [("native", ctx_native()), ("packed", ctx_packed())] {
        for kernel in kernels(ctx) {
            // Storages only change the load/store helpers and the epilogue, shared by both
            // bodies: the mixes run on the direct body only (fast to compile).
            let tiled = kernel == MatmulKernel::Tiled;
            let cases = weight_grads
                .iter()
                .chain(if tiled { &[][..] } else { &mixes[..] });
            for &case in cases {
                check(name, ctx, kernel, case);
            }
        }
    }
}

/// The tiled SIMT body (what GPUs run; forced onto this adapter) in the variants it picks per
/// dispatch: the interior variant (whole 128-wide tiles, K of whole slices: 16-byte loads in
/// each operand's stored orientation, no bounds tests) in every layout, the checked edge
/// variant at awkward sizes (1, 7, 17, 4095; K not a multiple of BK), and split-K (forced,
/// aligned and checked; and as the adapter's table plans it over a long K), every storage.
#[test]
fn tiled_interior_edge_and_split_k_variants_match_f64_reference() {
    for (name, ctx, dt) in storages() {
        if !kernels(ctx).contains(&MatmulKernel::Tiled) {
            continue; // said loudly by kernels()
        }
        let tiled = MatmulKernel::Tiled;
        let mut seed = 300;
        let mut run = |case: Case, split: Option<u32>| {
            seed += 1;
            let (shape, trans, dts, bias, acc, _) = case;
            check_split(
                name,
                ctx,
                tiled,
                (shape, trans, dts, bias, acc, seed),
                split,
            );
        };
        for trans in TRANSPOSES {
            // 16-bit storages share the index math with f32: two layouts there.
            if dt != DType::F32 && trans.0 != trans.1 {
                continue;
            }
            run(
                ((128, 256, 64), trans, (dt, dt, dt), Some(dt), false, 0),
                None,
            );
            // Trusted (no runtime checks): the range invariant, inside guard bands.
            check_guarded(
                name,
                ctx,
                tiled,
                ((128, 256, 64), trans, (dt, dt, dt), None, false, 7),
            );
            run(((4095, 7, 17), trans, (dt, dt, dt), None, false, 0), None);
        }
        run(
            (
                (1, 4095, 9),
                (false, true),
                (dt, dt, DType::F32),
                None,
                true,
                0,
            ),
            None,
        );
        run(
            (
                (128, 128, 256),
                (false, false),
                (dt, dt, dt),
                None,
                false,
                0,
            ),
            Some(4),
        );
        run(
            (
                (65, 70, 300),
                (true, false),
                (dt, dt, DType::F32),
                Some(DType::F32),
                true,
                0,
            ),
            Some(3),
        );
        run(
            (
                (7, 17, 4095),
                (true, false),
                (dt, dt, DType::F32),
                None,
                true,
                0,
            ),
            None,
        );
    }
}

#[test]
fn k_zero_gives_bias_or_leaves_c_unchanged() {
    for (name, ctx, dt) in storages() {
        for kernel in kernels(ctx) {
            for accumulate in [false, true] {
                for bias in [None, Some(dt)] {
                    let case: Case = (
                        (5, 7, 0),
                        (false, false),
                        (dt, dt, dt),
                        bias,
                        accumulate,
                        20,
                    );
                    check(name, ctx, kernel, case);
                }
            }
        }
    }
}

#[test]
fn size_512_cube_f32_and_native_f16() {
    for (name, ctx, dt) in [
        ("f32", ctx(), DType::F32),
        ("f16 native", ctx_native(), DType::F16),
    ] {
        let case: Case = (
            (512, 512, 512),
            (false, false),
            (dt, dt, dt),
            None,
            false,
            30,
        );
        check(name, ctx, MatmulKernel::Auto, case);
    }
}

#[test]
fn inf_in_f16_input_reaches_its_output_row() {
    let (m, n, k) = (6, 10, 12);
    for (name, ctx) in [("native", ctx_native()), ("packed", ctx_packed())] {
        for kernel in kernels(ctx) {
            let mut av = quantised(m * k, 40, DType::F16);
            let bv = quantised(k * n, 41, DType::F16);
            av[2 * k + 5] = f32::INFINITY; // row 2
            let a = Tensor::from_f32(ctx, &av, &[m, k], DType::F16).unwrap();
            let b = Tensor::from_f32(ctx, &bv, &[k, n], DType::F16).unwrap();
            let c = Tensor::zeros(ctx, &[m, n], DType::F16);
            let kern = matmul_with(ctx, &a, &b, &c, MatmulOpts::default(), kernel).unwrap();
            ctx.run(&[&kern]);
            let got = c.read_f32(ctx).unwrap();
            for i in 0..m {
                for j in 0..n {
                    let g = got[i * n + j];
                    let what = format!("{name} {} c[{i},{j}] = {g}", kernel.name());
                    if i == 2 {
                        let bv = bv[5 * n + j];
                        if bv > 0.0 {
                            assert_eq!(g, f32::INFINITY, "{what}");
                        } else if bv < 0.0 {
                            assert_eq!(g, f32::NEG_INFINITY, "{what}");
                        } else {
                            assert!(g.is_nan(), "{what}: inf·0 must be NaN");
                        }
                    } else {
                        assert!(g.is_finite(), "{what}: other rows stay finite");
                    }
                }
            }
        }
    }
}

/// L(x, W) = Σ w_out ⊙ (x · Wᵀ) for x [B, I], W [O, I]. dL/dy = w_out, so the matmul
/// gradients of a linear layer are dx = w_out · W and dW = w_outᵀ · x.
fn linear_loss(x: &[f64], w: &[f64], w_out: &[f64], (bsz, i_n, o_n): (usize, usize, usize)) -> f64 {
    let mut l = 0.0;
    for r in 0..bsz {
        for o in 0..o_n {
            let y: f64 = (0..i_n).map(|p| x[r * i_n + p] * w[o * i_n + p]).sum();
            l += w_out[r * o_n + o] * y;
        }
    }
    l
}

fn finite_difference(f: impl Fn(&[f64]) -> f64, at: &[f64]) -> Vec<f64> {
    let h = 1e-3;
    (0..at.len())
        .map(|i| {
            let mut p = at.to_vec();
            p[i] += h;
            let up = f(&p);
            p[i] -= 2.0 * h;
            (up - f(&p)) / (2.0 * h)
        })
        .collect()
}

#[test]
fn linear_backward_matches_finite_differences() {
    let (bsz, i_n, o_n) = (5, 13, 7);
    for (name, ctx, dt) in storages() {
        for kernel in kernels(ctx) {
            let xv = quantised(bsz * i_n, 50, dt);
            let wv = quantised(o_n * i_n, 51, dt);
            let dyv = quantised(bsz * o_n, 52, dt);
            let to64 = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<_>>();
            let (x64, w64, dy64) = (to64(&xv), to64(&wv), to64(&dyv));
            let dims = (bsz, i_n, o_n);
            let want_dx = finite_difference(|x| linear_loss(x, &w64, &dy64, dims), &x64);
            let want_dw = finite_difference(|w| linear_loss(&x64, w, &dy64, dims), &w64);

            let x = Tensor::from_f32(ctx, &xv, &[bsz, i_n], dt).unwrap();
            let w = Tensor::from_f32(ctx, &wv, &[o_n, i_n], dt).unwrap();
            let dy = Tensor::from_f32(ctx, &dyv, &[bsz, o_n], dt).unwrap();
            let dx = Tensor::zeros(ctx, &[bsz, i_n], dt);
            // Weight gradients land in f32 and accumulate: start from a previous micro-batch.
            let dw_prev = rand_vec(o_n * i_n, 53);
            let dw = Tensor::from_f32(ctx, &dw_prev, &[o_n, i_n], DType::F32).unwrap();
            let k_dx = matmul_with(ctx, &dy, &w, &dx, MatmulOpts::default(), kernel).unwrap();
            let dw_opts = MatmulOpts {
                trans_a: true,
                accumulate: true,
                ..Default::default()
            };
            let k_dw = matmul_with(ctx, &dy, &x, &dw, dw_opts, kernel).unwrap();
            ctx.run(&[&k_dx, &k_dw]);
            let got_dx = dx.read_f32(ctx).unwrap();
            let got_dw: Vec<f32> = dw
                .read_f32(ctx)
                .unwrap()
                .iter()
                .zip(&dw_prev)
                .map(|(g, p)| g - p)
                .collect();
            // Finite differences of a bilinear function are exact up to f64 rounding; the
            // GPU side adds f32 accumulation and the output rounding of dx.
            let what = format!("{name} {}", kernel.name());
            let mag_dx: Vec<f64> = want_dx.iter().map(|_| o_n as f64).collect();
            let mag_dw: Vec<f64> = want_dw.iter().map(|_| 2.0 + bsz as f64).collect();
            assert_matches(&format!("{what} dx"), &got_dx, &want_dx, &mag_dx, o_n, dt);
            assert_matches(
                &format!("{what} dW"),
                &got_dw,
                &want_dw,
                &mag_dw,
                bsz,
                DType::F32,
            );
        }
    }
}

#[test]
fn bad_shapes_are_clear_errors() {
    let ctx = ctx();
    let t = |shape: &[usize]| Tensor::zeros(ctx, shape, DType::F32);
    let err =
        |a: &Tensor, b: &Tensor, c: &Tensor, opts: MatmulOpts| match matmul(ctx, a, b, c, opts) {
            Ok(_) => panic!(
                "{:?}·{:?}→{:?} should fail",
                a.shape(),
                b.shape(),
                c.shape()
            ),
            Err(e) => e.to_string(),
        };
    let e = err(&t(&[2, 3]), &t(&[4, 5]), &t(&[2, 5]), MatmulOpts::default());
    assert!(
        e.contains("matmul") && e.contains("[2, 3]") && e.contains("[4, 5]"),
        "{e}"
    );
    let e = err(
        &t(&[2, 3, 1]),
        &t(&[3, 5]),
        &t(&[2, 5]),
        MatmulOpts::default(),
    );
    assert!(e.contains("2-D"), "{e}");
    let bias = t(&[4]);
    let opts = MatmulOpts {
        bias: Some(&bias),
        ..Default::default()
    };
    let e = err(&t(&[2, 3]), &t(&[3, 5]), &t(&[2, 5]), opts);
    assert!(e.contains("bias"), "{e}");
    // The same shapes are fine once transposed as declared.
    let opts = MatmulOpts {
        trans_a: true,
        trans_b: true,
        ..Default::default()
    };
    assert!(matmul(ctx, &t(&[3, 2]), &t(&[5, 3]), &t(&[2, 5]), opts).is_ok());
    // Native and packed f16 never meet in one call.
    let native = Tensor::zeros_with_storage(ctx, &[2, 3], webgpu_amp::Storage::F16);
    let packed = Tensor::zeros_with_storage(ctx, &[3, 5], webgpu_amp::Storage::F16Packed);
    let e = err(&native, &packed, &t(&[2, 5]), MatmulOpts::default());
    assert!(e.contains("native and packed"), "{e}");
}

#[test]
fn gradients_round_to_the_forward_dtype_before_accumulating() {
    // dW = dyᵀ · x with one element per product (K = 1): 1 + 2^-12 rounds to 1 in f16 and
    // bf16; 2^16 overflows f16 (inf, as PyTorch's f16 weight gradient does) but not bf16;
    // accumulation adds the rounded value to the f32 gradient's 0.5.
    let ctx = ctx();
    let dy = Tensor::from_f32(ctx, &[1.0, 1.0], &[1, 2], DType::F32).unwrap();
    let x = Tensor::from_f32(ctx, &[1.0 + 2f32.powi(-12), 65536.0], &[1, 2], DType::F32).unwrap();
    for (round_to, want) in [
        (None, [0.5 + 1.0 + 2f32.powi(-12), 0.5 + 65536.0]),
        (Some(DType::F16), [1.5, f32::INFINITY]),
        (Some(DType::BF16), [1.5, 0.5 + 65536.0]),
    ] {
        for kernel in kernels(ctx) {
            // dW [2, 2] = dyᵀ [2, 1] · x [1, 2]; check its diagonal.
            let dw = Tensor::from_f32(ctx, &[0.5; 4], &[2, 2], DType::F32).unwrap();
            let opts = MatmulOpts {
                trans_a: true,
                accumulate: true,
                round_to,
                ..Default::default()
            };
            let k = matmul_with(ctx, &dy, &x, &dw, opts, kernel).unwrap();
            ctx.run(&[&k]);
            let got = dw.read_f32(ctx).unwrap();
            assert_eq!(
                [got[0], got[3]],
                want,
                "{round_to:?} {kernel:?}: diagonal of {got:?}"
            );
        }
    }
}
