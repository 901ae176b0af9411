//! Optimizer configurations (torch.optim's names, defaults and constructor checks) and the
//! uniform block they become: the f32 hyperparameters widened to the Python floats a user
//! meant, with the constants PyTorch derives from them computed in f64 (see the module docs
//! of [`crate::optim`]).

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// An optimizer and its hyperparameters (torch.optim's names and defaults).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum OptimizerConfig {
    Sgd {
        lr: f32,
        momentum: f32,
        dampening: f32,
        nesterov: bool,
        weight_decay: f32,
    },
    Adam {
        lr: f32,
        beta1: f32,
        beta2: f32,
        eps: f32,
        weight_decay: f32,
    },
    AdamW {
        lr: f32,
        beta1: f32,
        beta2: f32,
        eps: f32,
        weight_decay: f32,
    },
}

/// SGD's settings besides the learning rate ([`OptimizerConfig::sgd_settings`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SgdSettings {
    pub momentum: f32,
    pub dampening: f32,
    pub nesterov: bool,
    pub weight_decay: f32,
}

/// The settings Adam and AdamW share ([`OptimizerConfig::adam_settings`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamSettings {
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub weight_decay: f32,
}

impl OptimizerConfig {
    /// SGD's momentum, dampening, Nesterov switch and weight decay; `None` for Adam(W).
    pub fn sgd_settings(&self) -> Option<SgdSettings> {
        match *self {
            OptimizerConfig::Sgd {
                momentum,
                dampening,
                nesterov,
                weight_decay,
                ..
            } => Some(SgdSettings {
                momentum,
                dampening,
                nesterov,
                weight_decay,
            }),
            OptimizerConfig::Adam { .. } | OptimizerConfig::AdamW { .. } => None,
        }
    }

    /// Adam's or AdamW's betas, eps and weight decay; `None` for SGD.
    pub fn adam_settings(&self) -> Option<AdamSettings> {
        match *self {
            OptimizerConfig::Sgd { .. } => None,
            OptimizerConfig::Adam {
                beta1,
                beta2,
                eps,
                weight_decay,
                ..
            }
            | OptimizerConfig::AdamW {
                beta1,
                beta2,
                eps,
                weight_decay,
                ..
            } => Some(AdamSettings {
                beta1,
                beta2,
                eps,
                weight_decay,
            }),
        }
    }

    /// `torch.optim.SGD(params, lr)`: no momentum, no dampening, no weight decay.
    pub fn sgd(lr: f32) -> Self {
        Self::Sgd {
            lr,
            momentum: 0.0,
            dampening: 0.0,
            nesterov: false,
            weight_decay: 0.0,
        }
    }

    /// `torch.optim.Adam(params, lr)`: betas (0.9, 0.999), eps 1e-8, weight decay 0.
    pub fn adam(lr: f32) -> Self {
        Self::Adam {
            lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
        }
    }

    /// `torch.optim.AdamW(params, lr)`: betas (0.9, 0.999), eps 1e-8, weight decay 1e-2.
    pub fn adamw(lr: f32) -> Self {
        Self::AdamW {
            lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 1e-2,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Self::Sgd { .. } => "SGD",
            Self::Adam { .. } => "Adam",
            Self::AdamW { .. } => "AdamW",
        }
    }

    pub fn lr(&self) -> f32 {
        match *self {
            Self::Sgd { lr, .. } | Self::Adam { lr, .. } | Self::AdamW { lr, .. } => lr,
        }
    }

    pub(super) fn with_lr(mut self, new_lr: f32) -> Self {
        match &mut self {
            Self::Sgd { lr, .. } | Self::Adam { lr, .. } | Self::AdamW { lr, .. } => *lr = new_lr,
        }
        self
    }

    /// PyTorch's constructor checks (messages in its words).
    pub fn validate(&self) -> Result<()> {
        let name = self.name();
        let bad = |m: String| Err(Error::InvalidArgument(format!("{name}: {m}")));
        check_lr(name, self.lr())?;
        match *self {
            Self::Sgd {
                momentum,
                dampening,
                nesterov,
                weight_decay,
                ..
            } => {
                if !(momentum >= 0.0 && momentum.is_finite()) {
                    return bad(format!("Invalid momentum value: {momentum}"));
                }
                if !dampening.is_finite() {
                    return bad(format!("Invalid dampening value: {dampening}"));
                }
                if !(weight_decay >= 0.0 && weight_decay.is_finite()) {
                    return bad(format!("Invalid weight_decay value: {weight_decay}"));
                }
                if nesterov && (momentum <= 0.0 || dampening != 0.0) {
                    return bad("Nesterov momentum requires a momentum and zero dampening".into());
                }
            }
            Self::Adam {
                beta1,
                beta2,
                eps,
                weight_decay,
                ..
            }
            | Self::AdamW {
                beta1,
                beta2,
                eps,
                weight_decay,
                ..
            } => {
                if !(eps >= 0.0 && eps.is_finite()) {
                    return bad(format!("Invalid epsilon value: {eps}"));
                }
                if !(0.0..1.0).contains(&beta1) {
                    return bad(format!("Invalid beta parameter at index 0: {beta1}"));
                }
                if !(0.0..1.0).contains(&beta2) {
                    return bad(format!("Invalid beta parameter at index 1: {beta2}"));
                }
                if !(weight_decay >= 0.0 && weight_decay.is_finite()) {
                    return bad(format!("Invalid weight_decay value: {weight_decay}"));
                }
            }
        }
        Ok(())
    }
}

