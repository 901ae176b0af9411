//! The MLP the AMP tests train, and its f32 CPU reference.

pub const MLP: &str =
    r#"{"input": [4], "layers": [{"linear": {"out": 8}}, {"relu": {}}, {"linear": {"out": 3}}]}"#;

/// CPU f32 reference of Linear(4,8) → ReLU → Linear(8,3) with MSE, plain SGD.
pub struct CpuMlp {
    pub w1: Vec<f32>,
    pub b1: Vec<f32>,
    pub w2: Vec<f32>,
    pub b2: Vec<f32>,
}

impl CpuMlp {
    pub fn from_named(p: &[(String, Vec<f32>)]) -> Self {
        let get = |n: &str| p.iter().find(|(k, _)| k == n).unwrap().1.clone();
        Self {
            w1: get("0.weight"),
            b1: get("0.bias"),
            w2: get("2.weight"),
            b2: get("2.bias"),
        }
    }

    /// One SGD step on MSE; returns the loss before the update.
    pub fn sgd_step(&mut self, x: &[f32], t: &[f32], n: usize, lr: f32) -> f32 {
        let (i_n, h_n, o_n) = (4, 8, 3);
        let mut h = vec![0f32; n * h_n];
        let mut y = vec![0f32; n * o_n];
        for s in 0..n {
            for j in 0..h_n {
                let mut a = self.b1[j];
                for k in 0..i_n {
                    a += x[s * i_n + k] * self.w1[j * i_n + k];
                }
                h[s * h_n + j] = a.max(0.0);
            }
            for j in 0..o_n {
                let mut a = self.b2[j];
                for k in 0..h_n {
                    a += h[s * h_n + k] * self.w2[j * h_n + k];
                }
                y[s * o_n + j] = a;
            }
        }
        let numel = (n * o_n) as f32;
        let loss = y.iter().zip(t).map(|(a, b)| (a - b) * (a - b)).sum::<f32>() / numel;
        let dy: Vec<f32> = y
            .iter()
            .zip(t)
            .map(|(a, b)| 2.0 * (a - b) / numel)
            .collect();
        let (mut gw1, mut gb1) = (vec![0f32; h_n * i_n], vec![0f32; h_n]);
        let (mut gw2, mut gb2) = (vec![0f32; o_n * h_n], vec![0f32; o_n]);
        for s in 0..n {
            let mut dh = vec![0f32; h_n];
            for j in 0..o_n {
                let g = dy[s * o_n + j];
                gb2[j] += g;
                for k in 0..h_n {
                    gw2[j * h_n + k] += g * h[s * h_n + k];
                    dh[k] += g * self.w2[j * h_n + k];
                }
            }
            for j in 0..h_n {
                if h[s * h_n + j] <= 0.0 {
                    continue;
                }
                gb1[j] += dh[j];
                for k in 0..i_n {
                    gw1[j * i_n + k] += dh[j] * x[s * i_n + k];
                }
            }
        }
        for (p, g) in [
            (&mut self.w1, &gw1),
            (&mut self.b1, &gb1),
            (&mut self.w2, &gw2),
            (&mut self.b2, &gb2),
        ] {
            for (p, g) in p.iter_mut().zip(g) {
                *p -= lr * g;
            }
        }
        loss
    }
}
