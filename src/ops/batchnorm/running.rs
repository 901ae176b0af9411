//! Running statistics: PyTorch's `running_mean`, `running_var` and `num_batches_tracked` in
//! one buffer, and the commit that keeps a step's updates or, on a step the GradScaler skips,
//! discards them.

use std::sync::Arc;

use super::shader::{Params, SHADER, SMALL_WG};
use crate::error::{Error, Result};
use crate::gpu::{Arg, GpuBuffer, GpuContext, Kernel, KernelDesc, grid_1d};

/// The GradScaler state's found-inf word (`shaders/include/scaler_state.wgsl`'s FOUND_INF;
/// `amp::scaler` sits above the ops and names the same offset).
const FOUND_INF_WORD: u64 = 2;

/// What a step the GradScaler skips does to the running statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnSkippedStep {
    /// Leave them as they were before the step (the default).
    #[default]
    Keep,
    /// Keep the skipped step's updates, as PyTorch does (pytorch#88474): for parity runs.
    UpdateAnyway,
}

/// `(running_mean, running_var, num_batches_tracked)` as read back.
pub type RunningValues = (Vec<f32>, Vec<f32>, i64);

/// The running statistics of one BatchNorm in one buffer: `[running_mean C | running_var C |
/// num_batches_tracked]`, the count an int64 (two u32 words, low first). PyTorch's initial
/// values: mean 0, var 1, count 0.
pub struct RunningStats {
    buffer: Arc<GpuBuffer>,
    channels: usize,
}

impl std::fmt::Debug for RunningStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningStats")
            .field("channels", &self.channels)
            .finish()
    }
}

impl RunningStats {
    /// Running statistics of `channels` channels, at PyTorch's initial values.
    pub fn new(ctx: &GpuContext, label: &str, channels: usize) -> Result<Self> {
        if channels == 0 {
            return Err(Error::shape(
                "batchnorm",
                "running statistics need a channel",
            ));
        }
        let words = 2 * channels + 2;
        let stats = RunningStats {
            buffer: ctx.alloc_storage(label, 4 * words as u64),
            channels,
        };
        stats.write(ctx, &vec![0.0; channels], &vec![1.0; channels], 0)?;
        Ok(stats)
    }

    pub fn channels(&self) -> usize {
        self.channels
    }

    /// The buffer, for views and copies (`[mean | var | count]`, see the type).
    pub fn buffer(&self) -> &Arc<GpuBuffer> {
        &self.buffer
    }

    /// Words of the buffer: 2 C + 2.
    pub fn words(&self) -> usize {
        2 * self.channels + 2
    }

    /// Queue new values (a checkpoint's, or another copy's).
    pub fn write(&self, ctx: &GpuContext, mean: &[f32], var: &[f32], count: i64) -> Result<()> {
        if mean.len() != self.channels || var.len() != self.channels {
            return Err(Error::shape(
                "batchnorm",
                format!(
                    "running statistics of {} channels given {} means and {} variances",
                    self.channels,
                    mean.len(),
                    var.len()
                ),
            ));
        }
        let mut words: Vec<u32> = mean.iter().chain(var).map(|v| v.to_bits()).collect();
        words.extend([count as u64 as u32, ((count as u64) >> 32) as u32]);
        ctx.write_buffer(&self.buffer, 0, bytemuck::cast_slice(&words));
        Ok(())
    }

    /// `(running_mean, running_var, num_batches_tracked)`, read back (async: works on the
    /// web).
    pub async fn read_async(&self, ctx: &GpuContext) -> Result<RunningValues> {
        let bytes = ctx
            .read_bytes_async(&self.buffer, 0, 4 * self.words() as u64)
            .await?;
        Ok(self.decode(&bytes))
    }

    /// Blocking [`RunningStats::read_async`] (native only: tests and the end of a run).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn read(&self, ctx: &GpuContext) -> Result<RunningValues> {
        let bytes = ctx.read_bytes(&self.buffer, 0, 4 * self.words() as u64)?;
        Ok(self.decode(&bytes))
    }

    fn decode(&self, bytes: &[u8]) -> RunningValues {
        let words: Vec<u32> = bytemuck::pod_collect_to_vec(bytes);
        let c = self.channels;
        let f = |w: &[u32]| w.iter().map(|&b| f32::from_bits(b)).collect();
        let count = (words[2 * c] as u64 | ((words[2 * c + 1] as u64) << 32)) as i64;
        (f(&words[..c]), f(&words[c..2 * c]), count)
    }
}

/// Keep or discard the step's running-statistics updates: `committed = pending`, or, when
/// `on_skip` is [`OnSkippedStep::Keep`] and the GradScaler found an inf or NaN this step
/// (`scaler_state`'s found-inf word, read on the GPU as the optimizer reads it),
/// `pending = committed`. Record it after the unscale and before the scale update (which
/// resets found-inf). One kernel.
pub fn running_stats_commit(
    ctx: &GpuContext,
    pending: &RunningStats,
    committed: &RunningStats,
    scaler_state: &Arc<GpuBuffer>,
    on_skip: OnSkippedStep,
) -> Result<Kernel> {
    const OP: &str = "running_stats_commit";
    if pending.channels != committed.channels {
        return Err(Error::shape(
            OP,
            format!(
                "pending statistics of {} channels, committed of {}",
                pending.channels, committed.channels
            ),
        ));
    }
    if Arc::ptr_eq(pending.buffer(), committed.buffer()) {
        return Err(Error::InvalidArgument(format!(
            "{OP}: pending and committed statistics must be two buffers"
        )));
    }
    if scaler_state.size() < 4 * (FOUND_INF_WORD + 1) {
        return Err(Error::shape(
            OP,
            format!(
                "scaler state of {} bytes has no found-inf word",
                scaler_state.size()
            ),
        ));
    }
    let params = Params {
        words: pending.words() as u32,
        skip_on_inf: (on_skip == OnSkippedStep::Keep) as u32,
        ..Default::default()
    };
    ctx.kernel(
        &KernelDesc::new(&SHADER, "running_stats_commit").with_const("ACT", "0u"),
        &[
            ("params", Arg::Uniform(bytemuck::bytes_of(&params))),
            ("pending", Arg::Buffer(pending.buffer())),
            ("committed", Arg::Buffer(committed.buffer())),
            ("scaler", Arg::Buffer(scaler_state)),
        ],
        grid_1d(pending.words(), SMALL_WG),
    )
}
