//! Average pooling against f64 CPU references on f32, native f16, packed f16 and bf16
//! storages: `nn.AvgPool2d` (stride = kernel, overlapping windows, the tail floor mode drops)
//! and `nn.AdaptiveAvgPool2d` (global, PyTorch's overlapping bins, an output larger than its
//! input), forward and backward, gradients against finite differences, and the errors.

mod common;

use common::values::{quantised, run, storages, ulp, upload};
use common::{assert_close, ctx, expect_err, rand_vec};
use webgpu_amp::ops::avgpool::{self, AvgPool};
use webgpu_amp::{DType, Tensor};

/// Input rows [start, end) of output o: a window, or PyTorch's adaptive bin.
fn bin(pool: AvgPool, o: usize, size: usize, outs: usize) -> (usize, usize) {
    match pool {
        AvgPool::Window { kernel, stride } => (o * stride, o * stride + kernel),
        AvgPool::Adaptive { .. } => ((o * size) / outs, ((o + 1) * size).div_ceil(outs)),
    }
}

/// Forward in f64: `[planes, ho, wo]`.
fn forward_ref(x: &[f32], planes: usize, (h, w): (usize, usize), pool: AvgPool) -> Vec<f64> {
    let (ho, wo) = pool.output_hw(h, w).unwrap();
    let mut y = Vec::new();
    for p in 0..planes {
        for oy in 0..ho {
            for ox in 0..wo {
                let (r0, r1) = bin(pool, oy, h, ho);
                let (c0, c1) = bin(pool, ox, w, wo);
                let mut sum = 0.0;
                for iy in r0..r1 {
                    for ix in c0..c1 {
                        sum += x[(p * h + iy) * w + ix] as f64;
                    }
                }
                y.push(sum / ((r1 - r0) * (c1 - c0)) as f64);
            }
        }
    }
    y
}

/// Backward in f64, as the scatter of each output's gradient over its window.
fn backward_ref(dy: &[f32], planes: usize, (h, w): (usize, usize), pool: AvgPool) -> Vec<f64> {
    let (ho, wo) = pool.output_hw(h, w).unwrap();
    let mut dx = vec![0.0; planes * h * w];
    for p in 0..planes {
        for oy in 0..ho {
            for ox in 0..wo {
                let (r0, r1) = bin(pool, oy, h, ho);
                let (c0, c1) = bin(pool, ox, w, wo);
                let g = dy[(p * ho + oy) * wo + ox] as f64 / ((r1 - r0) * (c1 - c0)) as f64;
                for iy in r0..r1 {
                    for ix in c0..c1 {
                        dx[(p * h + iy) * w + ix] += g;
                    }
                }
            }
        }
    }
    dx
}

fn to_f32(v: &[f64]) -> Vec<f32> {
    v.iter().map(|&x| x as f32).collect()
}

/// (shape of x, pool): windows that tile, that overlap, that drop a tail; adaptive global,
/// overlapping bins, and an output larger than the input.
fn cases() -> Vec<([usize; 4], AvgPool)> {
    vec![
        ([2, 3, 8, 8], AvgPool::window(2)),
        ([2, 3, 4, 4], AvgPool::window(4)),
        (
            [1, 2, 7, 9],
            AvgPool::Window {
                kernel: 3,
                stride: 2,
            },
        ),
        ([2, 3, 7, 5], AvgPool::window(2)),
        (
            [3, 5, 4, 4],
            AvgPool::Adaptive {
                height: 1,
                width: 1,
            },
        ),
        (
            [2, 2, 7, 5],
            AvgPool::Adaptive {
                height: 3,
                width: 2,
            },
        ),
        (
            [1, 3, 3, 2],
            AvgPool::Adaptive {
                height: 5,
                width: 3,
            },
        ),
    ]
}

