//! One rank of a data-parallel run (native): the gradient exchange inside the step and what
//! a [`Run`] does differently when it is one of several ranks ([`Run::distribute`]).
//!
//! The step of a distributed trainer splits its last micro-batch's submission in two:
//! 1. forward + backward (as always), then a copy of the flat f32 gradient buffer and of the
//!    step's micro-batch losses into a `MAP_READ` staging buffer; submit;
//! 2. **the host waits** for that submission (one counted host wait per optimizer step: wgpu
//!    buffers are not memory MPI can read, so the gradients cross the host);
//! 3. the mapped gradients and losses are summed over the ranks by one nonblocking
//!    all-reduce (the whole flat buffer is one bucket), while the host checks its own
//!    gradients for inf/NaN and gathers the next micro-batch; **the host waits** for the
//!    all-reduce to complete (`dist::mpi`), then for the logical-or of the found-inf flags;
//! 4. the summed gradients, the losses averaged over ranks and (when any rank saw inf/NaN
//!    and the GradScaler is on) `found_inf` are written back with `queue.write_buffer`;
//! 5. unscale, clipping, the optimizer step and the scale update are recorded and submitted
//!    as in a single process, into the stats ring.
//!
//! The backward of every rank is seeded with `1 / (micro-batches × ranks)` instead of
//! `1 / micro-batches`: each rank's gradient is its share of the mean over the global batch,
//! so the all-reduce is a plain sum and every f16 value in a rank's backward equals the one a
//! single process with the global batch computes for the same sample (same overflows, same
//! skipped steps). A single process never takes any of this: its step is one submit per
//! micro-batch, unchanged.

use std::rc::Rc;

mod exchange;

pub use exchange::ExchangeStats;
pub(crate) use exchange::GradExchange;

use super::batch::BatchTargets;
use super::evaluate::{EvalTally, Evaluation};
use super::run::Run;
use super::trainer::Trainer;
use crate::data::{Batch, Dataset};
use crate::dist::{Collective, DistributedSampler, Fingerprint, differing_ranks};
use crate::error::{Error, Result};
use crate::gpu::GpuContext;

impl Trainer {
    /// Make this trainer one rank of a data-parallel job: each optimizer step all-reduces
    /// the gradients over `collective` before unscale (see the module docs). Only before
    /// the first step (the backward's seed depends on the number of ranks).
    pub fn distribute(&mut self, ctx: &GpuContext, collective: Rc<dyn Collective>) -> Result<()> {
        if !self.nets.is_empty() || self.steps_submitted() > 0 || self.exchange.is_some() {
            return Err(Error::Distributed(
                "a trainer can join a data-parallel job only before its first step".into(),
            ));
        }
        self.exchange = Some(GradExchange::new(
            ctx,
            collective,
            &self.store.grads,
            self.config.grad_accum,
        ));
        Ok(())
    }

    /// The gradient exchange's counters (`None` in a single process).
    pub fn exchange_stats(&self) -> Option<&ExchangeStats> {
        self.exchange.as_ref().map(|e| &e.stats)
    }

    /// The ranks this trainer's steps are averaged over (1 in a single process).
    pub fn ranks(&self) -> usize {
        self.exchange.as_ref().map_or(1, |e| e.collective().size())
    }

    /// A fingerprint of everything that must be equal on every rank: parameters, optimizer
    /// and scaler state (read back: outside the step loop).
    pub fn state_fingerprint(&self, ctx: &GpuContext) -> Result<Fingerprint> {
        let mut print = Fingerprint::default();
        for (name, values) in self.store.download(ctx)? {
            print.bytes(name.as_bytes()).f32s(&values);
        }
        let opt = self.optimizer.state(ctx)?;
        print.bytes(&opt.step.to_le_bytes());
        for moment in [&opt.momentum_buffer, &opt.exp_avg, &opt.exp_avg_sq]
            .into_iter()
            .flatten()
        {
            print.f32s(moment);
        }
        let scaler = serde_json::to_string(&self.scaler.state_dict(ctx)?)
            .map_err(|e| Error::Distributed(format!("scaler state: {e}")))?;
        print.bytes(scaler.as_bytes());
        Ok(print)
    }
}

/// What a [`Run`] holds when it is one rank of several.
pub(crate) struct RankState {
    pub(crate) collective: Rc<dyn Collective>,
    pub(crate) sampler: DistributedSampler,
    /// The micro-batch gathered during the last all-reduce: (epoch, batch in epoch, batch).
    pub(crate) prefetched: Option<(u64, usize, Batch)>,
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
        if self.rank.is_some() {
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

        let c = &self.config;
        let mut print = self.trainer.state_fingerprint(ctx)?;
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
        self.trainer.distribute(ctx, collective.clone())?;
        self.rank = Some(RankState {
            collective,
            sampler,
            prefetched: None,
        });
        Ok(())
    }

    /// The collective this run is a rank of (`None` in a single process).
    pub fn collective(&self) -> Option<&Rc<dyn Collective>> {
        self.rank.as_ref().map(|r| &r.collective)
    }

    /// Whether this process writes checkpoints and reports (rank 0, or a single process).
    pub fn is_writer(&self) -> bool {
        self.rank.as_ref().is_none_or(|r| r.collective.rank() == 0)
    }

