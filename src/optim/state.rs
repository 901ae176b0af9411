//! An optimizer's state read back and restored (checkpoints, resume): the step counters of
//! every piece (all equal) and the moment buffers, under PyTorch's names.

use super::{Optimizer, OptimizerConfig, OptimizerState};
use crate::error::{Error, Result};
use crate::gpu::GpuContext;

impl Optimizer {
    /// Read the state back (asynchronous: also on the web; outside the step loop).
    pub async fn state_async(&self, ctx: &GpuContext) -> Result<OptimizerState> {
        let mut bytes = Vec::new();
        for p in &self.pieces {
            let counters = 4 * p.launched as u64;
            bytes.extend(ctx.read_bytes_async(&p.words, 0, counters).await?);
        }
        let step = self.decode_step(&bytes)?;
        let mut moments = Vec::new();
        for (name, buffer) in &self.moments {
            let b = ctx.read_bytes_async(buffer, 0, 4 * self.n as u64).await?;
            moments.push((*name, bytemuck::pod_collect_to_vec::<u8, f32>(&b)));
        }
        Ok(self.assemble(step, moments))
    }

    /// Blocking [`Optimizer::state_async`] (native only).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn state(&self, ctx: &GpuContext) -> Result<OptimizerState> {
        let mut bytes = Vec::new();
        for p in &self.pieces {
            bytes.extend(ctx.read_bytes(&p.words, 0, 4 * p.launched as u64)?);
        }
        let step = self.decode_step(&bytes)?;
        let mut moments = Vec::new();
        for (name, buffer) in &self.moments {
            let b = ctx.read_bytes(buffer, 0, 4 * self.n as u64)?;
            moments.push((*name, bytemuck::pod_collect_to_vec::<u8, f32>(&b)));
        }
        Ok(self.assemble(step, moments))
    }

    fn decode_step(&self, bytes: &[u8]) -> Result<u32> {
        let counters: Vec<u32> = bytemuck::pod_collect_to_vec(bytes);
        let step = counters[0];
        if let Some(other) = counters.iter().find(|&&c| c != step) {
            return Err(Error::Gpu(format!(
                "{} step counters disagree ({step} and {other}): the step kernel was not run whole",
                self.config.name()
            )));
        }
        Ok(step)
    }

    fn assemble(&self, step: u32, moments: Vec<(&'static str, Vec<f32>)>) -> OptimizerState {
        let mut s = OptimizerState {
            step,
            ..Default::default()
        };
        // Before the first applied step PyTorch's state holds no buffers.
        if step > 0 {
            for (name, values) in moments {
                match name {
                    "momentum_buffer" => s.momentum_buffer = Some(values),
                    "exp_avg" => s.exp_avg = Some(values),
                    _ => s.exp_avg_sq = Some(values),
                }
            }
        }
        s
    }

    /// Restore a state (queued writes, no wait). Buffers this optimizer has must be given
    /// with n values each when `step > 0` (for SGD with momentum: when `momentum_buffer` is
    /// given, it counts as at least one applied step); absent ones start from zero.
    pub fn load_state(&mut self, ctx: &GpuContext, s: &OptimizerState) -> Result<()> {
        let name = self.config.name();
        let mut step = s.step;
        let given = |m: &str| match m {
            "momentum_buffer" => s.momentum_buffer.as_ref(),
            "exp_avg" => s.exp_avg.as_ref(),
            _ => s.exp_avg_sq.as_ref(),
        };
        for (label, present) in [
            ("momentum_buffer", s.momentum_buffer.is_some()),
            ("exp_avg", s.exp_avg.is_some()),
            ("exp_avg_sq", s.exp_avg_sq.is_some()),
        ] {
            if present && !self.moments.iter().any(|(m, _)| *m == label) {
                return Err(Error::InvalidArgument(format!(
                    "{name} state: `{label}` does not belong to this optimizer"
                )));
            }
        }
        if matches!(self.config, OptimizerConfig::Sgd { .. }) && s.momentum_buffer.is_some() {
            step = step.max(1);
        }
        for (label, buffer) in &self.moments {
            let values = match given(label) {
                Some(v) if v.len() != self.n => {
                    return Err(Error::InvalidArgument(format!(
                        "{name} state: `{label}` has {} values, want {}",
                        v.len(),
                        self.n
                    )));
                }
                Some(v) => v.clone(),
                None if step > 0 => {
                    return Err(Error::InvalidArgument(format!(
                        "{name} state: step {step} but no `{label}`"
                    )));
                }
                None => vec![0.0; self.n],
            };
            ctx.write_buffer(buffer, 0, bytemuck::cast_slice(&values));
        }
        for p in &self.pieces {
            let counters = vec![step; p.launched];
            ctx.write_buffer(&p.words, 0, bytemuck::cast_slice(&counters));
        }
        Ok(())
    }
}