#[test]
fn forward_and_backward_match_reference_on_every_storage() {
    for (name, ctx, dtype) in storages() {
        for (shape, pool) in cases() {
            let [n, c, h, w] = shape;
            let (ho, wo) = pool.output_hw(h, w).unwrap();
            let xv = quantised(n * c * h * w, 1, 2.0, dtype);
            let dyv = quantised(n * c * ho * wo, 2, 1.0, dtype);
            let x = upload(ctx, &xv, &shape, dtype);
            let y = Tensor::zeros(ctx, &[n, c, ho, wo], dtype);
            let dy = upload(ctx, &dyv, &[n, c, ho, wo], dtype);
            // Garbage in dx first: the backward overwrites every element.
            let dx = upload(ctx, &vec![7.0; xv.len()], &shape, dtype);
            run(
                ctx,
                &[
                    avgpool::forward(ctx, &x, &y, pool).unwrap(),
                    avgpool::backward(ctx, &dy, &dx, pool).unwrap(),
                ],
            );
            let what = format!("{name} {shape:?} {pool:?}");
            let tol = ulp(dtype).max(1e-6);
            let want = to_f32(&forward_ref(&xv, n * c, (h, w), pool));
            assert_close(
                &format!("{what} y"),
                &y.read_f32(ctx).unwrap(),
                &want,
                1e-6,
                tol,
            );
            let want = to_f32(&backward_ref(&dyv, n * c, (h, w), pool));
            assert_close(
                &format!("{what} dx"),
                &dx.read_f32(ctx).unwrap(),
                &want,
                1e-6,
                tol,
            );
        }
    }
}

#[test]
fn gradients_match_finite_differences_f32() {
    // L = Σ R · pool(x): linear in x, so central differences are exact up to rounding.
    let ctx = ctx();
    for (shape, pool) in cases() {
        let [n, c, h, w] = shape;
        let (ho, wo) = pool.output_hw(h, w).unwrap();
        let xv = rand_vec(n * c * h * w, 3);
        let r = rand_vec(n * c * ho * wo, 4);
        let loss = |x: &[f32]| -> f64 {
            let y = forward_ref(x, n * c, (h, w), pool);
            y.iter().zip(&r).map(|(y, r)| y * *r as f64).sum()
        };
        let hstep = 2f32.powi(-8);
        let fd: Vec<f32> = (0..xv.len())
            .map(|i| {
                let mut x = xv.clone();
                x[i] += hstep;
                let up = loss(&x);
                x[i] -= 2.0 * hstep;
                ((up - loss(&x)) / (2.0 * hstep as f64)) as f32
            })
            .collect();
        let dy = upload(ctx, &r, &[n, c, ho, wo], DType::F32);
        let dx = Tensor::zeros(ctx, &shape, DType::F32);
        run(ctx, &[avgpool::backward(ctx, &dy, &dx, pool).unwrap()]);
        assert_close(
            &format!("{shape:?} {pool:?} dx vs finite differences"),
            &dx.read_f32(ctx).unwrap(),
            &fd,
            1e-5,
            1e-4,
        );
    }
}

#[test]
fn rejects_bad_shapes() {
    let ctx = ctx();
    let x = Tensor::zeros(ctx, &[1, 2, 4, 4], DType::F32);
    let y = Tensor::zeros(ctx, &[1, 2, 2, 2], DType::F32);
    expect_err(
        avgpool::forward(ctx, &x, &y, AvgPool::window(0)),
        &["kernel and stride must be at least 1"],
    );
    expect_err(
        avgpool::forward(ctx, &x, &y, AvgPool::window(5)),
        &["smaller than the kernel 5"],
    );
    expect_err(
        avgpool::forward(ctx, &x, &y, AvgPool::window(4)),
        &["expected [1, 2, 1, 1]"],
    );
    expect_err(
        avgpool::forward(
            ctx,
            &x,
            &y,
            AvgPool::Adaptive {
                height: 0,
                width: 1,
            },
        ),
        &["must be at least 1x1"],
    );
    let flat = Tensor::zeros(ctx, &[2, 16], DType::F32);
    expect_err(
        avgpool::forward(ctx, &flat, &y, AvgPool::window(2)),
        &["must be 4-D"],
    );
    let y16 = Tensor::zeros(ctx, &[1, 2, 2, 2], DType::BF16);
    expect_err(
        avgpool::forward(ctx, &x, &y16, AvgPool::window(2)),
        &["storages differ (f32 and bf16)"],
    );
}
