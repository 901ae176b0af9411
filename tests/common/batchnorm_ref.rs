//! PyTorch's BatchNorm in f64 on the CPU (`torch.nn.BatchNorm{1,2}d` over `[N, C, S]`): the
//! forward with batch or running statistics, the running update and the backward, and the
//! GPU calls the BatchNorm tests share.

use webgpu_amp::ops::batchnorm::{Affine, BatchNorm, RunningStats};
use webgpu_amp::{DType, GpuContext, Tensor};

use super::values::{run, upload};

/// Per-channel batch statistics: (mean, biased variance).
pub fn batch_stats(x: &[f32], (n, c, s): (usize, usize, usize)) -> Vec<(f64, f64)> {
    (0..c)
        .map(|ch| {
            let vals: Vec<f64> = (0..n)
                .flat_map(|i| (0..s).map(move |k| (i * c + ch) * s + k))
                .map(|i| x[i] as f64)
                .collect();
            let m = vals.len() as f64;
            let mean = vals.iter().sum::<f64>() / m;
            let var = vals.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / m;
            (mean, var)
        })
        .collect()
}

/// `y = (x − mean) / sqrt(var + eps) · w + b` with per-channel `(mean, var)`.
pub fn normalise(
    x: &[f32],
    dims: (usize, usize, usize),
    stats: &[(f64, f64)],
    (w, b): (Option<&[f32]>, Option<&[f32]>),
    eps: f64,
) -> Vec<f64> {
    let (_, c, s) = dims;
    x.iter()
        .enumerate()
        .map(|(i, &v)| {
            let ch = (i / s) % c;
            let (mean, var) = stats[ch];
            let wv = w.map_or(1.0, |w| w[ch] as f64);
            let bv = b.map_or(0.0, |b| b[ch] as f64);
            (v as f64 - mean) / (var + eps).sqrt() * wv + bv
        })
        .collect()
}

/// PyTorch's running update: `(1 − f) · old + f · new` with the unbiased variance; `f` the
/// momentum, or `1 / count` (after the increment) for `momentum=None`.
pub fn running_update(
    (mean, var, count): (&mut [f64], &mut [f64], &mut i64),
    stats: &[(f64, f64)],
    m: usize,
    momentum: Option<f64>,
) {
    *count += 1;
    let f = momentum.unwrap_or(1.0 / *count as f64);
    for (ch, &(bm, bv)) in stats.iter().enumerate() {
        mean[ch] = (1.0 - f) * mean[ch] + f * bm;
        var[ch] = (1.0 - f) * var[ch] + f * bv * m as f64 / (m as f64 - 1.0);
    }
}

/// The analytic backward on batch statistics: (dx, dweight, dbias).
pub fn backward(
    x: &[f32],
    dy: &[f64],
    dims: (usize, usize, usize),
    w: Option<&[f32]>,
    eps: f64,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (n, c, s) = dims;
    let stats = batch_stats(x, dims);
    let m = (n * s) as f64;
    let xhat = |i: usize| {
        let (mean, var) = stats[(i / s) % c];
        (x[i] as f64 - mean) / (var + eps).sqrt()
    };
    let (mut dw, mut db) = (vec![0.0; c], vec![0.0; c]);
    for (i, &g) in dy.iter().enumerate() {
        let ch = (i / s) % c;
        dw[ch] += g * xhat(i);
        db[ch] += g;
    }
    let dx = (0..x.len())
        .map(|i| {
            let ch = (i / s) % c;
            let invstd = 1.0 / (stats[ch].1 + eps).sqrt();
            let wv = w.map_or(1.0, |w| w[ch] as f64);
            (dy[i] - db[ch] / m - xhat(i) * dw[ch] / m) * invstd * wv
        })
        .collect();
    (dx, dw, db)
}

pub fn to_f32(v: &[f64]) -> Vec<f32> {
    v.iter().map(|&x| x as f32).collect()
}

/// One BatchNorm's tensors on the GPU: input and output in `act`, affine parameters in
/// `param` (absent when `w` is), the saved statistics f32.
pub struct BnTensors {
    pub x: Tensor,
    pub y: Tensor,
    pub weight: Option<Tensor>,
    pub bias: Option<Tensor>,
    pub saved: Tensor,
}

impl BnTensors {
    pub fn new(
        ctx: &GpuContext,
        (xv, shape): (&[f32], &[usize]),
        (w, b): (Option<&[f32]>, Option<&[f32]>),
        (act, param): (DType, DType),
    ) -> Self {
        let c = shape[1];
        BnTensors {
            x: upload(ctx, xv, shape, act),
            y: Tensor::zeros(ctx, shape, act),
            weight: w.map(|w| upload(ctx, w, &[c], param)),
            bias: b.map(|b| upload(ctx, b, &[c], param)),
            saved: Tensor::zeros(ctx, &[2 * c], DType::F32),
        }
    }

    pub fn affine(&self) -> Affine<'_> {
        Affine {
            weight: self.weight.as_ref(),
            bias: self.bias.as_ref(),
        }
    }

    /// The training forward, then the backward of `dy` into `dx` and the parameter gradients
    /// `grads` (added to what they hold), in one submission.
    pub fn train_and_backward(
        &self,
        ctx: &GpuContext,
        bn: &BatchNorm,
        running: Option<&RunningStats>,
        (dy, dx): (&Tensor, &Tensor),
        grads: (Option<&Tensor>, Option<&Tensor>),
    ) {
        let mut ks = bn
            .train_forward(ctx, (&self.x, &self.y), self.affine(), &self.saved, running)
            .unwrap();
        let backward = bn.backward(ctx, (&self.x, dy, dx), self.affine(), &self.saved, grads);
        ks.extend(backward.unwrap());
        run(ctx, &ks);
    }

    /// Run the training forward; returns y.
    pub fn train(
        &self,
        ctx: &GpuContext,
        bn: &BatchNorm,
        running: Option<&RunningStats>,
    ) -> Vec<f32> {
        let ks = bn
            .train_forward(ctx, (&self.x, &self.y), self.affine(), &self.saved, running)
            .unwrap();
        run(ctx, &ks);
        self.y.read_f32(ctx).unwrap()
    }
}
