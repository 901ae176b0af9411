//! The training loop over a data set: epochs or a step budget, validation per epoch,
//! metrics events, periodic and final checkpoints, and resume.
//!
//! It is UI-free: the CLI turns [`Event`]s into a progress bar and JSON lines; the egui app
//! into plots.

use std::collections::VecDeque;
use std::time::Instant;

use super::checkpoint::{Checkpoint, NamedOptimizerState, NamedTensor, Progress};
use super::step::{BatchTargets, Evaluation, StepConfig, StepStats, Trainer};
use crate::data::{Batch, BatchLabels, Dataset, Loader, Split};
use crate::error::{Error, Result};
use crate::gpu::GpuContext;
use crate::nn::ModelSpec;

/// How long and on what to train.
#[derive(Clone, Debug)]
pub struct RunConfig {
    pub step: StepConfig,
    pub batch_size: usize,
    /// Stop after this many epochs (default 1 when neither limit is set)...
    pub epochs: Option<u64>,
    /// ...or after this many optimizer steps, whichever comes first.
    pub steps: Option<u64>,
    pub seed: u64,
    pub shuffle: bool,
    /// Write a checkpoint every N optimizer steps (to `save_path`).
    pub save_every: Option<u64>,
    pub save_path: Option<std::path::PathBuf>,
    /// Skip validation (it costs a readback per batch).
    pub validate: bool,
}

/// What the loop reports as it goes.
#[derive(Clone, Debug)]
pub enum Event {
    /// An optimizer step finished on the GPU (reported a few steps late).
    Step {
        stats: StepStats,
        epoch: u64,
        lr: f32,
    },
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

/// The end-of-run summary.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RunSummary {
    pub precision: String,
    pub adapter: String,
    /// The adapter's backend (`vulkan`, `gl`, `metal`, ...).
    pub backend: String,
    pub f16_storage: String,
    pub steps: u64,
    pub epochs: u64,
    pub first_loss: Option<f32>,
    pub final_loss: Option<f32>,
    pub val_loss: Option<f32>,
    pub val_accuracy: Option<f32>,
    pub ms_per_step: f64,
    pub images_per_sec: f64,
    pub peak_gpu_bytes: u64,
    pub skipped_steps: u64,
    pub final_scale: f32,
    /// Every step's stats in order (for curves and comparisons).
    #[serde(skip)]
    pub history: Vec<StepStats>,
}

