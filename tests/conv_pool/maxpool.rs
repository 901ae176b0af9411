//! Max pool 2d against PyTorch's rule (first max wins, NaN always wins) on every storage:
//! forward, backward summing over overlapping windows, NaN and infinities, shape errors.

use std::sync::Arc;

use webgpu_amp::gpu::GpuBuffer;
use webgpu_amp::ops::pool::{self, Pool2dParams};
use webgpu_amp::{GpuContext, Storage, Tensor};

use super::common::{self, ctx_native, rand_vec};
use super::{ctx_for, quantised, unit_roundoff, upload};

/// PyTorch's max pool: max and flat index of each window (strict > keeps the first max; a NaN
/// always wins, so the last NaN of a window is its argmax).
fn maxpool_ref(x: &[f32], nchw: [usize; 4], p: Pool2dParams) -> (Vec<f32>, Vec<u32>) {
    let [n, c, h, w] = nchw;
    let (ho, wo) = pool::pool2d_output_hw(h, w, p).unwrap();
    let (mut vals, mut idx) = (Vec::new(), Vec::new());
    for plane in 0..n * c {
        for oy in 0..ho {
            for ox in 0..wo {
                let (y0, x0) = (oy * p.stride, ox * p.stride);
                let mut best = (f32::NEG_INFINITY, plane * h * w + y0 * w + x0);
                for ky in 0..p.kernel {
                    for kx in 0..p.kernel {
                        let i = plane * h * w + (y0 + ky) * w + x0 + kx;
                        if x[i] > best.0 || x[i].is_nan() {
                            best = (x[i], i);
                        }
                    }
                }
                vals.push(best.0);
                idx.push(best.1 as u32);
            }
        }
    }
    (vals, idx)
}

fn read_u32(ctx: &GpuContext, buf: &Arc<GpuBuffer>, n: usize) -> Vec<u32> {
    let bytes = ctx.read_bytes(buf, 0, (4 * n).max(4) as u64).unwrap();
    bytemuck::pod_collect_to_vec::<u8, u32>(&bytes[..4 * n])
}

/// Forward and backward of one pool against the reference; returns dx for further checks.
fn check_pool(x_data: &[f32], nchw: [usize; 4], p: Pool2dParams, storage: Storage) -> Vec<f32> {
    let ctx = ctx_for(storage);
    let [n, c, _, _] = nchw;
    let (ho, wo) = pool::pool2d_output_hw(nchw[2], nchw[3], p).unwrap();
    let y_shape = [n, c, ho, wo];
    let ny = n * c * ho * wo;
    let xq: Vec<f32> = x_data.iter().map(|&v| storage.dtype().round(v)).collect();
    let dyv = quantised(storage, ny, 99);
    let x = upload(ctx, &xq, &nchw, storage);
    let y = upload(ctx, &vec![7.0; ny], &y_shape, storage);
    let dy = upload(ctx, &dyv, &y_shape, storage);
    let dx = upload(ctx, &vec![7.0; xq.len()], &nchw, storage);
    let indices = pool::indices_buffer(ctx, ny);
    let f = pool::maxpool2d_forward(ctx, &x, &y, &indices, p).unwrap();
    let b = pool::maxpool2d_backward(ctx, &dy, &indices, &dx, p).unwrap();
    ctx.run(&[&f, &b]);
    let label = format!("maxpool {nchw:?} {p:?} {storage:?}");
    let (want_y, want_idx) = maxpool_ref(&xq, nchw, p);
    let got_y = y.read_f32(ctx).unwrap();
    for (i, (g, w)) in got_y.iter().zip(&want_y).enumerate() {
        assert!(
            g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
            "{label}: y[{i}] = {g}, want {w}"
        );
    }
    assert_eq!(read_u32(ctx, &indices, ny), want_idx, "{label}: indices");
    // dx: dy summed (in f64, rounded once) at each argmax.
    let mut want_dx = vec![0.0f64; xq.len()];
    for (o, &i) in want_idx.iter().enumerate() {
        want_dx[i as usize] += dyv[o] as f64;
    }
    let got_dx = dx.read_f32(ctx).unwrap();
    for (i, (g, w)) in got_dx.iter().zip(&want_dx).enumerate() {
        let tol = 1e-6 + unit_roundoff(storage) * w.abs() * 1.01;
        assert!(
            (*g as f64 - w).abs() <= tol,
            "{label}: dx[{i}] = {g}, want {w}"
        );
    }
    got_dx
}

