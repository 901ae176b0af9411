//! The one training loop: a trainer, its data order and its progress. [`Run::advance`]
//! submits up to a budget of micro-batches without ever blocking and hands back what
//! happened; the egui app calls it once per frame per mode (native and web), and the CLI's
//! blocking [`Run::run`] (native) is a loop around it that adds validation at epoch ends,
//! periodic and final checkpoints, and waits for the oldest step only when `advance` reports
//! it is throttled.
//!
//! It is UI-free: the CLI turns [`Event`]s into a progress bar and JSON lines; the app into
//! plots.

use std::collections::VecDeque;
use std::sync::Arc;

use std::rc::Rc;

use crate::data::{Batch, Dataset, EpochBatches, Loader, Vocab};
use crate::dist::Collective;
use crate::error::{Error, Result};
use crate::gpu::GpuContext;
use crate::nn::ModelSpec;
use crate::train::checkpoint::{Checkpoint, DataOrder, Progress};
use crate::train::config::RunConfig;
use crate::train::estimate::EvalReport;
use crate::train::fault_hooks::FaultHooks;
use crate::train::guards::{SkipWatch, check_resume_progress};
use crate::train::numerics::StepNumerics;
use crate::train::rank::Rank;
use crate::train::stats::StepStats;
use crate::train::trainer::Trainer;

