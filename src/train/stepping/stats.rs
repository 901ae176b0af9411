//! Step stats on their way back: each optimizer step's last submission copies the step's
//! metrics (scale used, found-inf flag, scale after the update, loss of every micro-batch)
//! into a slot of a [`ReadbackRing`] ([`RING`] slots unless the trainer is told otherwise),
//! and [`StatsRing::collect`] turns landed slots into [`StepStats`], a few steps late.
//!
//! The host waits only when every slot is still in flight, i.e. the GPU is a whole ring of
//! steps behind: [`StatsRing::wait_oldest`] then blocks for the oldest slot's submission
//! alone and counts one throttle wait.

use std::collections::VecDeque;

use crate::error::Result;
use crate::gpu::{GpuBuffer, GpuContext, ReadbackRing};

/// Optimizer steps whose stats can be in flight at once, by default.
pub const RING: usize = 8;
/// Word index of the first micro-batch loss in the step metrics.
pub(crate) const METRIC_LOSSES: u64 = 3;

/// What one optimizer step reports (read a few steps late).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct StepStats {
    /// 1-based optimizer step.
    pub step: u64,
    /// Unscaled f32 loss of this step's forward (mean over its micro-batches).
    pub loss: f32,
    /// The scale this step's backward was seeded with.
    pub scale: f32,
    /// The scale after this step's update (what the next step uses; PyTorch's
    /// `scaler.get_scale()` after `scaler.update()`).
    pub scale_after: f32,
    /// True when the gradients had inf/NaN and the optimizer step was skipped.
    pub skipped: bool,
    /// The learning rate this step's optimizer update used (or would have, when skipped).
    pub lr: f32,
}

impl StepStats {
    /// Decode the metrics words of `step` (see [`METRIC_LOSSES`]) with `micro` losses.
    fn from_words(step: u64, micro: usize, lr: f32, words: &[u32]) -> Self {
        let first = METRIC_LOSSES as usize;
        let losses = &words[first..first + micro];
        let sum: f32 = losses.iter().map(|&w| f32::from_bits(w)).sum();
        StepStats {
            step,
            loss: sum / micro.max(1) as f32,
            scale: f32::from_bits(words[0]),
            skipped: words[1] != 0,
            scale_after: f32::from_bits(words[2]),
            lr,
        }
    }
}

/// Step number, micro-batch count and learning rate of a slot, and where in it the step's
/// numerics counts start (u32 words) when the step counted them.
struct Tag {
    step: u64,
    micro: usize,
    lr: f32,
    numerics_at: Option<usize>,
}

/// The trainer's stats ring. See the module docs.
pub(crate) struct StatsRing {
    ring: ReadbackRing<Tag>,
    ready: VecDeque<StepStats>,
    /// (step, counts words) of the counted steps collected ([`crate::train::numerics`]).
    numerics: VecDeque<(u64, Vec<u32>)>,
    throttle_waits: u64,
    last_throttle_wait: Option<u64>,
}

impl StatsRing {
    pub(crate) fn new(ctx: &GpuContext, slots: usize, metrics_bytes: u64) -> Self {
        Self {
            ring: ReadbackRing::new(ctx, "step.ring", slots, metrics_bytes),
            ready: VecDeque::new(),
            numerics: VecDeque::new(),
            throttle_waits: 0,
            last_throttle_wait: None,
        }
    }

    /// Where the next step's metrics go (`None` while every slot is in flight).
    pub(crate) fn next_buffer(&self) -> Option<&GpuBuffer> {
        self.ring.next_buffer()
    }

    /// Submit the step's last command buffer (which copies into [`StatsRing::next_buffer`]);
    /// `numerics_at`: the word its numerics counts start at, when it counted them.
    pub(crate) fn submit(
        &mut self,
        ctx: &GpuContext,
        encoder: wgpu::CommandEncoder,
        step: u64,
        micro: usize,
        lr: f32,
        numerics_at: Option<usize>,
    ) -> Result<()> {
        let tag = Tag {
            step,
            micro,
            lr,
            numerics_at,
        };
        self.ring.submit(ctx, encoder, tag)?;
        Ok(())
    }