pub(super) fn check_lr(name: &str, lr: f32) -> Result<()> {
    if !(lr >= 0.0 && lr.is_finite()) {
        return Err(Error::InvalidArgument(format!(
            "{name}: Invalid learning rate: {lr}"
        )));
    }
    Ok(())
}

/// The f64 a user meant by an f32 hyperparameter: its shortest round-tripping decimal
/// (`0.999f32` → `0.999`), which is the Python float PyTorch would have been given.
pub fn widen(x: f32) -> f64 {
    format!("{x}").parse().unwrap_or(x as f64)
}

/// `ln(beta)` for the bias corrections; beta = 0 gives a huge negative number so that
/// `1 - e^(step ln beta)` is 1 without ever forming inf on the GPU.
fn log_beta(beta: f32) -> f32 {
    if beta == 0.0 {
        -1e30
    } else {
        widen(beta).ln() as f32
    }
}

crate::wgsl_struct! {
    /// Uniform block of `optim.wgsl` (`Hyper`).
    pub(super) struct Hyper {
        n: u32,
        nesterov: u32,
        lr: f32,
        /// L2 term added to the gradient (SGD, Adam); 0 for AdamW
        weight_decay: f32,
        momentum: f32,
        one_minus_dampening: f32,
        beta1: f32,
        /// lerp weight of exp_avg (1 - beta1 computed in f64 on the host)
        one_minus_beta1: f32,
        beta2: f32,
        one_minus_beta2: f32,
        /// ln(beta1), ln(beta2) (f64 on the host): bias corrections
        log_beta1: f32,
        log_beta2: f32,
        eps: f32,
        /// AdamW: 1 - lr * weight_decay; 1 otherwise
        param_decay: f32,
        /// 1: weight decay applies only where the `decay_mask` bit is set (parameter groups);
        /// 0: everywhere (one group, PyTorch's default).
        pub(super) grouped: u32,
        /// 1: each gradient is multiplied by the clip coefficient first (`clip_norm`)
        pub(super) clipped: u32,
        /// 1: each updated parameter is also stored into the compute-dtype copy (`low`)
        pub(super) writes_low: u32,
        /// the word of the optimizer's `words` buffer where the weight-decay mask starts
        pub(super) mask_at: u32,
        _pad1: u32,
        _pad2: u32,
    }
}

impl Hyper {
    /// `bound`: whether the step applies a clip coefficient and writes the compute copy;
    /// `mask_at`: the word where the weight-decay mask starts.
    pub(super) fn new(
        config: &OptimizerConfig,
        n: usize,
        grouped: bool,
        bound: [bool; 2],
        mask_at: usize,
    ) -> Self {
        let [clipped, writes_low] = bound;
        let mut h = Hyper {
            n: n as u32,
            nesterov: 0,
            lr: config.lr(),
            weight_decay: 0.0,
            momentum: 0.0,
            one_minus_dampening: 1.0,
            beta1: 0.0,
            one_minus_beta1: 1.0,
            beta2: 0.0,
            one_minus_beta2: 1.0,
            log_beta1: 0.0,
            log_beta2: 0.0,
            eps: 0.0,
            param_decay: 1.0,
            grouped: grouped as u32,
            clipped: clipped as u32,
            writes_low: writes_low as u32,
            mask_at: mask_at as u32,
            ..Default::default()
        };
        if let Some(s) = config.sgd_settings() {
            h.momentum = s.momentum;
            h.one_minus_dampening = (1.0 - widen(s.dampening)) as f32;
            h.nesterov = s.nesterov as u32;
            h.weight_decay = s.weight_decay;
        }
        if let Some(AdamSettings {
            beta1,
            beta2,
            eps,
            weight_decay,
        }) = config.adam_settings()
        {
            h.beta1 = beta1;
            h.beta2 = beta2;
            h.one_minus_beta1 = (1.0 - widen(beta1)) as f32;
            h.one_minus_beta2 = (1.0 - widen(beta2)) as f32;
            h.log_beta1 = log_beta(beta1);
            h.log_beta2 = log_beta(beta2);
            h.eps = eps;
            if matches!(config, OptimizerConfig::AdamW { .. }) {
                h.param_decay = (1.0 - widen(config.lr()) * widen(weight_decay)) as f32;
            } else {
                h.weight_decay = weight_decay;
            }
        }
        h
    }
}
