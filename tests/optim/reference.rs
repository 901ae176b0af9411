//! torch.optim's SGD, Adam and AdamW single-tensor step on the CPU, the reference the
//! optimizer tests compare the fused kernels with.

use webgpu_amp::optim::{OptimizerConfig, widen};

/// torch.lerp's two-sided formula.
fn torch_lerp(start: f32, end: f32, w: f32) -> f32 {
    if w.abs() < 0.5 {
        start + w * (end - start)
    } else {
        end - (end - start) * (1.0 - w)
    }
}

/// torch.optim's single-tensor step in f32, scalars derived in f64 as Python does.
pub struct Reference {
    pub config: OptimizerConfig,
    pub p: Vec<f32>,
    pub step: u32,
    pub buf: Vec<f32>,
    pub m: Vec<f32>,
    pub v: Vec<f32>,
}

impl Reference {
    pub fn new(config: OptimizerConfig, p: &[f32]) -> Self {
        let n = p.len();
        Self {
            config,
            p: p.to_vec(),
            step: 0,
            buf: vec![0.0; n],
            m: vec![0.0; n],
            v: vec![0.0; n],
        }
    }

    pub fn set_lr(&mut self, new_lr: f32) {
        match &mut self.config {
            OptimizerConfig::Sgd { lr, .. }
            | OptimizerConfig::Adam { lr, .. }
            | OptimizerConfig::AdamW { lr, .. } => *lr = new_lr,
        }
    }

    // Indexing keeps each line next to PyTorch's per-tensor formula.
    #[allow(clippy::needless_range_loop)]
    pub fn step(&mut self, grad: &[f32]) {
        self.step += 1;
        match self.config {
            OptimizerConfig::Sgd {
                lr,
                momentum,
                dampening,
                nesterov,
                weight_decay,
            } => {
                let alpha = (1.0 - widen(dampening)) as f32;
                for i in 0..self.p.len() {
                    let mut g = grad[i];
                    if weight_decay != 0.0 {
                        g += weight_decay * self.p[i];
                    }
                    if momentum != 0.0 {
                        self.buf[i] = if self.step == 1 {
                            g
                        } else {
                            self.buf[i] * momentum + alpha * g
                        };
                        g = if nesterov {
                            g + momentum * self.buf[i]
                        } else {
                            self.buf[i]
                        };
                    }
                    self.p[i] += -lr * g;
                }
            }
            OptimizerConfig::Adam {
                lr,
                beta1,
                beta2,
                eps,
                weight_decay,
            }
            | OptimizerConfig::AdamW {
                lr,
                beta1,
                beta2,
                eps,
                weight_decay,
            } => {
                let decoupled = matches!(self.config, OptimizerConfig::AdamW { .. });
                let (lr64, b1, b2) = (widen(lr), widen(beta1), widen(beta2));
                let t = self.step as i32;
                let bias_correction1 = 1.0 - b1.powi(t);
                let bias_correction2 = 1.0 - b2.powi(t);
                let step_size = (lr64 / bias_correction1) as f32;
                let bias_correction2_sqrt = bias_correction2.sqrt() as f32;
                let decay = (1.0 - lr64 * widen(weight_decay)) as f32;
                for i in 0..self.p.len() {
                    if decoupled {
                        self.p[i] *= decay;
                    }
                    let mut g = grad[i];
                    if !decoupled && weight_decay != 0.0 {
                        g += weight_decay * self.p[i];
                    }
                    self.m[i] = torch_lerp(self.m[i], g, (1.0 - b1) as f32);
                    self.v[i] = self.v[i] * beta2 + (1.0 - b2) as f32 * g * g;
                    let denom = self.v[i].sqrt() / bias_correction2_sqrt + eps;
                    self.p[i] += -step_size * self.m[i] / denom;
                }
            }
        }
    }
}
