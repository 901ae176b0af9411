//! The GradScaler's settings (`torch.amp.GradScaler`'s constructor arguments, checked), its
//! `state_dict` with PyTorch's key names, and its state read back.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// `torch.amp.GradScaler`'s constructor arguments.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScalerConfig {
    pub init_scale: f32,
    /// A double, as PyTorch's (`--growth-factor 1.7` is the f64 1.7, not the f32).
    pub growth_factor: f64,
    /// A double, as PyTorch's.
    pub backoff_factor: f64,
    pub growth_interval: u32,
    pub enabled: bool,
}

impl Default for ScalerConfig {
    /// PyTorch's defaults: 2^16, ×2 every 2000 clean steps, ×0.5 on inf/NaN.
    fn default() -> Self {
        Self {
            init_scale: 65536.0,
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval: 2000,
            enabled: true,
        }
    }
}

impl ScalerConfig {
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidArgument(format!("GradScaler: {m}")));
        // PyTorch's: any positive scale. A subnormal one (1/scale is inf) is a state the
        // scale can also reach by backing off; the run builder refuses it as a setting.
        if !(self.init_scale.is_finite() && self.init_scale > 0.0) {
            return bad(format!(
                "init_scale must be finite and > 0, got {:e}",
                self.init_scale
            ));
        }
        // Written so that NaN fails too.
        if !(self.growth_factor > 1.0 && self.growth_factor.is_finite()) {
            return bad(format!(
                "growth_factor must be finite and > 1, got {}",
                self.growth_factor
            ));
        }
        if !(self.backoff_factor > 0.0 && self.backoff_factor < 1.0) {
            return bad(format!(
                "backoff_factor must be in (0, 1), got {}",
                self.backoff_factor
            ));
        }
        if self.growth_interval < 1 || self.growth_interval > i32::MAX as u32 {
            return bad(format!(
                "growth_interval must be in [1, 2^31), got {}",
                self.growth_interval
            ));
        }
        Ok(())
    }
}

/// `GradScaler.state_dict()` with PyTorch's key names. A disabled scaler gives an empty dict
/// (`{}`), as PyTorch does, and loading an empty dict into an enabled scaler is an error.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ScalerStateDict {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub growth_factor: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_factor: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub growth_interval: Option<u32>,
    #[serde(
        rename = "_growth_tracker",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub growth_tracker: Option<i32>,
}

impl ScalerStateDict {
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// The live values of the state buffer, read back.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScalerSnapshot {
    pub scale: f32,
    pub growth_tracker: i32,
    pub found_inf: bool,
    pub inv_scale: f32,
}

/// 1/scale exactly as PyTorch's `GradScaler.unscale_` computes it (f64 reciprocal, to f32).
/// The GPU update kernel gives the same bits with integer arithmetic.
pub fn inv_scale_of(scale: f32) -> f32 {
    (1.0f64 / scale as f64) as f32
}
