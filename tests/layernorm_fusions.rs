//! LayerNorm's fusions give the bits of the kernels they replace, on every storage: the
//! forward with a residual's add (`layernorm_forward_add` = `add` then `layernorm_forward`,
//! the sum included), and the backward's low-dtype copy of the input gradient (= the
//! backward, then `cast`), with an odd width so packed rows start mid-word.

mod common;

use common::bits;
use common::values::{quantised, run, storages, upload};
use webgpu_amp::ops::elementwise;
use webgpu_amp::ops::layernorm::{
    InputGrad, layernorm_backward_into, layernorm_forward, layernorm_forward_add,
};
use webgpu_amp::{DType, Tensor};

const EPS: f32 = 1e-5;

#[test]
fn forward_with_the_residual_add_equals_add_then_layernorm() {
    let (rows, cols) = (5, 37);
    let n = rows * cols;
    for (name, ctx, low) in storages() {
        // The residual stream in f32 (AMP) or in the low dtype (pure low precision), the
        // branch's output in the low dtype, the LayerNorm's output in it too.
        for stream in [DType::F32, low] {
            let av = quantised(n, 1, 3.0, stream);
            let bv = quantised(n, 2, 3.0, low);
            let wv = quantised(cols, 3, 1.0, DType::F32);
            let biasv = quantised(cols, 4, 0.5, DType::F32);
            let a = upload(ctx, &av, &[rows, cols], stream);
            let b = upload(ctx, &bv, &[rows, cols], low);
            let w = upload(ctx, &wv, &[cols], DType::F32);
            let bias = upload(ctx, &biasv, &[cols], DType::F32);
            let outputs = || {
                let t = |shape: &[usize], d| Tensor::zeros(ctx, shape, d);
                (
                    t(&[rows, cols], stream),
                    t(&[rows, cols], low),
                    t(&[rows], DType::F32),
                    t(&[rows], DType::F32),
                )
            };
            let (sum1, y1, m1, r1) = outputs();
            let add = elementwise::add(ctx, &a, &b, &sum1).unwrap();
            let ln = layernorm_forward(ctx, &sum1, &w, Some(&bias), &y1, &m1, &r1, EPS);
            run(ctx, &[add, ln.unwrap()]);
            let (sum2, y2, m2, r2) = outputs();
            let fused =
                layernorm_forward_add(ctx, (&a, &b), &sum2, &w, Some(&bias), &y2, (&m2, &r2), EPS);
            run(ctx, &[fused.unwrap()]);
            let read = |t: &Tensor| bits(&t.read_f32(ctx).unwrap());
            let what = format!("{name}, stream {stream:?}");
            assert_eq!(read(&sum1), read(&sum2), "{what}: the sum");
            assert_eq!(read(&y1), read(&y2), "{what}: y");
            assert_eq!(read(&m1), read(&m2), "{what}: mean");
            assert_eq!(read(&r1), read(&r2), "{what}: rstd");
        }
    }
}

#[test]
fn backward_low_copy_equals_the_backward_then_a_cast() {
    let (rows, cols) = (70, 37); // three chunks of rows: 32, 32, 6
    let n = rows * cols;
    for (name, ctx, low) in storages() {
        for accumulate in [false, true] {
            let xv = quantised(n, 5, 2.0, DType::F32);
            let dyv = quantised(n, 6, 1.0, low);
            let wv = quantised(cols, 7, 1.0, DType::F32);
            let skip = quantised(n, 8, 1.0, DType::F32);
            let x = upload(ctx, &xv, &[rows, cols], DType::F32);
            let dy = upload(ctx, &dyv, &[rows, cols], low);
            let w = upload(ctx, &wv, &[cols], DType::F32);
            let (mean, rstd) = (
                Tensor::zeros(ctx, &[rows], DType::F32),
                Tensor::zeros(ctx, &[rows], DType::F32),
            );
            let y = Tensor::zeros(ctx, &[rows, cols], low);
            let fwd = || layernorm_forward(ctx, &x, &w, None, &y, &mean, &rstd, EPS).unwrap();
            let grads = |copy: Option<&Tensor>| {
                let dx = upload(ctx, &skip, &[rows, cols], DType::F32);
                let dw = Tensor::zeros(ctx, &[cols], DType::F32);
                let db = Tensor::zeros(ctx, &[cols], DType::F32);
                let input_grad = InputGrad {
                    dx: &dx,
                    accumulate,
                    low_copy: copy,
                };
                let mut ks = vec![fwd()];
                ks.extend(
                    layernorm_backward_into(
                        ctx,
                        &dy,
                        &x,
                        &w,
                        (&mean, &rstd),
                        input_grad,
                        &dw,
                        Some(&db),
                    )
                    .unwrap(),
                );
                (ks, dx, dw, db)
            };
            let cast_out = Tensor::zeros(ctx, &[rows, cols], low);
            let (mut ks, dx1, dw1, db1) = grads(None);
            ks.push(elementwise::cast(ctx, &dx1, &cast_out).unwrap());
            run(ctx, &ks);
            let copy = Tensor::zeros(ctx, &[rows, cols], low);
            let (ks, dx2, dw2, db2) = grads(Some(&copy));
            run(ctx, &ks);
            let read = |t: &Tensor| bits(&t.read_f32(ctx).unwrap());
            let what = format!("{name}, accumulate {accumulate}");
            assert_eq!(read(&dx1), read(&dx2), "{what}: dx");
            assert_eq!(read(&cast_out), read(&copy), "{what}: the low copy");
            assert_eq!(read(&dw1), read(&dw2), "{what}: dweight");
            assert_eq!(read(&db1), read(&db2), "{what}: dbias");
        }
    }
}
