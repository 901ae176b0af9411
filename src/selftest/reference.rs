//! CPU references of the selftest, in f64 from the f32 inputs the GPU got (already rounded to
//! the storage dtype), following PyTorch's definitions.

/// `c[M, N] = a[M, K] · b[K, N] (+ bias[N])`.
pub fn matmul(
    a: &[f32],
    b: &[f32],
    bias: Option<&[f32]>,
    m: usize,
    k: usize,
    n: usize,
) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let dot: f64 = (0..k)
                .map(|p| a[i * k + p] as f64 * b[p * n + j] as f64)
                .sum();
            c[i * n + j] = dot + bias.map_or(0.0, |b| b[j] as f64);
        }
    }
    c
}

/// The transpose of a row-major `[rows, cols]` matrix.
pub fn transpose(x: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    (0..cols * rows)
        .map(|i| x[(i % rows) * cols + i / rows])
        .collect()
}

/// Sizes of one convolution: x `[n, c, h, w]`, weight `[o, c, k, k]`, y `[n, o, ho, wo]`.
#[derive(Clone, Copy, Debug)]
pub struct Conv {
    pub n: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub o: usize,
    pub k: usize,
    pub stride: usize,
    pub padding: usize,
}

impl Conv {
    pub fn out_hw(&self) -> (usize, usize) {
        let f = |s: usize| (s + 2 * self.padding - self.k) / self.stride + 1;
        (f(self.h), f(self.w))
    }

