//! The fused forward and backward of the unary table (`NAME_forward_backward`, which a Linear's
//! backward runs to recompute an activation and make its input gradient at once): both of its
//! outputs are bit for bit what the op's own forward and backward kernels write, for every op,
//! every storage (packed f16's word halves included, at even and odd lengths) and non-finite
//! inputs, so the fused step trains on the same bits.

mod common;

use common::values::{quantised, storages, upload};
use webgpu_amp::ops::unary::{self, UNARY_OPS, UnaryOp};
use webgpu_amp::{DType, GpuContext, Tensor};

/// Inputs on both sides of every kink and saturation point, non-finite ones, then random.
fn inputs(n: usize, dtype: DType) -> (Vec<f32>, Vec<f32>) {
    let special = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        -1.28,
        12.0,
        -12.0,
        40.0,
        -40.0,
    ];
    let mut x = quantised(n, 61, 6.0, dtype);
    for (v, s) in x.iter_mut().zip(special) {
        *v = dtype.round(s);
    }
    let mut dy = quantised(n, 62, 2.0, dtype);
    if n > 12 {
        dy[11] = f32::INFINITY;
        dy[12] = f32::NAN;
    }
    (x, dy)
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// (y, dx) from the two separate kernels and from the fused one.
fn both_ways(
    ctx: &GpuContext,
    op: &'static UnaryOp,
    x: &[f32],
    dy: &[f32],
    input: DType,
    output: DType,
) -> [[Vec<f32>; 2]; 2] {
    let n = x.len();
    let xt = upload(ctx, x, &[n], input);
    let dyt = upload(ctx, dy, &[n], input);
    let fresh = || Tensor::zeros(ctx, &[n], output);
    let (y, dx, y_fused, dx_fused) = (fresh(), fresh(), fresh(), fresh());
    let f = unary::forward(ctx, op, &xt, &y).unwrap();
    let b = unary::backward(ctx, op, &xt, &dyt, &dx).unwrap();
    let fused = unary::forward_backward(ctx, op, &xt, &dyt, &y_fused, &dx_fused).unwrap();
    ctx.run(&[&f, &b, &fused]);
    let read = |t: &Tensor| t.read_f32(ctx).unwrap();
    [[read(&y), read(&dx)], [read(&y_fused), read(&dx_fused)]]
}

#[test]
fn fused_forward_backward_writes_the_bits_of_the_two_kernels() {
    let mut checked = 0;
    for (name, ctx, low) in storages() {
        // Activations in the low storage, and (the shader's other pairing) outputs in f32.
        for output in [low, DType::F32] {
            for op in UNARY_OPS {
                for n in [1usize, 2, 7, 64, 1001] {
                    let (x, dy) = inputs(n, low);
                    let [[y, dx], [y_fused, dx_fused]] = both_ways(ctx, op, &x, &dy, low, output);
                    let what = format!("{} {name} -> {output} n={n}", op.name);
                    assert_eq!(bits(&y_fused), bits(&y), "{what}: y");
                    assert_eq!(bits(&dx_fused), bits(&dx), "{what}: dx");
                    // Not vacuous: the values are the op's, not left zero.
                    if n >= 64 {
                        assert!(y.iter().filter(|v| **v != 0.0).count() > n / 4, "{what}");
                        assert!(dx.iter().filter(|v| **v != 0.0).count() > n / 4, "{what}");
                    }
                    checked += 1;
                }
            }
        }
    }
    assert_eq!(checked, 4 * 2 * UNARY_OPS.len() * 5);
}

#[test]
fn fused_forward_backward_refuses_storages_its_grid_lacks() {
    let (_, ctx, low) = storages()[1];
    let n = 8;
    let x = Tensor::zeros(ctx, &[n], low);
    let f32_tensor = Tensor::zeros(ctx, &[n], DType::F32);
    let low_tensor = Tensor::zeros(ctx, &[n], low);
    for (dy, y, dx) in [
        (&f32_tensor, &low_tensor, &low_tensor),
        (&low_tensor, &low_tensor, &f32_tensor),
    ] {
        assert!(!unary::fuses(&x, dy, y, dx));
        let err = unary::forward_backward(ctx, UNARY_OPS[0], &x, dy, y, dx)
            .err()
            .expect("refused")
            .to_string();
        assert!(
            err.contains("dy in the storage of x, dx in that of y"),
            "{err}"
        );
    }
    let short = Tensor::zeros(ctx, &[n - 1], low);
    let err = unary::forward_backward(ctx, UNARY_OPS[0], &x, &x, &low_tensor, &short)
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains("differ in length"), "{err}");
}
