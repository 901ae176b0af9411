//! One rank of a data-parallel run (native): joining a job ([`Run::distribute`]), and what a
//! run does differently at its ends as one of several ranks (validation over shards, the
//! check that every rank holds the same state, the summary). What the step and the loop do
//! differently lives in `rank.rs`; the gradient all-reduce itself in `rank/exchange.rs`.

use std::rc::Rc;

pub use super::rank::exchange::ExchangeStats;

use super::evaluate::{EvalTally, Evaluation, Tally};
use super::rank::Rank;
use super::run::Run;
use super::trainer::Trainer;
use crate::data::Dataset;
use crate::dist::{Collective, DistributedSampler, Fingerprint, differing_ranks};
use crate::error::{Error, Result};
use crate::gpu::GpuContext;

/// A fingerprint of everything that must be equal on every rank: `trainer`'s parameters,
/// optimizer and scaler state (read back: outside the step loop).
pub fn state_fingerprint(trainer: &Trainer, ctx: &GpuContext) -> Result<Fingerprint> {
    let mut print = Fingerprint::default();
    for (name, values) in trainer.store.download(ctx)? {
        print.bytes(name.as_bytes()).f32s(&values);
    }
    let opt = trainer.optimizer.state(ctx)?;
    print.bytes(&opt.step.to_le_bytes());
    for moment in [&opt.momentum_buffer, &opt.exp_avg, &opt.exp_avg_sq]
        .into_iter()
        .flatten()
    {
        print.f32s(moment);
    }
    let scaler = serde_json::to_string(&trainer.scaler.state_dict(ctx)?)
        .map_err(|e| Error::Distributed(format!("scaler state: {e}")))?;
    print.bytes(scaler.as_bytes());
    for (name, values) in trainer.store.buffers.download(ctx)? {
        print
            .bytes(name.as_bytes())
            .bytes(bytemuck::cast_slice(&values.words()));
    }
    Ok(print)
}

/// The summary's part about the ranks (rank 0's view).
#[derive(Clone, Debug, serde::Serialize)]
pub struct DistributedSummary {
    /// What carries the collectives.
    pub transport: String,
    pub ranks: usize,
    pub batch_per_rank: usize,
    /// Samples per optimizer step over every rank: ranks × batch per rank × micro-batches.
    pub global_batch: usize,
    /// Bytes each rank puts into each step's all-reduce.
    pub all_reduce_bytes_per_step: u64,
    /// Rank 0's host time waiting for its backward before the all-reduce, per step (ms).
    pub readback_ms_per_step: f64,
    /// Rank 0's time in the all-reduces per step, overlapped work included (ms).
    pub all_reduce_ms_per_step: f64,
    /// Per rank: steps whose own gradients held inf/NaN before the all-reduce (every rank
    /// skipped those steps).
    pub local_nonfinite_steps: Vec<u64>,
}