#[test]
fn maxpool_matches_reference_on_every_storage() {
    let configs = [
        Pool2dParams {
            kernel: 2,
            stride: 2,
        },
        Pool2dParams {
            kernel: 3,
            stride: 2,
        }, // overlapping windows
        Pool2dParams {
            kernel: 3,
            stride: 1,
        },
        Pool2dParams {
            kernel: 2,
            stride: 3,
        }, // gaps: some inputs are in no window
    ];
    for storage in Storage::ALL {
        for p in configs {
            // Odd sizes: floor mode drops the tail, and odd rows split packed words.
            for nchw in [[2, 3, 7, 9], [1, 2, 8, 6]] {
                let n: usize = nchw.iter().product();
                check_pool(&rand_vec(n, 11), nchw, p, storage);
            }
        }
        // mnist-cnn's pools, batch 2.
        let p = Pool2dParams {
            kernel: 2,
            stride: 2,
        };
        check_pool(&rand_vec(2 * 32 * 28 * 28, 12), [2, 32, 28, 28], p, storage);
    }
}

#[test]
fn maxpool_backward_sums_over_overlapping_windows() {
    // One large value in the middle of a 5x5 input is the max of all four 3x3 windows
    // (stride 2 windows overlap in the middle row and column); its gradient is their sum.
    let mut x = rand_vec(25, 3).iter().map(|v| v * 0.5).collect::<Vec<_>>();
    x[12] = 10.0;
    for storage in Storage::ALL {
        let dx = check_pool(
            &x,
            [1, 1, 5, 5],
            Pool2dParams {
                kernel: 3,
                stride: 2,
            },
            storage,
        );
        let dyv = quantised(storage, 4, 99);
        let want: f32 = dyv.iter().sum();
        assert!(
            (dx[12] - want).abs() <= 1e-6 + unit_roundoff(storage) as f32 * want.abs() * 1.01,
            "{storage:?}: dx at the shared max {} != sum of dy {want}",
            dx[12]
        );
        assert!(dx.iter().enumerate().all(|(i, &v)| i == 12 || v == 0.0));
    }
}

#[test]
fn maxpool_propagates_nan_and_handles_infinities() {
    // [1, 1, 4, 6], 2x2 windows: a NaN in the first window (not at its first position), two
    // NaNs in the second, -inf everywhere in the third, +inf in the fourth.
    let nan = f32::NAN;
    let ninf = f32::NEG_INFINITY;
    #[rustfmt::skip]
    let x = vec![
        1.0, nan,   nan,  2.0,  ninf, ninf,
        3.0, 0.5,   4.0,  nan,  ninf, ninf,
        0.0, 1.0,   f32::INFINITY, -1.0, 0.25, -0.5,
        2.0, -3.0,  5.0,  6.0,  0.125, 0.75,
    ];
    for storage in Storage::ALL {
        let dx = check_pool(
            &x,
            [1, 1, 4, 6],
            Pool2dParams {
                kernel: 2,
                stride: 2,
            },
            storage,
        );
        // Gradients land on the NaNs PyTorch picks (the last NaN of each window).
        assert!(
            dx[1] != 0.0 && dx[9] != 0.0 && dx[2] == 0.0,
            "{storage:?}: {dx:?}"
        );
    }
}

#[test]
fn maxpool_rejects_bad_shapes() {
    let ctx = ctx_native();
    let x = Tensor::zeros_with_storage(ctx, &[1, 2, 5, 5], Storage::F32);
    let y = Tensor::zeros_with_storage(ctx, &[1, 2, 3, 3], Storage::F32);
    let idx = pool::indices_buffer(ctx, 2 * 2 * 2);
    let p = Pool2dParams {
        kernel: 2,
        stride: 2,
    };
    common::expect_err(
        pool::maxpool2d_forward(ctx, &x, &y, &idx, p),
        &["maxpool2d_forward", "expected [1, 2, 2, 2]"],
    );
    let y = Tensor::zeros_with_storage(ctx, &[1, 2, 2, 2], Storage::F32);
    assert!(pool::maxpool2d_forward(ctx, &x, &y, &idx, p).is_ok());
    let small = pool::indices_buffer(ctx, 3);
    common::expect_err(
        pool::maxpool2d_forward(ctx, &x, &y, &small, p),
        &["indices buffer holds 12 bytes"],
    );
    common::expect_err(
        pool::pool2d_output_hw(1, 5, p),
        &["input 1x5 is smaller than the kernel 2"],
    );
    common::expect_err(
        pool::pool2d_output_hw(
            5,
            5,
            Pool2dParams {
                kernel: 2,
                stride: 0,
            },
        ),
        &["kernel and stride must be at least 1"],
    );
}
