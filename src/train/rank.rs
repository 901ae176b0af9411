//! A process's place in a data-parallel job, as the trainer and the run hold it: one field
//! type each, so what differs between a single process, a rank of an MPI job (native) and
//! the web lives in this file alone.
//!
//! - [`Exchange`] (the trainer's): a rank all-reduces the gradients of each optimizer step
//!   between the backward and unscale ([`exchange`], native; `distributed.rs` joins a job);
//!   a single process, and the web, never do;
//! - [`Rank`] (the run's): a rank trains on its shard of every epoch
//!   ([`DistributedSampler`]) and gathers its next micro-batch while the gradients are
//!   all-reduced; a single process takes the whole [`Loader`] order and hands its batches
//!   to the trainer directly (`Run::advance`).

use std::rc::Rc;

use crate::data::{Batch, Dataset, EpochBatches, Loader};
use crate::dist::{Collective, DistributedSampler};
use crate::error::{Error, Result};
use crate::gpu::{GpuBuffer, GpuContext};

#[cfg(not(target_arch = "wasm32"))]
pub mod exchange;

/// The buffers of a step that the ranks all-reduce: the flat gradients, the metrics (the
/// micro-batch losses from word [`super::stats::METRIC_LOSSES`]) and, where the scaler is
/// enabled, its state (the found-inf word the ranks agree on).
#[cfg_attr(target_arch = "wasm32", allow(dead_code))] // the web never all-reduces
pub(crate) struct StepBuffers<'a> {
    pub grads: &'a GpuBuffer,
    pub metrics: &'a GpuBuffer,
    pub scaler_state: Option<&'a GpuBuffer>,
}

/// The trainer's gradient all-reduce: none in a single process (and always none on the web).
#[derive(Default)]
pub(crate) struct Exchange {
    #[cfg(not(target_arch = "wasm32"))]
    joined: Option<exchange::GradExchange>,
}

impl Exchange {
    /// One rank of `collective`'s job, all-reducing the flat gradient buffer `grads` and
    /// `loss_words` micro-batch losses per step (native).
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn joined(
        ctx: &GpuContext,
        collective: Rc<dyn Collective>,
        grads: &GpuBuffer,
        loss_words: usize,
        working: Option<(std::sync::Arc<GpuBuffer>, usize)>,
    ) -> Self {
        Self {
            joined: Some(exchange::GradExchange::new(
                ctx, collective, grads, loss_words, working,
            )),
        }
    }

    /// Whether the steps all-reduce their gradients (a rank of a data-parallel job).
    pub(crate) fn is_joined(&self) -> bool {
        #[cfg(not(target_arch = "wasm32"))]
        return self.joined.is_some();
        #[cfg(target_arch = "wasm32")]
        false
    }

    /// The ranks the steps are averaged over (1 in a single process).
    pub(crate) fn ranks(&self) -> usize {
        #[cfg(not(target_arch = "wasm32"))]
        if let Some(ex) = &self.joined {
            return ex.collective().size();
        }
        1
    }

    /// The exchange's counters (`None` in a single process).
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn stats(&self) -> Option<&exchange::ExchangeStats> {
        self.joined.as_ref().map(|ex| &ex.stats)
    }

    /// On a rank: submit `encoder` (forward and backward of a step's last micro-batch) with a
    /// copy of the gradients and losses, wait for it, sum them over the ranks (`overlap` runs
    /// meanwhile), write them back with the agreed found-inf flag, and return a fresh encoder
    /// for the rest of the step. In a single process: `encoder` untouched, nothing
    /// submitted, `overlap` never runs.
    pub(crate) fn all_reduce(
        &mut self,
        ctx: &GpuContext,
        encoder: wgpu::CommandEncoder,
        step: StepBuffers<'_>,
        overlap: &mut dyn FnMut(),
    ) -> Result<wgpu::CommandEncoder> {
        #[cfg(not(target_arch = "wasm32"))]
        if let Some(ex) = &mut self.joined {
            return ex.exchange(ctx, encoder, step, overlap);
        }
        let _single_process = (ctx, step, overlap);
        Ok(encoder)
    }
}