/// A trainer plus its data order and progress: one run.
pub struct Run {
    pub trainer: Trainer,
    pub config: RunConfig,
    pub progress: Progress,
    /// `progress` right after the last completed optimizer step. Checkpoints record this
    /// position, so that micro-batches accumulated since then (gradient accumulation across an
    /// epoch limit) are replayed on resume instead of lost: resumed equals uninterrupted.
    stepped_at: Progress,
    loader: Loader,
    /// Epoch of each submitted-but-unreported step, oldest first.
    epochs_in_flight: VecDeque<u64>,
    /// Stats read back by a checkpoint's wait, reported with the next poll.
    undelivered: Vec<StepStats>,
    /// The last checkpoint this run wrote and its step (for the message when a run dies).
    last_saved: Option<(String, u64)>,
}

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
        if config.batch_size == 0 {
            return Err(Error::InvalidArgument(
                "--batch-size must be at least 1".into(),
            ));
        }
        if config.steps == Some(0) {
            return Err(Error::InvalidArgument("--steps must be at least 1".into()));
        }
        if config.epochs == Some(0) {
            return Err(Error::InvalidArgument("--epochs must be at least 1".into()));
        }
        spec.check_data(&train.sample_shape, train.output_dim())?;
        let mut trainer = Trainer::new(ctx, spec, config.step.clone(), train.output_dim(), init)?;
        let mut progress = Progress {
            seed: config.seed,
            ..Default::default()
        };
        if let Some(ck) = resume {
            let slices = param_slices(&trainer);
            if let Some(o) = &ck.optimizer {
                if o.config.name() != trainer.optimizer.config().name() {
                    return Err(Error::Checkpoint(format!(
                        "the checkpoint was trained with {} but this run uses {}",
                        o.config.name(),
                        trainer.optimizer.config().name()
                    )));
                }
                let state = o.to_flat(&slices, trainer.store.layout.total)?;
                trainer.optimizer.load_state(ctx, &state)?;
            }
            if let Some(s) = &ck.scaler
                && trainer.scaler.enabled()
                && !s.is_empty()
            {
                trainer.scaler.load_state_dict(ctx, s)?;
            }
            progress = ck.progress;
        }
        let loader = Loader::new(train.n, config.batch_size, config.shuffle, progress.seed)?;
        Ok(Self {
            trainer,
            config,
            progress,
            stepped_at: progress,
            loader,
            epochs_in_flight: VecDeque::new(),
            undelivered: Vec::new(),
            last_saved: None,
        })
    }

    /// Whether the step or epoch budget is spent (one epoch when neither is given).
    fn done(&self) -> bool {
        let epochs = match (self.config.epochs, self.config.steps) {
            (Some(e), _) => Some(e),
            (None, None) => Some(1),
            (None, Some(_)) => None,
        };
        self.config.steps.is_some_and(|s| self.progress.step >= s)
            || epochs.is_some_and(|e| self.progress.epoch >= e)
    }

    /// Steps done before this process started (resumed runs).
    fn progress_offset(&self) -> u64 {
        self.progress.step - self.trainer.steps_submitted()
    }

    /// Train until the configured limit, reporting through `on_event`. A lost device ends
    /// the run with an error that says where it stopped and which checkpoint survives.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn run(
        &mut self,
        ctx: &GpuContext,
        split: &Split,
        on_event: &mut dyn FnMut(&Event),
    ) -> Result<RunSummary> {
        self.run_inner(ctx, split, on_event).map_err(|e| match e {
            Error::DeviceLost(reason) => Error::DeviceLost(format!(
                "{reason}; the run stopped after step {}; {}",
                self.progress.step,
                self.checkpoint_note()
            )),
            other => other,
        })
    }

    /// Which checkpoint a failed run leaves behind.
    pub fn checkpoint_note(&self) -> String {
        match (&self.last_saved, &self.config.save_path) {
            (Some((path, step)), _) => {
                format!("the last checkpoint, {path} (step {step}), is intact")
            }
            (None, Some(path)) => format!(
                "no checkpoint was written to {} (--save-every N keeps periodic ones)",
                path.display()
            ),
            (None, None) => "no checkpoint was asked for (--save FILE --save-every N)".into(),
        }
    }

    #[cfg(not(target_arch = "wasm32"))]
    fn run_inner(
        &mut self,
        ctx: &GpuContext,
        split: &Split,
        on_event: &mut dyn FnMut(&Event),
    ) -> Result<RunSummary> {
        let start_step = self.progress.step;
        let start = Instant::now();
        let mut epoch_start = Instant::now();
        let mut epoch_images = 0usize;
        let mut history: Vec<StepStats> = Vec::new();
        let mut last_eval: Option<Evaluation> = None;
        let mut batch = Batch::empty(&split.train.y);
        let mut images = 0usize;
        ctx.allocator.reset_peak();
        while !self.done() {
            let batches = self.loader.batches(self.progress.epoch);
            let mut b = self.progress.batch_in_epoch as usize;
            while b < batches.len() && !self.done() {
                split.train.gather_into(&batches[b], &mut batch)?;
                let targets = match &batch.y {
                    BatchLabels::Classes(l) => BatchTargets::Classes(l),
                    BatchLabels::Targets(t) => BatchTargets::Values(t),
                };
                let completes =
                    self.trainer.pending_micro_batches() + 1 == self.config.step.grad_accum;
                self.trainer
                    .train_batch(ctx, batch.size, &batch.x, targets)?;
                ctx.check()?;
                images += batch.size;
                epoch_images += batch.size;
                b += 1;
                self.progress.batch_in_epoch = b as u64;
                if completes {
                    self.progress.step += 1;
                    self.stepped_at = self.progress;
                    self.epochs_in_flight.push_back(self.progress.epoch);
                }
                self.report(ctx, &mut history, on_event)?;
                if completes
                    && let (Some(every), Some(path)) =
                        (self.config.save_every, self.config.save_path.clone())
                    && self.progress.step.is_multiple_of(every)
                {
                    // Report (and check for divergence) every step up to here first, so a
                    // periodic checkpoint never holds the parameters of a diverged run.
                    self.drain(ctx, &mut history, on_event)?;
                    self.save(ctx, &path)?;
                    on_event(&Event::Saved {
                        path: path.display().to_string(),
                        step: self.progress.step,
                    });
                }
            }
            if b >= batches.len() {
                // Epoch finished: drain, validate, move on.
                self.drain(ctx, &mut history, on_event)?;
                let eval = match (self.config.validate, split.eval_set()) {
                    (true, Some(set)) => Some(self.evaluate(ctx, set)?),
                    _ => None,
                };
                let secs = epoch_start.elapsed().as_secs_f64();
                on_event(&Event::Epoch(EpochReport {
                    epoch: self.progress.epoch,
                    val_loss: eval.map(|e| e.loss),
                    val_accuracy: eval.and_then(|e| e.accuracy),
                    images_per_sec: epoch_images as f64 / secs.max(1e-9),
                    peak_gpu_bytes: ctx.memory().peak_bytes,
                    steps: self.progress.step,
                }));
                last_eval = eval.or(last_eval);
                self.progress.epoch += 1;
                self.progress.batch_in_epoch = 0;
                epoch_start = Instant::now();
                epoch_images = 0;
            }
        }
        self.drain(ctx, &mut history, on_event)?;
        let elapsed = start.elapsed().as_secs_f64();
        if last_eval.is_none()
            && self.config.validate
            && let Some(set) = split.eval_set()
        {
            last_eval = Some(self.evaluate(ctx, set)?);
        }
        if let Some(path) = self.config.save_path.clone() {
            self.save(ctx, &path)?;
            on_event(&Event::Saved {
                path: path.display().to_string(),
                step: self.progress.step,
            });
        }
        let steps = self.progress.step - start_step;
        Ok(RunSummary {
            precision: self.config.step.precision.name().into(),
            adapter: ctx.report.name.clone(),
            backend: ctx.report.backend.clone(),
            f16_storage: format!("{:?}", ctx.f16_storage).to_lowercase(),
            steps: self.progress.step,
            epochs: self.progress.epoch,
            first_loss: history.first().map(|s| s.loss),
            final_loss: history.last().map(|s| s.loss),
            val_loss: last_eval.map(|e| e.loss),
            val_accuracy: last_eval.and_then(|e| e.accuracy),
            ms_per_step: 1000.0 * elapsed / steps.max(1) as f64,
            images_per_sec: images as f64 / elapsed.max(1e-9),
            peak_gpu_bytes: ctx.memory().peak_bytes,
            skipped_steps: history.iter().filter(|s| s.skipped).count() as u64,
            final_scale: self.trainer.scaler.get_scale(ctx)?,
            history,
        })
    }

    fn report(
        &mut self,
        ctx: &GpuContext,
        history: &mut Vec<StepStats>,
        on_event: &mut dyn FnMut(&Event),
    ) -> Result<()> {
        let mut stats = std::mem::take(&mut self.undelivered);
        stats.extend(self.trainer.poll_stats(ctx));
        for stats in stats {
            self.emit(stats, history, on_event)?;
        }
        Ok(())
    }

    #[cfg(not(target_arch = "wasm32"))]
    fn drain(
        &mut self,
        ctx: &GpuContext,
        history: &mut Vec<StepStats>,
        on_event: &mut dyn FnMut(&Event),
    ) -> Result<()> {
        let mut stats = std::mem::take(&mut self.undelivered);
        stats.extend(self.trainer.finish(ctx)?);
        for stats in stats {
            self.emit(stats, history, on_event)?;
        }
        Ok(())
    }

    fn emit(
        &mut self,
        stats: StepStats,
        history: &mut Vec<StepStats>,
        on_event: &mut dyn FnMut(&Event),
    ) -> Result<()> {
        let epoch = self
            .epochs_in_flight
            .pop_front()
            .unwrap_or(self.progress.epoch);
        let stats = StepStats {
            step: stats.step + self.progress_offset(),
            ..stats
        };
        // f32 mode has no scaler to absorb a non-finite loss: stop rather than train on NaN.
        if !stats.loss.is_finite() && !self.trainer.scaler.enabled() {
            return Err(Error::Diverged(format!(
                "loss became {} at step {} under {} (no GradScaler to skip the step); lower --lr or use --clip-grad-norm",
                stats.loss, stats.step, self.config.step.precision
            )));
        }
        history.push(stats);
        on_event(&Event::Step {
            stats,
            epoch,
            lr: self.trainer.optimizer.lr(),
        });
        Ok(())
    }

    /// Validation loss and accuracy over a data set, batch by batch.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn evaluate(&mut self, ctx: &GpuContext, set: &Dataset) -> Result<Evaluation> {
        let loader = Loader::new(set.n, self.config.batch_size, false, 0)?;
        let batches: Vec<Batch> = loader
            .batches(0)
            .iter()
            .map(|idx| set.gather(idx))
            .collect::<Result<_>>()?;
        self.trainer.evaluate(
            ctx,
            batches.iter().map(|b| {
                (
                    b.size,
                    b.x.clone(),
                    match &b.y {
                        BatchLabels::Classes(l) => BatchTargets::Classes(l),
                        BatchLabels::Targets(t) => BatchTargets::Values(t),
                    },
                )
            }),
        )
    }

    /// Everything needed to resume, read back from the GPU (outside the step loop).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn checkpoint(&mut self, ctx: &GpuContext) -> Result<Checkpoint> {
        let finished = self.trainer.finish(ctx)?;
        self.undelivered.extend(finished);
        let params = self
            .trainer
            .store
            .download(ctx)?
            .into_iter()
            .zip(&self.trainer.store.layout.entries)
            .map(|((name, values), e)| NamedTensor {
                name,
                shape: e.shape.clone(),
                values,
            })
            .collect();
        let state = self.trainer.optimizer.state(ctx)?;
        let optimizer = NamedOptimizerState::from_flat(
            *self.trainer.optimizer.config(),
            &state,
            &param_slices(&self.trainer),
        );
        let scaler = self.trainer.scaler.state_dict(ctx)?;
        Ok(Checkpoint {
            params,
            optimizer: Some(optimizer),
            scaler: Some(scaler),
            progress: self.resume_point(),
            precision: Some(self.config.step.precision.name().into()),
        })
    }

    /// Where a resumed run starts: after the last completed optimizer step (the end of an
    /// epoch counts as the start of the next).
    fn resume_point(&self) -> Progress {
        let mut p = self.stepped_at;
        if p.batch_in_epoch as usize >= self.loader.num_batches() {
            p.epoch += 1;
            p.batch_in_epoch = 0;
        }
        p
    }

    #[cfg(not(target_arch = "wasm32"))]
    /// Write a checkpoint atomically. Refuses parameters with inf/NaN (a diverged run), so
    /// the file at `path` keeps its last good content.
    pub fn save(&mut self, ctx: &GpuContext, path: &std::path::Path) -> Result<()> {
        let checkpoint = self.checkpoint(ctx)?;
        if let Some(bad) = checkpoint
            .params
            .iter()
            .find(|t| t.values.iter().any(|v| !v.is_finite()))
        {
            return Err(Error::Diverged(format!(
                "parameter `{}` holds inf/NaN at step {} under {}; not saving it over {}",
                bad.name,
                self.progress.step,
                self.config.step.precision,
                path.display()
            )));
        }
        checkpoint.save(path)?;
        self.last_saved = Some((path.display().to_string(), self.progress.step));
        Ok(())
    }
}

/// `(name, offset, len)` of every parameter in the flat buffers.
fn param_slices(trainer: &Trainer) -> Vec<(String, usize, usize)> {
    trainer
        .store
        .layout
        .entries
        .iter()
        .map(|e| (e.name.clone(), e.offset, e.numel()))
        .collect()
}