/// What the loop reports as it goes.
#[derive(Clone, Debug)]
pub enum Event {
    /// An optimizer step finished on the GPU (reported a few steps late). `lr` is the
    /// learning rate that step used (`stats.lr`).
    Step {
        stats: StepStats,
        epoch: u64,
        lr: f32,
        /// Its per-layer numerics, when numerics are on and counted this step
        /// ([`crate::train::numerics`]).
        numerics: Option<Arc<StepNumerics>>,
    },
    /// A periodic loss estimate ([`RunConfig::eval`]) after an optimizer step.
    Eval(EvalReport),
    /// An epoch ended and (if there is a validation set) was evaluated.
    Epoch(EpochReport),
    /// A checkpoint was written.
    Saved { path: String, step: u64 },
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct EpochReport {
    pub epoch: u64,
    pub val_loss: Option<f32>,
    pub val_accuracy: Option<f32>,
    pub images_per_sec: f64,
    pub peak_gpu_bytes: u64,
    pub steps: u64,
}

/// What one [`Run::advance`] call did.
#[derive(Clone, Debug, Default)]
pub struct Advance {
    /// Micro-batches submitted (at most the budget).
    pub submitted: usize,
    /// Samples in those micro-batches.
    pub samples: usize,
    /// Optimizer steps those micro-batches completed.
    pub steps: u64,
    /// It stopped before the budget because every stats slot is in flight (the GPU is a
    /// whole ring of steps behind). Nothing waited; call again later, or (native) wait with
    /// [`Trainer::wait_for_slot`].
    pub throttled: bool,
    /// It submitted the last batch of this epoch and stopped there.
    pub epoch_ended: Option<u64>,
    /// The step or epoch limit is reached: nothing more will be submitted.
    pub done: bool,
    /// It stopped at an optimizer-step boundary because the run was asked to
    /// ([`RunConfig::interrupt`]).
    pub interrupted: bool,
    /// [`Event::Step`] for every step whose stats came back, in order.
    pub events: Vec<Event>,
}

/// A trainer plus its data order and progress: one run.
pub struct Run {
    pub trainer: Trainer,
    pub config: RunConfig,
    pub progress: Progress,
    /// End the run with [`Error::Diverged`] when a step without a GradScaler reports a
    /// non-finite loss (the CLI). The app turns it off: its pure-f16 mode is there to show
    /// that failure.
    pub stop_on_divergence: bool,
    /// The vocabulary of a text data set (or of the resumed checkpoint), saved in every
    /// checkpoint so `sample` decodes without the data.
    pub vocab: Option<Vocab>,
    /// `progress` right after the last completed optimizer step. Checkpoints record this
    /// position, so that micro-batches accumulated since then (gradient accumulation across an
    /// epoch limit) are replayed on resume instead of lost: resumed equals uninterrupted.
    pub(in crate::train) stepped_at: Progress,
    pub(in crate::train) loader: Loader,
    /// One epoch's batch order (epoch, batches), made once per epoch.
    order: Option<(u64, Arc<EpochBatches>)>,
    /// The last micro-batch submitted (its buffers are reused for the next).
    pub(in crate::train) batch: Option<Batch>,
    /// This process's rank in a data-parallel job (`Run::distribute`, native; none in a
    /// single process).
    pub(in crate::train) rank: Rank,
    /// Epoch of each submitted-but-unreported step, oldest first.
    epochs_in_flight: VecDeque<u64>,
    /// Stats read back by a blocking wait, reported with the next events.
    pub(in crate::train) undelivered: Vec<StepStats>,
    /// Set when a step diverged; every later call returns it.
    diverged: Option<String>,
    /// The skipped steps reported so far (a run that only skips stops).
    skips: SkipWatch,
    /// The last checkpoint this run wrote and its step (for the message when a run dies).
    pub(in crate::train) last_saved: Option<(String, u64)>,
    /// Faults to cause at a chosen step (tests; from the environment on native).
    pub hooks: FaultHooks,
    /// How this run cuts its data, recorded in its checkpoints.
    data_order: DataOrder,
}

/// The hint a divergence error ends with (the CLI names its flags instead).
pub const DIVERGED_HINT: &str = "lower the learning rate or clip gradients by norm";
/// The hint a stuck GradScaler's error ends with (the CLI names its flags instead).
/// The end of [`Run::checkpoint_note`] when no checkpoint path was set.
pub const NO_CHECKPOINT: &str = "no checkpoint was asked for";
/// The end of [`Run::checkpoint_note`] when the run died before its first save.
pub const PERIODIC_HINT: &str = "(periodic saves keep one)";

impl Run {
    /// Plan a run. `init`: initial parameters by name (a preset's init, `--init`, or a
    /// checkpoint's). `resume`: a checkpoint whose optimizer, scaler and progress continue.
    pub fn new(
        ctx: &GpuContext,
        spec: ModelSpec,
        config: RunConfig,
        train: &Dataset,
        init: &[(String, Vec<f32>)],
        resume: Option<&Checkpoint>,
    ) -> Result<Self> {
        config.validate()?;
        spec.check_dataset(train)?;
        let mut trainer = Trainer::new(ctx, spec, config.step.clone(), train.output_dim(), init)?;
        let mut progress = Progress {
            seed: config.seed,
            ..Default::default()
        };
        let mut vocab = train.vocab().map(|v| Vocab::clone(v));
        if let Some(ck) = resume {
            match (&vocab, &ck.vocab) {
                (Some(data), Some(saved)) if data != saved => {
                    return Err(Error::Checkpoint(format!(
                        "the checkpoint's vocabulary ({} characters) is not the vocabulary of \
                         {} ({} characters): its token ids would stand for other characters",
                        saved.len(),
                        train.name,
                        data.len()
                    )));
                }
                (None, Some(saved)) => vocab = Some(saved.clone()),
                _ => {}
            }
            // The layers' buffers as they were (running statistics, counters).
            let buffers = ck.buffers_for_model(&trainer.spec, "the checkpoint")?;
            trainer.store.buffers.upload(ctx, &buffers)?;
            let slices = trainable_slices(&trainer);
            if let Some(o) = &ck.optimizer {
                if o.config.name() != trainer.optimizer.config().name() {
                    return Err(Error::Checkpoint(format!(
                        "the checkpoint was trained with {} but this run uses {}",
                        o.config.name(),
                        trainer.optimizer.config().name()
                    )));
                }
                let state = o.to_flat(&slices, trainer.store.layout.trainable)?;
                trainer.optimizer.load_state(ctx, &state)?;
            }
            if let Some(s) = &ck.scaler
                && trainer.scaler.enabled()
                && !s.is_empty()
            {
                trainer.scaler.load_state_dict(ctx, s)?;
            }
            let p = ck.progress;
            p.check()
                .map_err(|m| Error::Checkpoint(format!("resume progress: {m}")))?;
            progress = p;
        }
        let loader = Loader::new(train.n, config.batch_size, config.shuffle, progress.seed)?;
        if let Some(ck) = resume {
            check_resume_progress(ck, &loader)?;
        }
        let data_order = DataOrder::of(&config, train, &trainer.spec.keep_f32);
        // A resumed run continues the dropout masks and the lr schedule where the
        // checkpoint's step left them.
        trainer.start_at(progress.seed, progress.step);
        trainer.set_augmentation(ctx, config.augment, progress.seed);
        trainer.set_flip_tta(config.flip_tta);
        Ok(Self {
            trainer,
            config,
            progress,
            stop_on_divergence: true,
            vocab,
            stepped_at: progress,
            loader,
            order: None,
            batch: None,
            rank: Rank::default(),
            epochs_in_flight: VecDeque::new(),
            undelivered: Vec::new(),
            diverged: None,
            skips: SkipWatch::default(),
            last_saved: None,
            hooks: FaultHooks::from_env()?,
            data_order,
        })
    }