    /// Every (output, input, weight) index triple of the convolution.
    fn taps(&self, mut visit: impl FnMut(usize, usize, usize)) {
        let (ho, wo) = self.out_hw();
        for n in 0..self.n {
            for o in 0..self.o {
                for y in 0..ho {
                    for x in 0..wo {
                        let out = ((n * self.o + o) * ho + y) * wo + x;
                        for c in 0..self.c {
                            for ky in 0..self.k {
                                for kx in 0..self.k {
                                    let iy =
                                        (y * self.stride + ky) as isize - self.padding as isize;
                                    let ix =
                                        (x * self.stride + kx) as isize - self.padding as isize;
                                    if iy < 0
                                        || ix < 0
                                        || iy >= self.h as isize
                                        || ix >= self.w as isize
                                    {
                                        continue;
                                    }
                                    let input = ((n * self.c + c) * self.h + iy as usize) * self.w
                                        + ix as usize;
                                    let weight = ((o * self.c + c) * self.k + ky) * self.k + kx;
                                    visit(out, input, weight);
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    pub fn forward(&self, x: &[f32], w: &[f32], bias: &[f32]) -> Vec<f64> {
        let (ho, wo) = self.out_hw();
        let mut y: Vec<f64> = (0..self.n * self.o * ho * wo)
            .map(|i| bias[(i / (ho * wo)) % self.o] as f64)
            .collect();
        self.taps(|o, i, k| y[o] += x[i] as f64 * w[k] as f64);
        y
    }

    pub fn backward_input(&self, dy: &[f32], w: &[f32]) -> Vec<f64> {
        let mut dx = vec![0.0; self.n * self.c * self.h * self.w];
        self.taps(|o, i, k| dx[i] += dy[o] as f64 * w[k] as f64);
        dx
    }

    pub fn backward_weight(&self, x: &[f32], dy: &[f32]) -> Vec<f64> {
        let mut dw = vec![0.0; self.o * self.c * self.k * self.k];
        self.taps(|o, i, k| dw[k] += dy[o] as f64 * x[i] as f64);
        dw
    }
}

/// Max pooling of `[planes, h, w]` with a square window: the outputs and, for each, the
/// index of the first largest input of its window.
pub fn maxpool(
    x: &[f32],
    planes: usize,
    h: usize,
    w: usize,
    k: usize,
    s: usize,
) -> (Vec<f64>, Vec<usize>) {
    let (ho, wo) = ((h - k) / s + 1, (w - k) / s + 1);
    let (mut y, mut at) = (Vec::new(), Vec::new());
    for p in 0..planes {
        for oy in 0..ho {
            for ox in 0..wo {
                let mut best = (f32::NEG_INFINITY, 0);
                for ky in 0..k {
                    for kx in 0..k {
                        let i = (p * h + oy * s + ky) * w + ox * s + kx;
                        if x[i] > best.0 {
                            best = (x[i], i);
                        }
                    }
                }
                y.push(best.0 as f64);
                at.push(best.1);
            }
        }
    }
    (y, at)
}

/// LayerNorm over rows of `cols`: y, and the input and parameter gradients for `dy`
/// (biased variance, rstd = 1 / sqrt(var + eps), as PyTorch).
pub struct LayerNorm {
    pub y: Vec<f64>,
    pub dx: Vec<f64>,
    pub dw: Vec<f64>,
    pub db: Vec<f64>,
}

pub fn layernorm(x: &[f32], w: &[f32], b: &[f32], dy: &[f32], cols: usize, eps: f64) -> LayerNorm {
    let rows = x.len() / cols;
    let mut r = LayerNorm {
        y: vec![0.0; x.len()],
        dx: vec![0.0; x.len()],
        dw: vec![0.0; cols],
        db: vec![0.0; cols],
    };
    for row in 0..rows {
        let xs: Vec<f64> = x[row * cols..][..cols].iter().map(|&v| v as f64).collect();
        let mean = xs.iter().sum::<f64>() / cols as f64;
        let var = xs.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / cols as f64;
        let rstd = 1.0 / (var + eps).sqrt();
        let xhat: Vec<f64> = xs.iter().map(|v| (v - mean) * rstd).collect();
        let g: Vec<f64> = (0..cols)
            .map(|c| dy[row * cols + c] as f64 * w[c] as f64)
            .collect();
        let g_mean = g.iter().sum::<f64>() / cols as f64;
        let gx_mean = g.iter().zip(&xhat).map(|(a, b)| a * b).sum::<f64>() / cols as f64;
        for c in 0..cols {
            let i = row * cols + c;
            r.y[i] = xhat[c] * w[c] as f64 + b[c] as f64;
            r.dx[i] = rstd * (g[c] - g_mean - xhat[c] * gx_mean);
            r.dw[c] += dy[i] as f64 * xhat[c];
            r.db[c] += dy[i] as f64;
        }
    }
    r
}

/// Causal softmax of rows of `t` (row r is query r % t) scaled by `scale`, and its backward
/// for `dp`: `ds = scale · p ⊙ (dp − Σ p ⊙ dp)`.
pub fn causal_softmax(s: &[f32], dp: &[f32], t: usize, scale: f64) -> (Vec<f64>, Vec<f64>) {
    let (mut p, mut ds) = (vec![0.0; s.len()], vec![0.0; s.len()]);
    for row in 0..s.len() / t {
        let i = row % t;
        let base = row * t;
        let m = (0..=i)
            .map(|j| scale * s[base + j] as f64)
            .fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = (0..=i)
            .map(|j| (scale * s[base + j] as f64 - m).exp())
            .sum();
        for j in 0..=i {
            p[base + j] = (scale * s[base + j] as f64 - m).exp() / sum;
        }
        let dot: f64 = (0..=i).map(|j| p[base + j] * dp[base + j] as f64).sum();
        for j in 0..=i {
            ds[base + j] = scale * p[base + j] * (dp[base + j] as f64 - dot);
        }
    }
    (p, ds)
}

/// Causal self-attention of `qkv` `[b, t, 3·nh·hs]` (q, k, v side by side, heads inside each):
/// y `[b, t, nh·hs]`, each row's log-sum-exp `[b, nh, t]`, and dqkv for `dy`.
pub fn attention(
    qkv: &[f32],
    dy: &[f32],
    b: usize,
    nh: usize,
    t: usize,
    hs: usize,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let c = nh * hs;
    let scale = 1.0 / (hs as f64).sqrt();
    let at = |bi: usize, i: usize, part: usize, h: usize, d: usize| {
        (bi * t + i) * 3 * c + part * c + h * hs + d
    };
    let out = |bi: usize, i: usize, h: usize, d: usize| (bi * t + i) * c + h * hs + d;
    let (mut y, mut lse, mut g) = (
        vec![0.0; b * t * c],
        vec![0.0; b * nh * t],
        vec![0.0; qkv.len()],
    );
    for bi in 0..b {
        for h in 0..nh {
            let mut p = vec![0.0; t * t];
            for i in 0..t {
                let x: Vec<f64> = (0..=i)
                    .map(|j| {
                        scale
                            * (0..hs)
                                .map(|d| {
                                    qkv[at(bi, i, 0, h, d)] as f64 * qkv[at(bi, j, 1, h, d)] as f64
                                })
                                .sum::<f64>()
                    })
                    .collect();
                let m = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = x.iter().map(|v| (v - m).exp()).sum();
                lse[(bi * nh + h) * t + i] = m + sum.ln();
                for j in 0..=i {
                    p[i * t + j] = (x[j] - m).exp() / sum;
                    for d in 0..hs {
                        y[out(bi, i, h, d)] += p[i * t + j] * qkv[at(bi, j, 2, h, d)] as f64;
                    }
                }
            }
            for i in 0..t {
                let dp: Vec<f64> = (0..=i)
                    .map(|j| {
                        (0..hs)
                            .map(|d| dy[out(bi, i, h, d)] as f64 * qkv[at(bi, j, 2, h, d)] as f64)
                            .sum()
                    })
                    .collect();
                let row: f64 = (0..=i).map(|j| p[i * t + j] * dp[j]).sum();
                for j in 0..=i {
                    let ds = scale * p[i * t + j] * (dp[j] - row);
                    for d in 0..hs {
                        g[at(bi, i, 0, h, d)] += ds * qkv[at(bi, j, 1, h, d)] as f64;
                        g[at(bi, j, 1, h, d)] += ds * qkv[at(bi, i, 0, h, d)] as f64;
                        g[at(bi, j, 2, h, d)] += p[i * t + j] * dy[out(bi, i, h, d)] as f64;
                    }
                }
            }
        }
    }
    (y, lse, g)
}

/// Mean cross-entropy of logits `[rows, classes]` against labels, and its gradient
/// `(softmax − onehot) / rows`.
pub fn cross_entropy(logits: &[f32], labels: &[u32], classes: usize) -> (f64, Vec<f64>) {
    let rows = labels.len();
    let (mut loss, mut grad) = (0.0, vec![0.0; logits.len()]);
    for (r, &label) in labels.iter().enumerate() {
        let x = &logits[r * classes..][..classes];
        let m = x
            .iter()
            .map(|&v| v as f64)
            .fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = x.iter().map(|&v| (v as f64 - m).exp()).sum();
        loss += m + sum.ln() - x[label as usize] as f64;
        for c in 0..classes {
            let onehot = if c == label as usize { 1.0 } else { 0.0 };
            grad[r * classes + c] = ((x[c] as f64 - m).exp() / sum - onehot) / rows as f64;
        }
    }
    (loss / rows as f64, grad)
}

/// Mean squared error and its gradient `2 (pred − target) / n`.
pub fn mse(pred: &[f32], target: &[f32]) -> (f64, Vec<f64>) {
    let n = pred.len() as f64;
    let diff: Vec<f64> = pred
        .iter()
        .zip(target)
        .map(|(&p, &t)| p as f64 - t as f64)
        .collect();
    (
        diff.iter().map(|d| d * d).sum::<f64>() / n,
        diff.iter().map(|d| 2.0 * d / n).collect(),
    )
}

/// An activation and its derivative, by the unary table's name (None: no reference here yet,
/// which the selftest reports as a failed check).
pub fn unary(name: &str, v: f64) -> Option<(f64, f64)> {
    let sigmoid = |v: f64| 1.0 / (1.0 + (-v).exp());
    let pdf = (-0.5 * v * v).exp() / (2.0 * std::f64::consts::PI).sqrt();
    Some(match name {
        "relu" => (v.max(0.0), if v > 0.0 { 1.0 } else { 0.0 }),
        "gelu" => {
            let cdf = 0.5 * (1.0 + erf(v / std::f64::consts::SQRT_2));
            (v * cdf, cdf + v * pdf)
        }
        "gelu_tanh" => {
            let k = (2.0 / std::f64::consts::PI).sqrt();
            let inner = k * (v + 0.044715 * v.powi(3));
            let th = inner.tanh();
            let d_inner = k * (1.0 + 3.0 * 0.044715 * v * v);
            (
                0.5 * v * (1.0 + th),
                0.5 * (1.0 + th) + 0.5 * v * (1.0 - th * th) * d_inner,
            )
        }
        "silu" => (v * sigmoid(v), sigmoid(v) * (1.0 + v * (1.0 - sigmoid(v)))),
        _ => return None,
    })
}

/// The error function to about 1e-13 (series below 2.5, continued fraction of erfc above).
pub fn erf(x: f64) -> f64 {
    let a = x.abs();
    let r = if a < 2.5 {
        // erf(a) = 2/√π Σ (-1)^n a^(2n+1) / (n! (2n+1))
        let (mut term, mut sum, mut n) = (a, a, 0.0);
        while term.abs() > 1e-17 * sum.abs() {
            n += 1.0;
            term *= -a * a / n;
            sum += term / (2.0 * n + 1.0);
        }
        2.0 / std::f64::consts::PI.sqrt() * sum
    } else {
        // erfc(a) = exp(-a²)/√π · 1/(a + 1/2/(a + 1/(a + 3/2/(a + ...))))
        let mut f = a;
        for k in (1..60).rev() {
            f = a + (k as f64 / 2.0) / f;
        }
        1.0 - (-a * a).exp() / std::f64::consts::PI.sqrt() / f
    };
    r.copysign(x)
}

#[cfg(test)]
mod tests {
    use super::erf;

    #[test]
    fn erf_matches_known_values() {
        for (x, want) in [
            (0.5, 0.520_499_877_813_046_5),
            (1.0, 0.842_700_792_949_714_9),
            (2.0, 0.995_322_265_018_952_7),
            (3.0, 0.999_977_909_503_001_4),
        ] {
            assert!((erf(x) - want).abs() < 1e-12, "erf({x}) = {}", erf(x));
            assert!((erf(-x) + want).abs() < 1e-12);
        }
    }
}
