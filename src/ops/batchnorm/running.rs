//! Running statistics: PyTorch's `running_mean`, `running_var` and `num_batches_tracked`,
//! contiguous in one buffer. A model's live in its buffer store (`nn::buffers`), whose
//! step commit keeps a step's updates or, on a step the GradScaler skips, rolls them back
//! (`ops::buffers::commit`, with PyTorch's behaviour behind [`crate::ops::buffers::OnSkippedStep`]).

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::gpu::{GpuBuffer, GpuContext};

/// `(running_mean, running_var, num_batches_tracked)` as read back.
pub type RunningValues = (Vec<f32>, Vec<f32>, i64);

/// The running statistics of one BatchNorm: `[running_mean C | running_var C |
/// num_batches_tracked]` from word `offset` of a buffer, the count an int64 (two u32 words,
/// low first). PyTorch's initial values: mean 0, var 1, count 0.
#[derive(Clone)]
pub struct RunningStats {
    buffer: Arc<GpuBuffer>,
    /// First u32 word.
    offset: usize,
    channels: usize,
}

impl std::fmt::Debug for RunningStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningStats")
            .field("offset", &self.offset)
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
            offset: 0,
            channels,
        };
        stats.write(ctx, &vec![0.0; channels], &vec![1.0; channels], 0)?;
        Ok(stats)
    }

    /// The statistics of `channels` channels from u32 word `offset` of `buffer` (a model's
    /// buffer store, which lays out a BatchNorm's `running_mean`, `running_var` and
    /// `num_batches_tracked` one after the other). Not a tensor view: the words need not sit
    /// at the device's binding alignment.
    pub fn at(buffer: Arc<GpuBuffer>, offset: usize, channels: usize) -> Result<Self> {
        let words = (2 * channels + 2) as u64;
        if channels == 0 || buffer.size() < 4 * (offset as u64 + words) {
            return Err(Error::shape(
                "batchnorm",
                format!(
                    "running statistics of {channels} channels at word {offset} do not fit a \
                     buffer of {} bytes",
                    buffer.size()
                ),
            ));
        }
        Ok(RunningStats {
            buffer,
            offset,
            channels,
        })
    }

    pub fn channels(&self) -> usize {
        self.channels
    }

    /// The buffer, for views and copies (`[mean | var | count]` from [`Self::offset`]).
    pub fn buffer(&self) -> &Arc<GpuBuffer> {
        &self.buffer
    }

    /// The first u32 word of the statistics in [`Self::buffer`].
    pub fn offset(&self) -> usize {
        self.offset
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
        ctx.write_buffer(
            &self.buffer,
            self.byte_offset(),
            bytemuck::cast_slice(&words),
        );
        Ok(())
    }

    /// `(running_mean, running_var, num_batches_tracked)`, read back (async: works on the
    /// web).
    pub async fn read_async(&self, ctx: &GpuContext) -> Result<RunningValues> {
        let bytes = ctx
            .read_bytes_async(&self.buffer, self.byte_offset(), 4 * self.words() as u64)
            .await?;
        Ok(self.decode(&bytes))
    }

    /// Blocking [`RunningStats::read_async`] (native only: tests and the end of a run).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn read(&self, ctx: &GpuContext) -> Result<RunningValues> {
        let bytes = ctx.read_bytes(&self.buffer, self.byte_offset(), 4 * self.words() as u64)?;
        Ok(self.decode(&bytes))
    }

    fn byte_offset(&self) -> u64 {
        4 * self.offset as u64
    }

    fn decode(&self, bytes: &[u8]) -> RunningValues {
        let words: Vec<u32> = bytemuck::pod_collect_to_vec(bytes);
        let c = self.channels;
        let f = |w: &[u32]| w.iter().map(|&b| f32::from_bits(b)).collect();
        let count = (words[2 * c] as u64 | ((words[2 * c + 1] as u64) << 32)) as i64;
        (f(&words[..c]), f(&words[c..2 * c]), count)
    }
}