/// The run's rank: none in a single process (and always none on the web).
#[derive(Default)]
pub(crate) struct Rank {
    joined: Option<RankState>,
}

/// What a rank of several holds.
#[cfg_attr(target_arch = "wasm32", allow(dead_code))]
struct RankState {
    collective: Rc<dyn Collective>,
    sampler: DistributedSampler,
    /// The micro-batch gathered during the last all-reduce: (epoch, batch in epoch, batch).
    prefetched: Option<(u64, usize, Batch)>,
}

impl Rank {
    /// Rank `collective.rank()` of a job, training on `sampler`'s shard (native: joined by
    /// `Run::distribute`).
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))]
    pub(crate) fn joined(collective: Rc<dyn Collective>, sampler: DistributedSampler) -> Self {
        Self {
            joined: Some(RankState {
                collective,
                sampler,
                prefetched: None,
            }),
        }
    }

    /// The collective this process is a rank of (`None` in a single process).
    pub(crate) fn collective(&self) -> Option<&Rc<dyn Collective>> {
        self.joined.as_ref().map(|r| &r.collective)
    }

    /// Whether this process writes checkpoints and reports (rank 0, or a single process).
    pub(crate) fn is_writer(&self) -> bool {
        self.collective().is_none_or(|c| c.rank() == 0)
    }

    /// Batch order of `epoch` for this process: its shard, or all of `loader`'s.
    pub(crate) fn batches(&self, loader: &Loader, epoch: u64) -> EpochBatches {
        match &self.joined {
            Some(r) => r.sampler.batches(epoch),
            None => loader.batches(epoch),
        }
    }

    /// Batches per epoch for this process.
    pub(crate) fn batches_per_epoch(&self, loader: &Loader) -> usize {
        match &self.joined {
            Some(r) => r.sampler.num_batches(),
            None => loader.num_batches(),
        }
    }

    /// Samples this process sees per epoch.
    pub(crate) fn samples_per_epoch(&self, loader: &Loader) -> usize {
        match &self.joined {
            Some(r) => r.sampler.samples_per_rank(),
            None => loader.n,
        }
    }

    /// Whether this process is a rank of a data-parallel job (a single process trains on
    /// its batches directly, without [`Rank::gather_and_train`]).
    pub(crate) fn is_joined(&self) -> bool {
        self.joined.is_some()
    }

    /// On a rank: gather micro-batch `b` of epoch `epoch`'s `order` into `batch` and `train`
    /// on it. The batch comes from the prefetch made during the last all-reduce when it was
    /// that one, and `train`'s overlap (run while the gradients are all-reduced) gathers the
    /// next one. An error in a single process, which never takes this hop.
    pub(crate) fn gather_and_train(
        &mut self,
        train: &Dataset,
        order: &EpochBatches,
        (epoch, b): (u64, usize),
        batch: &mut Batch,
        step: impl FnOnce(&Batch, &mut dyn FnMut()) -> Result<()>,
    ) -> Result<()> {
        let Some(rank) = self.joined.as_mut() else {
            return Err(Error::Distributed(
                "gather_and_train: this process is not a rank of a data-parallel job".into(),
            ));
        };
        match rank.prefetched.take() {
            Some((e, pb, mut next)) if e == epoch && pb == b => std::mem::swap(batch, &mut next),
            _ => train.gather_indices_into(&order[b], batch)?,
        }
        let mut prefetch_error = None;
        let next = b + 1;
        let mut overlap = || {
            if next < order.len() {
                let mut spare = match rank.prefetched.take() {
                    Some((_, _, spare)) => spare,
                    None => Batch::empty(&train.y),
                };
                match train.gather_indices_into(&order[next], &mut spare) {
                    Ok(()) => rank.prefetched = Some((epoch, next, spare)),
                    Err(e) => prefetch_error = Some(e),
                }
            }
        };
        step(batch, &mut overlap)?;
        match prefetch_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}
