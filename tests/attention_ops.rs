//! Attention kernels against f64 CPU references: the strided batched matmul (the exact
//! nanoGPT attention layouts, padded odd layouts, every transpose, both kernel bodies,
//! accumulate, large batches, errors; its reference is tests/common/batched_ref.rs) and the
//! causal softmax forward and backward (`attention_ops/softmax.rs`: masking, attention dropout,
//! finite differences, determinism; `attention_ops/softmax_edges.rs`: non-finite inputs,
//! errors, both bodies), and the whole manual path around them with grouped-query attention
//! (`attention_ops/manual.rs`), on f32, native f16, packed f16 and bf16 storages.

mod common;
#[path = "attention_ops/manual.rs"]
mod manual;
#[path = "attention_ops/softmax.rs"]
mod softmax;
#[path = "attention_ops/softmax_edges.rs"]
mod softmax_edges;

use common::batched_ref::{Attention, Case, check};
use common::matmul_ref::kernels;
use common::values::quantised;
use common::{ctx, ctx_native, ctx_packed};
use webgpu_amp::ops::attention::{
    SoftmaxBody, SoftmaxParams, causal_softmax_backward, causal_softmax_forward,
};
use webgpu_amp::ops::dropout::{DropoutKey, DropoutState, keep};
use webgpu_amp::ops::matmul::{MatmulKernel, MatmulOpts, MatrixLayout, batched_matmul};
use webgpu_amp::{DType, GpuContext, Tensor};

/// (name, context, low dtype): f32, native f16, packed f16, bf16.
fn storages() -> [(&'static str, &'static GpuContext, DType); 4] {
    [
        ("f32", ctx(), DType::F32),
        ("f16 native", ctx_native(), DType::F16),
        ("f16 packed", ctx_packed(), DType::F16),
        ("bf16", ctx(), DType::BF16),
    ]
}

// ---- batched matmul ---------------------------------------------------------------------------

/// nanoGPT attention sizes for the tests: B = 2, nh = 2, T = 5 (odd), hs = 4, C = 8.
const B: usize = 2;
const NH: usize = 2;
const T: usize = 5;
const HS: usize = 4;
const C: usize = NH * HS;

/// The same sizes as layouts and products (tests/common/batched_ref.rs).
const DIMS: Attention = Attention {
    b: B,
    nh: NH,
    t: T,
    hs: HS,
};

fn qkv_layout(which: usize) -> MatrixLayout {
    DIMS.qkv_layout(which)
}

fn s_layout() -> MatrixLayout {
    DIMS.s_layout()
}

#[test]
fn attention_products_in_the_exact_nanogpt_layouts() {
    for (name, ctx, dt) in storages() {
        for kernel in kernels(ctx) {
            for (what, case) in DIMS.cases(dt, 100) {
                check(&format!("{name} {what}"), ctx, kernel, case);
            }
        }
    }
}

/// A padded layout for a stored [rows, cols] matrix of batch [3, 2]: offset, ld past the
/// columns, batch strides with gaps. Returns the layout and the buffer length it needs.
fn padded(rows: usize, cols: usize, offset: usize, extra_ld: usize) -> (usize, MatrixLayout) {
    let ld = cols + extra_ld;
    let inner = rows * ld + 3;
    let outer = 2 * inner + 5;
    let l = MatrixLayout {
        offset,
        ld,
        batch_stride: [outer, inner],
    };
    (offset + 2 * outer + inner + rows * ld + 4, l)
}

#[test]
fn padded_odd_layouts_every_transpose_and_storage() {
    let (m, n, k) = (7, 5, 9);
    for (name, ctx, dt) in storages() {
        for kernel in kernels(ctx) {
            for (ti, &(ta, tb)) in [(false, false), (true, false), (false, true), (true, true)]
                .iter()
                .enumerate()
            {
                // The tiled body is slow to compile on CPU adapters: all transposes in f32,
                // plain and doubly transposed in 16-bit storages (index math is shared).
                if kernel == MatmulKernel::Tiled && dt != DType::F32 && ta != tb {
                    continue;
                }
                let (ar, ac) = if ta { (k, m) } else { (m, k) };
                let (br, bc) = if tb { (n, k) } else { (k, n) };
                let a = padded(ar, ac, 3, 2);
                let b = padded(br, bc, 1, 1);
                // c: an odd offset and ld (every element stored on its own, atomically when
                // packed), and an all-even layout (whole-word column pairs).
                let even = MatrixLayout {
                    offset: 2,
                    ld: 8,
                    batch_stride: [126, 60],
                };
                for (ci, c) in [padded(m, n, 1, 0), (370, even)].into_iter().enumerate() {
                    for accumulate in [false, true] {
                        let case = Case {
                            mnk: (m, n, k),
                            batch: [3, 2],
                            trans: (ta, tb),
                            accumulate,
                            a: (a.0, a.1, dt),
                            b: (b.0, b.1, dt),
                            c: (c.0, c.1, dt),
                            seed: 200 + (ti * 4 + ci * 2) as u64 + accumulate as u64,
                        };
                        check(name, ctx, kernel, case);
                    }
                }
            }
        }
    }
}

#[test]
fn mixed_storages_f16_inputs_f32_output() {
    use DType::{BF16, F16, F32};
    for (name, ctx) in [("native", ctx_native()), ("packed", ctx_packed())] {
        for (a_dt, b_dt, c_dt) in [(F16, F16, F32), (F32, BF16, F16), (BF16, F16, BF16)] {
            let case = Case {
                mnk: (T, HS, T),
                batch: [B, NH],
                trans: (true, false),
                accumulate: true,
                a: (B * NH * T * T, s_layout(), a_dt),
                b: (B * T * 3 * C, qkv_layout(0), b_dt),
                c: (B * T * 3 * C, qkv_layout(1), c_dt),
                seed: 300,
            };
            check(name, ctx, MatmulKernel::Direct, case);
        }
    }
}