impl Run {
    /// Make this run rank `collective.rank()` of a data-parallel job of `collective.size()`
    /// ranks, right after [`Run::new`]: parameters become rank 0's (broadcast), the data
    /// order becomes this rank's shard ([`DistributedSampler`]), each step all-reduces its
    /// gradients, and every rank is checked to hold the same configuration, parameters,
    /// optimizer and scaler state and progress (an error otherwise).
    pub fn distribute(
        &mut self,
        ctx: &GpuContext,
        train: &Dataset,
        collective: Rc<dyn Collective>,
    ) -> Result<()> {
        if self.rank.collective().is_some() {
            return Err(Error::Distributed("the run is already distributed".into()));
        }
        // Rank 0's parameters on every rank (its --init, its seed, its checkpoint).
        let mut params: Vec<f32> = self
            .trainer
            .store
            .download(ctx)?
            .into_iter()
            .flat_map(|(_, v)| v)
            .collect();
        collective.broadcast_f32(&mut params)?;
        let mut named = Vec::new();
        let mut at = 0;
        for e in &self.trainer.store.layout.entries {
            named.push((e.name.clone(), params[at..at + e.numel()].to_vec()));
            at += e.numel();
        }
        self.trainer.store.upload(ctx, &named)?;
        // And its buffers (PyTorch DDP's broadcast_buffers), bit for bit.
        let buffers = &self.trainer.store.buffers;
        if !buffers.is_empty() {
            let mut words: Vec<f32> = buffers
                .download(ctx)?
                .iter()
                .flat_map(|(_, v)| v.words())
                .map(f32::from_bits)
                .collect();
            collective.broadcast_f32(&mut words)?;
            let bits: Vec<u32> = words.iter().map(|w| w.to_bits()).collect();
            buffers.upload_words(ctx, &bits)?;
        }

        let c = &self.config;
        let mut print = state_fingerprint(&self.trainer, ctx)?;
        print.bytes(
            format!(
                "{:?} {} {:?} {:?} {} {} {:?} {} {:?} {:?}",
                c.step,
                c.batch_size,
                c.epochs,
                c.steps,
                c.seed,
                c.shuffle,
                self.progress,
                train.n,
                train.sample_shape,
                self.trainer.spec,
            )
            .as_bytes(),
        );
        let prints = collective.all_gather_u64(print.value())?;
        let differ = differing_ranks(&prints);
        if !differ.is_empty() {
            return Err(Error::Distributed(format!(
                "rank(s) {differ:?} start from a different state than rank 0 (flags, data set, \
                 model, --resume checkpoint or optimizer state differ); every rank must be \
                 started with the same command and files"
            )));
        }
        let sampler = DistributedSampler::new(
            train.n,
            collective.size(),
            collective.rank(),
            self.config.batch_size,
            self.config.shuffle,
            self.progress.seed,
        )?;
        self.trainer.join(ctx, collective.clone())?;
        self.rank = Rank::joined(collective, sampler);
        Ok(())
    }

    /// Validation over this rank's share of `set` (every `ranks`-th sample from its rank),
    /// summed over the ranks: the mean over the whole set on every rank.
    pub(super) fn evaluate_sharded(
        &mut self,
        ctx: &GpuContext,
        set: &Dataset,
    ) -> Result<Evaluation> {
        let Some(collective) = self.rank.collective().cloned() else {
            return Err(Error::Distributed("not a distributed run".into()));
        };
        let mine: Vec<usize> = (collective.rank()..set.n)
            .step_by(collective.size())
            .collect();
        let mut tally = Tally::new(ctx);
        tally.add_indices(&mut self.trainer, set, mine.chunks(self.config.batch_size))?;
        let mut sums = tally.finish()?.sums();
        collective.all_reduce_sum_f64(&mut sums)?;
        Ok(EvalTally::from_sums(sums).finish(self.config.step.loss))
    }

    /// Check that every rank holds the same parameters, optimizer and scaler state (the end
    /// of a distributed run; nothing to check in a single process).
    pub(super) fn check_replicas(&mut self, ctx: &GpuContext) -> Result<()> {
        let Some(collective) = self.rank.collective().cloned() else {
            return Ok(());
        };
        let print = state_fingerprint(&self.trainer, ctx)?;
        let differ = differing_ranks(&collective.all_gather_u64(print.value())?);
        if !differ.is_empty() {
            return Err(Error::Distributed(format!(
                "after step {} rank(s) {differ:?} hold different parameters, buffers or \
                 optimizer state than rank 0 (the all-reduce gave ranks different sums, or their adapters \
                 compute differently)",
                self.progress.step
            )));
        }
        Ok(())
    }

    /// The summary's part about the ranks (`None` in a single process). Collective: every
    /// rank must call it.
    pub(super) fn distributed_summary(&self) -> Result<Option<DistributedSummary>> {
        let Some(collective) = self.rank.collective() else {
            return Ok(None);
        };
        let stats = self.trainer.exchange_stats().cloned().unwrap_or_default();
        let local = collective.all_gather_u64(stats.local_nonfinite_steps)?;
        let steps = stats.steps.max(1) as f64;
        Ok(Some(DistributedSummary {
            transport: collective.describe(),
            ranks: collective.size(),
            batch_per_rank: self.config.batch_size,
            global_batch: collective.size() * self.config.batch_size * self.config.step.grad_accum,
            all_reduce_bytes_per_step: stats.bytes_per_step,
            readback_ms_per_step: 1000.0 * stats.readback_secs / steps,
            all_reduce_ms_per_step: 1000.0 * stats.all_reduce_secs / steps,
            local_nonfinite_steps: local,
        }))
    }
}