    /// How this run cuts its data (what its checkpoints record, so a resume can refuse
    /// a different cut).
    pub fn data_order(&self) -> &DataOrder {
        &self.data_order
    }

    /// Whether the step or epoch budget is spent (one epoch when neither is given).
    pub fn done(&self) -> bool {
        let epochs = match (self.config.epochs, self.config.steps) {
            (Some(e), _) => Some(e),
            (None, None) => Some(1),
            (None, Some(_)) => None,
        };
        self.config.steps.is_some_and(|s| self.progress.step >= s)
            || epochs.is_some_and(|e| self.progress.epoch >= e)
    }

    /// Submitted optimizer steps whose stats have not been reported yet.
    pub fn steps_in_flight(&self) -> usize {
        self.epochs_in_flight.len()
    }

    /// The collective this run is a rank of (`None` in a single process).
    pub fn collective(&self) -> Option<&Rc<dyn Collective>> {
        self.rank.collective()
    }

    /// Whether this process writes checkpoints and reports (rank 0, or a single process).
    pub fn is_writer(&self) -> bool {
        self.rank.is_writer()
    }

    /// Samples this process sees per epoch (its shard when distributed).
    pub fn samples_per_epoch(&self) -> usize {
        self.rank.samples_per_epoch(&self.loader)
    }

    /// The micro-batch submitted last (`None` before the first).
    pub fn last_batch(&self) -> Option<&Batch> {
        self.batch.as_ref()
    }

    /// Steps done before this process started (resumed runs).
    fn progress_offset(&self) -> u64 {
        self.progress.step - self.trainer.steps_submitted()
    }

    /// Submit up to `budget` micro-batches of `train` (the data set the run was made for)
    /// and collect the stats that have come back, without blocking. It stops early when
    /// the run is done, at the end of an epoch, or when every stats slot is in flight
    /// ([`Advance::throttled`]). A budget of 0 only collects.
    pub fn advance(&mut self, ctx: &GpuContext, train: &Dataset, budget: usize) -> Result<Advance> {
        self.check_diverged()?;
        let mut out = Advance::default();
        while out.submitted < budget && !self.done() {
            // Asked to stop: the step in flight finishes (its remaining micro-batches are
            // submitted), no new one starts.
            if self.trainer.pending_micro_batches() == 0 && self.config.interrupt_requested() {
                out.interrupted = true;
                break;
            }
            if !self.trainer.can_submit(ctx) {
                out.throttled = true;
                break;
            }
            let order = self.epoch_order();
            let b = self.progress.batch_in_epoch as usize;
            if b >= order.len() {
                // A position past the end of an epoch is the start of the next.
                self.progress.epoch += 1;
                self.progress.batch_in_epoch = 0;
                continue;
            }
            let pending = self.trainer.pending_micro_batches();
            let completes = pending + 1 == self.config.step.grad_accum;
            let size = self.gather_and_train(ctx, train, &order, b)?;
            if pending == 0 {
                self.hooks.step_started(ctx, self.progress.step + 1);
            }
            out.submitted += 1;
            out.samples += size;
            self.progress.batch_in_epoch = b as u64 + 1;
            if completes {
                out.steps += 1;
                self.progress.step += 1;
                self.stepped_at = self.progress;
                self.epochs_in_flight.push_back(self.progress.epoch);
            }
            // After the bookkeeping, so that a fault found now names the step just submitted.
            ctx.check()?;
            if b + 1 == order.len() {
                out.epoch_ended = Some(self.progress.epoch);
                self.progress.epoch += 1;
                self.progress.batch_in_epoch = 0;
                break;
            }
        }
        let stats = self.trainer.poll_stats(ctx);
        self.deliver(stats, &mut out.events);
        out.done = self.done();
        Ok(out)
    }

    /// Gather micro-batch `b` of `order` and train on it (one submit; a data-parallel rank
    /// goes through its prefetch and all-reduce, `rank.rs`); its sample count.
    fn gather_and_train(
        &mut self,
        ctx: &GpuContext,
        train: &Dataset,
        order: &EpochBatches,
        b: usize,
    ) -> Result<usize> {
        let batch = self.batch.get_or_insert_with(|| Batch::empty(&train.y));
        let trainer = &mut self.trainer;
        // Augmentation draws each image's crop and flip from its data-set index and the epoch.
        trainer.set_samples(&order[b], self.progress.epoch);
        if !self.rank.is_joined() {
            train.gather_indices_into(&order[b], batch)?;
            trainer.train_batch(ctx, batch.size, batch.input(), batch.targets())?;
            return Ok(batch.size);
        }
        let at = (self.progress.epoch, b);
        self.rank
            .gather_and_train(train, order, at, batch, |batch, overlap| {
                let targets = batch.targets();
                trainer.train_batch_overlapped(ctx, batch.size, batch.input(), targets, overlap)
            })?;
        Ok(batch.size)
    }