#[test]
fn batches_past_the_grid_limit_fold_into_y() {
    // 300 x 250 = 75,000 batches of 1x2 · 2x2 products: more than 65,535 workgroups in z.
    let batch = [300, 250];
    let nb = batch[0] * batch[1];
    let (m, n, k) = (1, 2, 2);
    let a = MatrixLayout::stacked(m, k, batch);
    let b = MatrixLayout::stacked(k, n, batch);
    let c = MatrixLayout::stacked(m, n, batch);
    for (name, ctx, dt) in [
        ("f32", ctx(), DType::F32),
        ("f16 packed", ctx_packed(), DType::F16),
    ] {
        let case = Case {
            mnk: (m, n, k),
            batch,
            trans: (false, false),
            accumulate: false,
            a: (nb * m * k, a, dt),
            b: (nb * k * n, b, dt),
            c: (nb * m * n, c, dt),
            seed: 400,
        };
        check(name, ctx, MatmulKernel::Direct, case);
    }
}

#[test]
fn zero_sized_products() {
    let ctx = ctx();
    for (m, n, k) in [(0, 3, 2), (3, 0, 2), (3, 4, 0)] {
        for accumulate in [false, true] {
            let case = Case {
                mnk: (m, n, k),
                batch: [2, 1],
                trans: (false, false),
                accumulate,
                a: (16, MatrixLayout::stacked(m, k, [2, 1]), DType::F32),
                b: (16, MatrixLayout::stacked(k, n, [2, 1]), DType::F32),
                c: (24, MatrixLayout::stacked(m, n, [2, 1]), DType::F32),
                seed: 500,
            };
            check("f32", ctx, MatmulKernel::Auto, case);
        }
    }
}

#[test]
fn bad_layouts_are_clear_errors() {
    let ctx = ctx();
    let t = |n: usize| Tensor::zeros(ctx, &[n], DType::F32);
    let (a, b, c) = (t(B * T * 3 * C), t(B * T * 3 * C), t(B * NH * T * T));
    let run = |al: MatrixLayout, bl: MatrixLayout, cl: MatrixLayout, c: &Tensor, opts| {
        match batched_matmul(ctx, &a, al, &b, bl, c, cl, T, T, HS, [B, NH], opts) {
            Ok(_) => panic!("{al:?} {bl:?} {cl:?} should fail"),
            Err(e) => e.to_string(),
        }
    };
    let trans_b = MatmulOpts {
        trans_b: true,
        ..Default::default()
    };
    // The valid product first.
    assert!(
        batched_matmul(
            ctx,
            &a,
            qkv_layout(0),
            &b,
            qkv_layout(1),
            &c,
            s_layout(),
            T,
            T,
            HS,
            [B, NH],
            trans_b
        )
        .is_ok()
    );
    // a reaches past its tensor (offset one head too far).
    let e = run(
        qkv_layout(0).with_offset(3 * C),
        qkv_layout(1),
        s_layout(),
        &c,
        trans_b,
    );
    assert!(
        e.contains("batched_matmul") && e.contains("a:") && e.contains("past the tensor"),
        "{e}"
    );
    // b's batch stride too large.
    let e = run(
        qkv_layout(0),
        qkv_layout(1).with_batch_stride([2 * T * 3 * C, HS]),
        s_layout(),
        &c,
        trans_b,
    );
    assert!(e.contains("b:") && e.contains("past the tensor"), "{e}");
    // c too small for the batch.
    let small = t(B * NH * T * T - 1);
    let e = run(qkv_layout(0), qkv_layout(1), s_layout(), &small, trans_b);
    assert!(e.contains("c:") && e.contains("past the tensor"), "{e}");
    // Rows that overlap (ld below the columns).
    let e = run(
        MatrixLayout {
            ld: HS - 1,
            ..qkv_layout(0)
        },
        qkv_layout(1),
        s_layout(),
        &c,
        trans_b,
    );
    assert!(e.contains("a:") && e.contains("row stride"), "{e}");
    // Output matrices that overlap (every batch entry onto the same matrix) would race.
    let e = run(
        qkv_layout(0),
        qkv_layout(1),
        MatrixLayout::contiguous(T, T),
        &c,
        trans_b,
    );
    assert!(e.contains("overlap"), "{e}");
    let e = run(
        qkv_layout(0),
        qkv_layout(1),
        s_layout().with_batch_stride([NH * T * T, T * T - 1]),
        &c,
        trans_b,
    );
    assert!(e.contains("overlap"), "{e}");
    // No bias here.
    let bias = t(T);
    let e = run(
        qkv_layout(0),
        qkv_layout(1),
        s_layout(),
        &c,
        MatmulOpts {
            bias: Some(&bias),
            trans_b: true,
            ..Default::default()
        },
    );
    assert!(e.contains("bias"), "{e}");
    // Native and packed f16 never meet in one call.
    let native = Tensor::zeros_with_storage(ctx, &[B * T * 3 * C], webgpu_amp::Storage::F16);
    let packed = Tensor::zeros_with_storage(ctx, &[B * NH * T * T], webgpu_amp::Storage::F16Packed);
    let e = match batched_matmul(
        ctx,
        &native,
        qkv_layout(0),
        &native,
        qkv_layout(1),
        &packed,
        s_layout(),
        T,
        T,
        HS,
        [B, NH],
        trans_b,
    ) {
        Ok(_) => panic!("native and packed should fail"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("native and packed"), "{e}");
}
