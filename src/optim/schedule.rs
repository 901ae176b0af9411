//! Learning-rate schedules: the learning rate of optimizer step `it` (0-based), computed on the
//! host and written ahead into the optimizer's uniform block before the step is submitted
//! (one queued write, nothing created, no wait).
//!
//! `Cosine` is nanoGPT's `get_lr(it)` (`train.py`) exactly: a linear warm-up to `lr` over
//! `warmup_steps`, a cosine decay to `min_lr` at `decay_steps`, and `min_lr` after it. The
//! arithmetic is Python's (f64), rounded to f32 once at the end. Like a PyTorch scheduler
//! stepped once per `optimizer.step()` call, it advances every optimizer step, steps the
//! GradScaler skipped included.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// How the learning rate changes over a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum LrSchedule {
    /// The optimizer's learning rate every step.
    #[default]
    Constant,
    /// nanoGPT's warm-up and cosine decay (see the module docs).
    Cosine {
        warmup_steps: u64,
        /// `lr_decay_iters`: the step where the decay reaches `min_lr`.
        decay_steps: u64,
        min_lr: f32,
    },
}

impl LrSchedule {
    /// The learning rate of optimizer step `it` (0-based) for a base rate `lr`:
    /// nanoGPT's `get_lr(it)` with `learning_rate = lr`.
    pub fn lr(&self, lr: f32, it: u64) -> f32 {
        match *self {
            LrSchedule::Constant => lr,
            LrSchedule::Cosine {
                warmup_steps,
                decay_steps,
                min_lr,
            } => {
                let (lr, min_lr) = (super::widen(lr), super::widen(min_lr));
                // 1) linear warmup for warmup_iters steps
                if it < warmup_steps {
                    return (lr * (it + 1) as f64 / (warmup_steps + 1) as f64) as f32;
                }
                // 2) if it > lr_decay_iters, return min learning rate
                if it > decay_steps {
                    return min_lr as f32;
                }
                // 3) in between, use cosine decay down to min learning rate
                let ratio = (it - warmup_steps) as f64 / (decay_steps - warmup_steps) as f64;
                let coeff = 0.5 * (1.0 + (std::f64::consts::PI * ratio).cos());
                (min_lr + coeff * (lr - min_lr)) as f32
            }
        }
    }

    /// Checks that every step gets a finite, non-negative rate: `warmup_steps` below
    /// `decay_steps` (nanoGPT divides by their difference) and `min_lr` finite and ≥ 0.
    pub fn validate(&self) -> Result<()> {
        if let LrSchedule::Cosine {
            warmup_steps,
            decay_steps,
            min_lr,
        } = *self
        {
            if !(min_lr >= 0.0 && min_lr.is_finite()) {
                return Err(Error::InvalidArgument(format!(
                    "cosine schedule: min_lr must be finite and >= 0, got {min_lr}"
                )));
            }
            if warmup_steps >= decay_steps {
                return Err(Error::InvalidArgument(format!(
                    "cosine schedule: {warmup_steps} warm-up steps leave no decay before step \
                     {decay_steps} (warm-up steps must be fewer than decay steps)"
                )));
            }
        }
        Ok(())
    }

    /// `constant` or `cosine`.
    pub fn name(&self) -> &'static str {
        match self {
            LrSchedule::Constant => "constant",
            LrSchedule::Cosine { .. } => "cosine",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// nanoGPT's get_lr, transcribed in f64 with train_shakespeare_char's settings.
    fn nanogpt(it: u64) -> f64 {
        let (learning_rate, warmup_iters, lr_decay_iters, min_lr) = (1e-3, 100u64, 5000u64, 1e-4);
        if it < warmup_iters {
            return learning_rate * (it + 1) as f64 / (warmup_iters + 1) as f64;
        }
        if it > lr_decay_iters {
            return min_lr;
        }
        let decay_ratio = (it - warmup_iters) as f64 / (lr_decay_iters - warmup_iters) as f64;
        let coeff = 0.5 * (1.0 + (std::f64::consts::PI * decay_ratio).cos());
        min_lr + coeff * (learning_rate - min_lr)
    }

    #[test]
    fn cosine_is_nanogpts_get_lr_rounded_once() {
        let s = LrSchedule::Cosine {
            warmup_steps: 100,
            decay_steps: 5000,
            min_lr: 1e-4,
        };
        for it in [0, 1, 50, 99, 100, 101, 2550, 4999, 5000, 5001, 9000] {
            assert_eq!(s.lr(1e-3, it), nanogpt(it) as f32, "step {it}");
        }
        assert_eq!(s.lr(1e-3, 0), (1e-3 / 101.0) as f32);
        assert_eq!(s.lr(1e-3, 100), 1e-3);
        assert_eq!(s.lr(1e-3, 5000), 1e-4);
        assert_eq!(LrSchedule::Constant.lr(3e-4, 7), 3e-4);
    }

    #[test]
    fn bad_schedules_are_errors() {
        let cosine = |warmup_steps, decay_steps, min_lr| LrSchedule::Cosine {
            warmup_steps,
            decay_steps,
            min_lr,
        };
        assert!(cosine(10, 10, 0.0).validate().is_err());
        assert!(cosine(0, 10, -1.0).validate().is_err());
        assert!(cosine(0, 10, f32::NAN).validate().is_err());
        assert!(cosine(0, 1, 0.0).validate().is_ok());
    }
}