    /// The batch order of the current epoch (cached per epoch).
    fn epoch_order(&mut self) -> Arc<EpochBatches> {
        let epoch = self.progress.epoch;
        match &self.order {
            Some((e, order)) if *e == epoch => order.clone(),
            _ => {
                let order = Arc::new(self.rank.batches(&self.loader, epoch));
                self.order = Some((epoch, order.clone()));
                order
            }
        }
    }

    /// Turn stats (held-back ones first) into step events, stopping at a divergence.
    pub(in crate::train) fn deliver(&mut self, stats: Vec<StepStats>, events: &mut Vec<Event>) {
        let held = std::mem::take(&mut self.undelivered);
        for stats in held.into_iter().chain(stats) {
            if self.diverged.is_some() {
                return;
            }
            let epoch = self
                .epochs_in_flight
                .pop_front()
                .unwrap_or(self.progress.epoch);
            let numerics = self.trainer.take_numerics(stats.step).map(Arc::new);
            let stats = StepStats {
                step: stats.step + self.progress_offset(),
                ..stats
            };
            // f32 mode has no scaler to absorb a non-finite loss: stop rather than train on NaN.
            if self.stop_on_divergence && !stats.loss.is_finite() && !self.trainer.scaler.enabled()
            {
                self.diverged = Some(format!(
                    "loss became {} at step {} under {} (no GradScaler to skip the step); {DIVERGED_HINT}",
                    stats.loss, stats.step, self.config.step.precision
                ));
            }
            if self.stop_on_divergence
                && self.diverged.is_none()
                && self.trainer.scaler.enabled()
                && let Some(stuck) = self.skips.observe(
                    &stats,
                    self.config.max_skipped_steps,
                    self.trainer.scaler.config().init_scale,
                    self.config.step.precision,
                )
            {
                self.diverged = Some(stuck);
            }
            // The failing step too: its loss and numerics say where it went wrong.
            events.push(Event::Step {
                stats,
                epoch,
                lr: stats.lr,
                numerics,
            });
        }
    }

    /// The divergence error, once a step has diverged.
    pub(in crate::train) fn check_diverged(&self) -> Result<()> {
        match &self.diverged {
            Some(m) => Err(Error::Diverged(m.clone())),
            None => Ok(()),
        }
    }

    /// Which checkpoint a failed run leaves behind.
    pub fn checkpoint_note(&self) -> String {
        match (&self.last_saved, &self.config.save_path) {
            (Some((path, step)), _) => {
                format!("the last checkpoint, {path} (step {step}), is intact")
            }
            (None, Some(path)) => format!(
                "no checkpoint was written to {} {PERIODIC_HINT}",
                path.display()
            ),
            (None, None) => NO_CHECKPOINT.into(),
        }
    }

    /// A lost device or a GPU error, with the step the run stopped at and the checkpoint
    /// that survives (one line); other errors as they are. A GPU error on a device that is
    /// lost by now (a read-back that failed with it) is reported as the loss.
    pub fn explain_fault(&self, ctx: &GpuContext, e: Error) -> Error {
        let e = match (e, ctx.device_lost()) {
            (Error::Gpu(_), Some(reason)) => Error::DeviceLost(reason),
            (e, _) => e,
        };
        let stopped = |what: String| {
            format!(
                "{what}; the run stopped at step {}; {}",
                self.progress.step,
                self.checkpoint_note()
            )
        };
        match e {
            Error::DeviceLost(reason) => Error::DeviceLost(stopped(reason)),
            Error::Gpu(message) => Error::Gpu(stopped(message)),
            other => other,
        }
    }

    /// Where a resumed run starts: after the last completed optimizer step (the end of an
    /// epoch counts as the start of the next).
    pub fn resume_point(&self) -> Progress {
        let mut p = self.stepped_at;
        if p.batch_in_epoch as usize >= self.rank.batches_per_epoch(&self.loader) {
            p.epoch += 1;
            p.batch_in_epoch = 0;
        }
        p
    }
}

/// `(name, offset, len)` of every trainable parameter in the flat buffers: what the
/// optimizer's state holds (a frozen parameter has none, as in PyTorch).
pub(in crate::train) fn trainable_slices(trainer: &Trainer) -> Vec<(String, usize, usize)> {
    let layout = &trainer.store.layout;
    layout
        .entries
        .iter()
        .filter(|e| layout.trains(e))
        .map(|e| (e.name.clone(), e.offset, e.numel()))
        .collect()
}