    /// Every slot is in flight (after taking the landed ones without waiting).
    pub(crate) fn is_full(&mut self, ctx: &GpuContext) -> bool {
        if self.ring.is_full() {
            self.collect(ctx);
        }
        self.ring.is_full()
    }

    /// Take every landed slot, in step order, without waiting.
    pub(crate) fn collect(&mut self, ctx: &GpuContext) {
        ctx.poll_ready();
        while let Some((stats, numerics)) = self.ring.take_ready(|tag, bytes| {
            let words: &[u32] = bytemuck::cast_slice(bytes);
            let stats = StepStats::from_words(tag.step, tag.micro, tag.lr, words);
            let numerics = tag.numerics_at.map(|at| (tag.step, words[at..].to_vec()));
            (stats, numerics)
        }) {
            self.ready.push_back(stats);
            self.numerics.extend(numerics);
        }
    }

    /// Block for the oldest slot's submission only, take what landed, and count one throttle
    /// wait. The web cannot block: there this is an error (check [`StatsRing::is_full`]
    /// first).
    pub(crate) fn wait_oldest(&mut self, ctx: &GpuContext) -> Result<()> {
        #[cfg(target_arch = "wasm32")]
        {
            let _ = ctx;
            Err(crate::error::Error::Gpu(
                "the GPU is a whole ring of steps behind; check can_submit first".into(),
            ))
        }
        #[cfg(not(target_arch = "wasm32"))]
        {
            let oldest = self.ring.oldest().map(|t| t.step);
            let before = self.ring.waits();
            self.ring.wait_oldest(ctx)?;
            if self.ring.waits() > before {
                self.throttle_waits += 1;
                self.last_throttle_wait = oldest;
            }
            self.collect(ctx);
            Ok(())
        }
    }

    /// Block until every submitted step has finished and its slot has landed, then take them
    /// all (the end of a run: after this nothing is in flight). Native only: on the web it is
    /// an error.
    pub(crate) fn collect_all(&mut self, ctx: &GpuContext) -> Result<()> {
        #[cfg(target_arch = "wasm32")]
        {
            let _ = ctx;
            Err(crate::error::Error::Gpu(
                "the web cannot wait for the GPU; poll the stats instead".into(),
            ))
        }
        #[cfg(not(target_arch = "wasm32"))]
        {
            ctx.sync()?;
            self.ring.wait_all(ctx)?;
            self.collect(ctx);
            Ok(())
        }
    }

    /// Stats collected so far, in step order.
    pub(crate) fn drain(&mut self) -> Vec<StepStats> {
        self.ready.drain(..).collect()
    }

    /// The counts words of counted step `step`, once collected (earlier ones are dropped:
    /// steps are taken in order).
    pub(crate) fn take_numerics(&mut self, step: u64) -> Option<Vec<u32>> {
        while let Some((s, _)) = self.numerics.front() {
            if *s > step {
                return None;
            }
            let (s, words) = self.numerics.pop_front()?;
            if s == step {
                return Some(words);
            }
        }
        None
    }

    /// Make the ring `slots` deep (nothing may be in flight); collected stats stay.
    pub(crate) fn resize(&mut self, ctx: &GpuContext, slots: usize, metrics_bytes: u64) -> bool {
        if self.ring.in_flight() > 0 {
            return false;
        }
        self.ring = ReadbackRing::new(ctx, "step.ring", slots, metrics_bytes);
        true
    }

    pub(crate) fn slots(&self) -> usize {
        self.ring.capacity()
    }

    /// Steps whose stats have not been collected yet.
    pub(crate) fn in_flight(&self) -> usize {
        self.ring.in_flight()
    }

    pub(crate) fn throttle_waits(&self) -> u64 {
        self.throttle_waits
    }

    pub(crate) fn last_throttle_wait(&self) -> Option<u64> {
        self.last_throttle_wait
    }
}
