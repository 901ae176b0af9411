//! f64 reference of causal self-attention on packed projections (nanoGPT's `[B, T, 3C]`, or
//! with grouped-query attention's fewer key/value heads `[B, T, (nh + 2·nkv)·hs]`: query
//! head h reads key/value head h / (nh / nkv)), forward and backward, with attention
//! dropout through the library's CPU mask
//! ([`webgpu_amp::ops::dropout::keep`] at element `(bh·T + i)·T + j`, the unfused path's).
//! Each output comes with Σ|terms|, the magnitude that bounds any summation order's error.
//! Also which bodies of the fused kernel a test can run here ([`bodies`]).

use webgpu_amp::GpuContext;
use webgpu_amp::ops::dropout::keep;
use webgpu_amp::ops::flash_attention::FlashBody;

/// The fused kernel's bodies to test: tiled and rowwise, except on GL over a CPU adapter,
/// where Mesa's GLSL path takes minutes per tiled pipeline and Auto runs the rowwise body
/// (as tests/matmul.rs does for the tiled matmul): rowwise only, said loudly.
pub fn bodies(ctx: &GpuContext) -> Vec<FlashBody> {
    if ctx.report.backend == "gl" && ctx.report.device_type == "Cpu" {
        super::not_checked(&format!(
            "the tiled fused-attention body on GL over a CPU adapter (`{}`: Mesa's GLSL \
             compiler takes minutes per tiled pipeline; Auto runs the rowwise body there, \
             which is tested)",
            ctx.report.name
        ));
        vec![FlashBody::Rowwise]
    } else {
        vec![FlashBody::Tiled, FlashBody::Rowwise]
    }
}

/// Sizes of one attention: `qkv` is `[b, t, (nh + 2·kv)·hs]`, `y` and `dy` `[b, t, nh·hs]`.
#[derive(Clone, Copy, Debug)]
pub struct Dims {
    pub b: usize,
    pub nh: usize,
    /// Key/value heads (nh: multi-head attention).
    pub kv: usize,
    pub t: usize,
    pub hs: usize,
}

/// Attention dropout as the kernels see it: p, layer id, and the DropoutState words.
#[derive(Clone, Copy, Debug)]
pub struct Drop {
    pub p: f32,
    pub layer: u32,
    pub seed: u64,
    pub counter: u64,
}

impl Dims {
    pub fn c(&self) -> usize {
        self.nh * self.hs
    }
    /// Elements of one position of the packed projections.
    pub fn row(&self) -> usize {
        (self.nh + 2 * self.kv) * self.hs
    }
    pub fn scale(&self) -> f64 {
        1.0 / (self.hs as f64).sqrt()
    }
    /// Index of channel d of q (part 0), k (1) or v (2) of query head h at position i.
    pub fn at(&self, b: usize, h: usize, i: usize, part: usize, d: usize) -> usize {
        let (kvh, hs) = (h / (self.nh / self.kv), self.hs);
        let head = match part {
            0 => h * hs,
            1 => (self.nh + kvh) * hs,
            _ => (self.nh + self.kv + kvh) * hs,
        };
        (b * self.t + i) * self.row() + head + d
    }
    fn q(&self, qkv: &[f32], b: usize, h: usize, i: usize, part: usize, d: usize) -> f64 {
        qkv[self.at(b, h, i, part, d)] as f64
    }
    fn out_index(&self, b: usize, h: usize, i: usize, d: usize) -> usize {
        (b * self.t + i) * self.c() + h * self.hs + d
    }
}

/// Probabilities P (before dropout), the dropout factor of each (i, j ≤ i), and each row's
/// log-sum-exp, of one head.
struct Head {
    p: Vec<f64>,
    factor: Vec<f64>,
    lse: Vec<f64>,
}

fn head(dims: &Dims, qkv: &[f32], drop: Option<Drop>, b: usize, h: usize) -> Head {
    let t = dims.t;
    let bh = b * dims.nh + h;
    let mut p = vec![0.0; t * t];
    let mut factor = vec![1.0; t * t];
    let mut lse = vec![0.0; t];
    for i in 0..t {
        let x: Vec<f64> = (0..=i)
            .map(|j| {
                let dot: f64 = (0..dims.hs)
                    .map(|d| dims.q(qkv, b, h, i, 0, d) * dims.q(qkv, b, h, j, 1, d))
                    .sum();
                dims.scale() * dot
            })
            .collect();
        let m = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = x.iter().map(|v| (v - m).exp()).sum();
        lse[i] = m + sum.ln();
        for j in 0..=i {
            p[i * t + j] = (x[j] - m).exp() / sum;
            if let Some(dr) = drop {
                let e = ((bh * t + i) * t + j) as u64;
                let kept = keep(dr.seed, dr.counter, dr.layer, e, dr.p);
                factor[i * t + j] = if kept {
                    (1.0 / (1.0 - dr.p as f64)) as f32 as f64
                } else {
                    0.0
                };
            }
        }
    }
    Head { p, factor, lse }
}