    /// Samples this process sees per epoch (its shard when distributed).
    pub fn samples_per_epoch(&self) -> usize {
        match &self.rank {
            Some(r) => r.sampler.samples_per_rank(),
            None => self.loader.n,
        }
    }

    /// Batch order of `epoch` for this process.
    pub(super) fn batches_of(&self, epoch: u64) -> Vec<Vec<usize>> {
        match &self.rank {
            Some(r) => r.sampler.batches(epoch),
            None => self.loader.batches(epoch),
        }
    }

    /// Batches per epoch for this process.
    pub(super) fn batches_per_epoch(&self) -> usize {
        match &self.rank {
            Some(r) => r.sampler.num_batches(),
            None => self.loader.num_batches(),
        }
    }

    /// [`Run::advance`]'s gather-and-train on a rank: micro-batch `b` of `order` comes from
    /// the prefetch made during the last all-reduce when it was that one; a micro-batch that
    /// completes a step gathers the next one while its gradients are reduced.
    pub(super) fn gather_and_train_rank(
        &mut self,
        ctx: &GpuContext,
        train: &Dataset,
        order: &[Vec<usize>],
        b: usize,
    ) -> Result<usize> {
        let epoch = self.progress.epoch;
        let batch = self.batch.get_or_insert_with(|| Batch::empty(&train.y));
        let Some(rank) = self.rank.as_mut() else {
            return Err(Error::Distributed("not a distributed run".into()));
        };
        match rank.prefetched.take() {
            Some((e, pb, mut next)) if e == epoch && pb == b => std::mem::swap(batch, &mut next),
            _ => train.gather_into(&order[b], batch)?,
        }
        let mut prefetch_error = None;
        let next = b + 1;
        let mut overlap = || {
            if next < order.len() {
                let mut spare = match rank.prefetched.take() {
                    Some((_, _, spare)) => spare,
                    None => Batch::empty(&train.y),
                };
                match train.gather_into(&order[next], &mut spare) {
                    Ok(()) => rank.prefetched = Some((epoch, next, spare)),
                    Err(e) => prefetch_error = Some(e),
                }
            }
        };
        self.trainer.train_batch_overlapped(
            ctx,
            batch.size,
            &batch.x,
            BatchTargets::from(&batch.y),
            &mut overlap,
        )?;
        if let Some(e) = prefetch_error {
            return Err(e);
        }
        Ok(batch.size)
    }

    /// Validation over this rank's share of `set` (every `ranks`-th sample from its rank),
    /// summed over the ranks: the mean over the whole set on every rank.
    pub(super) fn evaluate_sharded(
        &mut self,
        ctx: &GpuContext,
        set: &Dataset,
    ) -> Result<Evaluation> {
        let Some(rank) = &self.rank else {
            return Err(Error::Distributed("not a distributed run".into()));
        };
        let collective = rank.collective.clone();
        let mine: Vec<usize> = (collective.rank()..set.n)
            .step_by(collective.size())
            .collect();
        let batches: Vec<Batch> = mine
            .chunks(self.config.batch_size)
            .map(|idx| set.gather(idx))
            .collect::<Result<_>>()?;
        let tally = self.trainer.evaluate_tally(
            ctx,
            batches
                .iter()
                .map(|b| (b.size, b.x.clone(), BatchTargets::from(&b.y))),
        )?;
        let mut sums = tally.sums();
        collective.all_reduce_sum_f64(&mut sums)?;
        Ok(EvalTally::from_sums(sums).finish(self.config.step.loss))
    }

    /// Check that every rank holds the same parameters, optimizer and scaler state (the end
    /// of a distributed run; nothing to check in a single process).
    pub(super) fn check_replicas(&mut self, ctx: &GpuContext) -> Result<()> {
        let Some(rank) = &self.rank else {
            return Ok(());
        };
        let collective = rank.collective.clone();
        let print = self.trainer.state_fingerprint(ctx)?;
        let differ = differing_ranks(&collective.all_gather_u64(print.value())?);
        if !differ.is_empty() {
            return Err(Error::Distributed(format!(
                "after step {} rank(s) {differ:?} hold different parameters or optimizer state \
                 than rank 0 (the all-reduce gave ranks different sums, or their adapters \
                 compute differently)",
                self.progress.step
            )));
        }
        Ok(())
    }

    /// The summary's part about the ranks (`None` in a single process). Collective: every
    /// rank must call it.
    pub(super) fn distributed_summary(&self) -> Result<Option<DistributedSummary>> {
        let Some(rank) = &self.rank else {
            return Ok(None);
        };
        let stats = self.trainer.exchange_stats().cloned().unwrap_or_default();
        let local = rank
            .collective
            .all_gather_u64(stats.local_nonfinite_steps)?;
        let steps = stats.steps.max(1) as f64;
        Ok(Some(DistributedSummary {
            transport: rank.collective.describe(),
            ranks: rank.collective.size(),
            batch_per_rank: self.config.batch_size,
            global_batch: rank.collective.size()
                * self.config.batch_size
                * self.config.step.grad_accum,
            all_reduce_bytes_per_step: stats.bytes_per_step,
            readback_ms_per_step: 1000.0 * stats.readback_secs / steps,
            all_reduce_ms_per_step: 1000.0 * stats.all_reduce_secs / steps,
            local_nonfinite_steps: local,
        }))
    }
}
