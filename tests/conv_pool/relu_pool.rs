//! ReLU then max pool in one kernel each way (`pool::maxpool2d_relu_forward`/`_backward`)
//! against the two kernels each replaces, bit for bit, on every storage: the ReLU's output,
//! the pool's output and argmax, the pool's input gradient and the ReLU's. Where the windows
//! do not tile the input the fused kernels refuse (the layers then keep the two kernels).

use webgpu_amp::ops::pool::{self, Pool2dParams};
use webgpu_amp::ops::unary::{self, RELU};
use webgpu_amp::{Storage, Tensor};

use super::common::{self, ctx_native, rand_vec};
use super::{ctx_for, quantised, upload};

/// Inputs with the cases ReLU and max decide on the bits: ±0, NaN, ±inf, negatives.
fn awkward(n: usize, seed: u64) -> Vec<f32> {
    let specials = [0.0, -0.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -1.5];
    rand_vec(n, seed)
        .into_iter()
        .enumerate()
        .map(|(i, v)| if i % 7 == 3 { specials[(i / 7) % 6] } else { v })
        .collect()
}

fn bits(t: &Tensor, storage: Storage) -> Vec<u32> {
    let ctx = ctx_for(storage);
    t.read_f32(ctx)
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

fn same_bits(label: &str, what: &str, fused: &Tensor, separate: &Tensor, storage: Storage) {
    let (f, s) = (bits(fused, storage), bits(separate, storage));
    let first = f.iter().zip(&s).position(|(a, b)| a != b);
    assert!(
        first.is_none(),
        "{label}: {what}[{}] fused {:#x}, separate {:#x}",
        first.unwrap_or(0),
        f[first.unwrap_or(0)],
        s[first.unwrap_or(0)]
    );
}

/// One shape on one storage: the fused kernels against relu + maxpool and maxpool + relu
/// backward.
fn check_fused(nchw: [usize; 4], kernel: usize, storage: Storage, seed: u64) {
    let ctx = ctx_for(storage);
    let p = Pool2dParams {
        kernel,
        stride: kernel,
    };
    let [n, c, h, w] = nchw;
    let y_shape = [n, c, h / kernel, w / kernel];
    let (nx, ny) = (n * c * h * w, y_shape.iter().product::<usize>());
    let mut pre_data: Vec<f32> = awkward(nx, seed)
        .iter()
        .map(|&v| storage.dtype().round(v))
        .collect();
    // The first window all negative: its max is a ReLU'd zero, its gradient zeroed by relu'.
    for r in 0..kernel {
        for c in 0..kernel {
            pre_data[r * w + c] = -1.0 - (r * kernel + c) as f32;
        }
    }
    let mut dy_data = quantised(storage, ny, seed + 1);
    dy_data[ny / 2] = f32::INFINITY;
    dy_data[ny / 3] = -0.0;
    let pre = upload(ctx, &pre_data, &nchw, storage);
    let dy = upload(ctx, &dy_data, &y_shape, storage);
    let fresh = |shape: &[usize]| upload(ctx, &vec![7.0; shape.iter().product()], shape, storage);
    let (act_s, y_s, dx_s, dpre_s) = (fresh(&nchw), fresh(&y_shape), fresh(&nchw), fresh(&nchw));
    let (act_f, y_f, dx_f, dpre_f) = (fresh(&nchw), fresh(&y_shape), fresh(&nchw), fresh(&nchw));
    let (idx_s, idx_f) = (pool::indices_buffer(ctx, ny), pool::indices_buffer(ctx, ny));
    let separate = [
        unary::forward(ctx, &RELU, &pre, &act_s).unwrap(),
        pool::maxpool2d_forward(ctx, &act_s, &y_s, &idx_s, p).unwrap(),
        pool::maxpool2d_backward(ctx, &dy, &idx_s, &dx_s, p).unwrap(),
        unary::backward(ctx, &RELU, &pre, &dx_s, &dpre_s).unwrap(),
    ];
    let fused = [
        pool::maxpool2d_relu_forward(ctx, &pre, &act_f, &y_f, &idx_f, p).unwrap(),
        pool::maxpool2d_relu_backward(ctx, &dy, &idx_f, &pre, &dx_f, &dpre_f, p).unwrap(),
    ];
    ctx.run(&separate.iter().collect::<Vec<_>>());
    ctx.run(&fused.iter().collect::<Vec<_>>());
    let label = format!("relu+maxpool {nchw:?} kernel {kernel} {storage:?}");
    same_bits(&label, "relu output", &act_f, &act_s, storage);
    same_bits(&label, "pool output", &y_f, &y_s, storage);
    let read = |b| ctx.read_bytes(b, 0, 4 * ny as u64).unwrap();
    assert_eq!(read(&idx_f), read(&idx_s), "{label}: indices");
    same_bits(&label, "pool input gradient", &dx_f, &dx_s, storage);
    same_bits(&label, "relu input gradient", &dpre_f, &dpre_s, storage);
    // Not vacuous: some ReLU zeroed a routed gradient, and some passed one.
    let dx = dx_s.read_f32(ctx).unwrap();
    let dpre = dpre_s.read_f32(ctx).unwrap();
    let zeroed = dx.iter().zip(&dpre).any(|(a, b)| *a != 0.0 && *b == 0.0);
    let passed = dpre.iter().any(|v| *v != 0.0);
    assert!(
        zeroed && passed,
        "{label}: the case does not exercise relu'"
    );
}

#[test]
fn fused_relu_maxpool_equals_the_two_kernels_on_every_storage() {
    for storage in Storage::ALL {
        // Even rows; odd rows (a packed word straddles two rows); 3x3 windows; mnist-cnn's.
        check_fused([2, 3, 8, 6], 2, storage, 1);
        check_fused([1, 2, 6, 10], 2, storage, 2);
        check_fused([2, 2, 9, 15], 3, storage, 3);
        check_fused([2, 4, 28, 28], 2, storage, 4);
    }
}

#[test]
fn fused_relu_maxpool_refuses_windows_that_do_not_tile() {
    let ctx = ctx_native();
    let tensor = |shape: &[usize]| Tensor::zeros_with_storage(ctx, shape, Storage::F32);
    // A 7x8 input under 2x2 windows (a row left over), and overlapping 3x3 windows, stride 2.
    for (x_shape, y_shape, kernel, stride) in [
        ([1, 2, 7, 8], [1, 2, 3, 4], 2, 2),
        ([1, 2, 7, 7], [1, 2, 3, 3], 3, 2),
    ] {
        let p = Pool2dParams { kernel, stride };
        assert!(!pool::tiles(x_shape[2], x_shape[3], p));
        let (pre, act, y) = (tensor(&x_shape), tensor(&x_shape), tensor(&y_shape));
        let idx = pool::indices_buffer(ctx, y.numel());
        // The separate kernels accept the shape; the fused one says why not.
        assert!(pool::maxpool2d_forward(ctx, &act, &y, &idx, p).is_ok());
        common::expect_err(
            pool::maxpool2d_relu_forward(ctx, &pre, &act, &y, &idx, p),
            &["maxpool2d_relu_forward", "does not tile"],
        );
        common::expect_err(
            pool::maxpool2d_relu_backward(ctx, &y, &idx, &pre, &act, &tensor(&x_shape), p),
            &["maxpool2d_relu_backward", "does not tile"],
        );
    }
    // The ReLU's input in another storage than its output.
    let p = Pool2dParams {
        kernel: 2,
        stride: 2,
    };
    let pre = Tensor::zeros_with_storage(ctx, &[1, 1, 4, 4], Storage::BF16);
    let (act, y) = (tensor(&[1, 1, 4, 4]), tensor(&[1, 1, 2, 2]));
    let idx = pool::indices_buffer(ctx, 4);
    common::expect_err(
        pool::maxpool2d_relu_forward(ctx, &pre, &act, &y, &idx, p),
        &["differ in shape or storage"],
    );
}