/// Forward: y `[b, t, C]`, its magnitudes, and lse `[b, nh, t]`.
pub fn forward(dims: &Dims, qkv: &[f32], drop: Option<Drop>) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (t, hs) = (dims.t, dims.hs);
    let n = dims.b * t * dims.c();
    let (mut y, mut mag) = (vec![0.0; n], vec![0.0; n]);
    let mut lse = vec![0.0; dims.b * dims.nh * t];
    for b in 0..dims.b {
        for h in 0..dims.nh {
            let hd = head(dims, qkv, drop, b, h);
            for i in 0..t {
                lse[(b * dims.nh + h) * t + i] = hd.lse[i];
                for d in 0..hs {
                    let o = dims.out_index(b, h, i, d);
                    for j in 0..=i {
                        let term =
                            hd.p[i * t + j] * hd.factor[i * t + j] * dims.q(qkv, b, h, j, 2, d);
                        y[o] += term;
                        mag[o] += term.abs();
                    }
                }
            }
        }
    }
    (y, mag, lse)
}

/// Backward: dqkv (laid out as qkv) and its magnitudes (terms of dS·k, dSᵀ·q and Pdᵀ·dy, with
/// the row sum's terms counted in dS as the kernels form it: rowsum(dy ⊙ y)).
pub fn backward(dims: &Dims, qkv: &[f32], dy: &[f32], drop: Option<Drop>) -> (Vec<f64>, Vec<f64>) {
    let (t, hs) = (dims.t, dims.hs);
    let n = dims.b * t * dims.row();
    let (mut g, mut mag) = (vec![0.0; n], vec![0.0; n]);
    // dk and dv of a key/value head sum over the query heads that read it.
    let at = |b, h, i, part, d| dims.at(b, h, i, part, d);
    for b in 0..dims.b {
        for h in 0..dims.nh {
            let hd = head(dims, qkv, drop, b, h);
            let gy = |i: usize, d: usize| dy[dims.out_index(b, h, i, d)] as f64;
            // dP_ij = dropout'(dy_i · v_j); dS_ij = scale · P_ij (dP_ij − Σ_j P dP).
            let mut ds = vec![0.0; t * t];
            let mut ds_mag = vec![0.0; t * t];
            for i in 0..t {
                let dp: Vec<f64> = (0..=i)
                    .map(|j| {
                        let dpd: f64 = (0..hs).map(|d| gy(i, d) * dims.q(qkv, b, h, j, 2, d)).sum();
                        dpd * hd.factor[i * t + j]
                    })
                    .collect();
                let row: f64 = (0..=i).map(|j| hd.p[i * t + j] * dp[j]).sum();
                // The kernels form the row sum as rowsum(dy ⊙ y) from the stored y, so its
                // error follows Σ_d |dy_d| Σ_j |terms of y_d| (not Σ_j |P dP|, which cancels
                // inside dP).
                let row_mag: f64 = (0..hs)
                    .map(|d| {
                        let y_mag: f64 = (0..=i)
                            .map(|j| {
                                let pd = hd.p[i * t + j] * hd.factor[i * t + j];
                                (pd * dims.q(qkv, b, h, j, 2, d)).abs()
                            })
                            .sum();
                        gy(i, d).abs() * y_mag
                    })
                    .sum();
                for j in 0..=i {
                    let pij = hd.p[i * t + j];
                    ds[i * t + j] = dims.scale() * pij * (dp[j] - row);
                    ds_mag[i * t + j] = dims.scale() * pij * (dp[j].abs() + row_mag);
                }
            }
            for i in 0..t {
                for j in 0..=i {
                    let (s, sm) = (ds[i * t + j], ds_mag[i * t + j]);
                    let pd = hd.p[i * t + j] * hd.factor[i * t + j];
                    for d in 0..hs {
                        let (qd, kd) = (dims.q(qkv, b, h, i, 0, d), dims.q(qkv, b, h, j, 1, d));
                        g[at(b, h, i, 0, d)] += s * kd;
                        mag[at(b, h, i, 0, d)] += sm * kd.abs();
                        g[at(b, h, j, 1, d)] += s * qd;
                        mag[at(b, h, j, 1, d)] += sm * qd.abs();
                        g[at(b, h, j, 2, d)] += pd * gy(i, d);
                        mag[at(b, h, j, 2, d)] += (pd * gy(i, d)).abs();
                    }
                }
            }
        }
    }
    (g, mag)
}
