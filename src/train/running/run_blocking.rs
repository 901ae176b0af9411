//! The blocking side of a [`Run`] (native only): [`Run::run`], the CLI's loop around
//! [`Run::advance`] with validation at epoch ends, periodic and final checkpoints and a
//! summary; and everything that reads state back (drains, validation, checkpoints).
//!
//! Where it waits for the GPU, each wait counted in [`GpuContext::host_waits`]: when
//! `advance` is throttled (for the oldest step in flight only), and outside the step loop:
//! the drain before each epoch's validation, before each checkpoint and at the end, the
//! validation and checkpoint reads themselves, and the final read of the scale.

use std::time::Instant;

use crate::data::{Dataset, Loader, Split};
use crate::error::{Error, Result};
use crate::gpu::GpuContext;
use crate::train::checkpoint::{
    Checkpoint, NamedBuffer, NamedOptimizerState, NamedTensor, add_tied_aliases,
};
use crate::train::estimate::{Draw, estimate_loss};
use crate::train::evaluate::{Evaluation, evaluate_indices};
use crate::train::periodic::Periodic;
use crate::train::run::{EpochReport, Event, Run, trainable_slices};
use crate::train::stats::StepStats;

/// The end-of-run summary.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RunSummary {
    pub precision: String,
    pub adapter: String,
    /// The adapter's backend (`vulkan`, `gl`, `metal`, ...).
    pub backend: String,
    pub f16_storage: String,
    /// The tensor cores the run's low-precision products ran on
    /// ([`crate::gpu::TensorCoreConfig::describe`]); absent where they ran on SIMT bodies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tensor_cores: Option<String>,
    pub steps: u64,
    pub epochs: u64,
    pub first_loss: Option<f32>,
    pub final_loss: Option<f32>,
    pub val_loss: Option<f32>,
    pub val_accuracy: Option<f32>,
    pub ms_per_step: f64,
    pub images_per_sec: f64,
    /// Tokens (predicted positions) per second of token data (a GPT): samples per second
    /// times the block size. `None` for other data.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_per_sec: Option<f64>,
    pub peak_gpu_bytes: u64,
    pub skipped_steps: u64,
    pub final_scale: f32,
    /// Blocking waits of the host on the GPU during the run: the throttle waits plus the
    /// drains, validation and checkpoint reads outside the step loop and the final read of
    /// the scale.
    pub host_waits: u64,
    /// Of those, the waits because the GPU was a whole stats ring of steps behind (each for
    /// the oldest step in flight only).
    pub throttle_waits: u64,
    /// Every step's stats in order (for curves and comparisons).
    #[serde(skip)]
    pub history: Vec<StepStats>,
    /// The ranks of a data-parallel run (`None` in a single process). There, `images_per_sec`
    /// counts the samples of every rank.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub distributed: Option<crate::train::distributed::DistributedSummary>,
    /// The run stopped early because it was asked to ([`crate::train::RunConfig::interrupt`]):
    /// `steps` is where it stopped.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
    /// The checkpoint written at the end (`save_path`, or an interrupted run's `save_to`).
    #[serde(skip)]
    pub saved: Option<std::path::PathBuf>,
}

impl Run {
    /// Train until the configured limit, reporting through `on_event`. A lost device or a
    /// GPU error ends the run with an error that says where it stopped and which checkpoint
    /// survives ([`Run::explain_fault`]).
    pub fn run(
        &mut self,
        ctx: &GpuContext,
        split: &Split,
        on_event: &mut dyn FnMut(&Event),
    ) -> Result<RunSummary> {
        self.run_inner(ctx, split, on_event)
            .map_err(|e| self.explain_fault(ctx, e))
    }

    /// The tensor cores this run's low-precision products use, if any.
    fn tensor_cores(&self, ctx: &GpuContext) -> Option<String> {
        let low = ctx.storage_for(self.config.step.precision.low_dtype());
        crate::ops::matmul::uses_tensor_cores(&ctx.caps, &[low])
            .then(|| ctx.caps.tensor_cores.config().map(|c| c.describe()))
            .flatten()
    }

    /// Micro-batches to submit before the next periodic work in `due` is (unbounded without
    /// any), at most a ring's worth so events keep flowing.
    fn budget(&self, due: &[Periodic]) -> usize {
        let accum = self.config.step.grad_accum;
        let pending = self.trainer.pending_micro_batches();
        let until_due = due
            .iter()
            .map(|p| {
                let steps = p.steps_until_due(self.progress.step) as usize;
                steps.saturating_mul(accum).saturating_sub(pending)
            })
            .min()
            .unwrap_or(usize::MAX);
        until_due.min(self.trainer.stats_ring_slots())
    }

    /// Whether the last `advance` ended on an optimizer step where `periodic` is due (and
    /// then the next is due `every` steps later).
    fn due(&self, stepped: bool, periodic: &mut Option<Periodic>, every: Option<u64>) -> bool {
        let step = self.progress.step;
        let due = stepped
            && self.trainer.pending_micro_batches() == 0
            && periodic.is_some_and(|p| p.is_due(step));
        if due && let (Some(p), Some(every)) = (periodic.as_mut(), every) {
            p.taken(step, every, None);
        }
        due
    }

    /// The random batches of `batch_size` samples an estimate after the current step draws.
    fn estimate_draw(&self, batch_size: usize) -> Draw {
        Draw {
            batch_size,
            batches: self.config.eval.batches,
            seed: self.progress.seed,
            step: self.progress.step,
        }
    }

    fn run_inner(
        &mut self,
        ctx: &GpuContext,
        split: &Split,
        on_event: &mut dyn FnMut(&Event),
    ) -> Result<RunSummary> {
        let start_step = self.progress.step;
        let waits_before = ctx.host_waits();
        let throttles_before = self.trainer.throttle_waits();
        let start = Instant::now();
        let mut epoch_start = Instant::now();
        let mut epoch_images = 0usize;
        let mut history: Vec<StepStats> = Vec::new();
        let mut last_eval: Option<Evaluation> = None;
        let mut images = 0usize;
        let mut emit = |events: Vec<Event>, history: &mut Vec<StepStats>| {
            for event in events {
                if let Event::Step { stats, .. } = &event {
                    history.push(*stats);
                }
                on_event(&event);
            }
        };
        // Loss estimates and periodic checkpoints, every N steps of the run's count.
        let eval_every = self.config.eval.every;
        let save_every = self
            .config
            .save_every
            .filter(|_| self.config.save_path.is_some());
        let mut estimates = eval_every.map(|every| Periodic::every(every, start_step));
        let mut saves = save_every.map(|every| Periodic::every(every, start_step));
        ctx.allocator.reset_peak();
        let mut interrupted = false;
        while !self.done() {
            let due: Vec<Periodic> = estimates.iter().chain(&saves).copied().collect();
            let advance = self.advance(ctx, &split.train, self.budget(&due))?;
            images += advance.samples;
            epoch_images += advance.samples;
            emit(advance.events, &mut history);
            if advance.throttled {
                self.trainer.wait_for_slot(ctx)?;
            }
            let stepped = advance.steps > 0;
            if self.due(stepped, &mut estimates, eval_every) {
                // nanoGPT's estimate_loss, after every step reported so far.
                emit(self.drain(ctx)?, &mut history);
                self.check_diverged()?;
                // Batches of the size training takes (at most the training set).
                let draw = self.estimate_draw(self.config.batch_size.min(split.train.n));
                match unless_interrupted(estimate_loss(ctx, &mut self.trainer, split, draw))? {
                    Some(report) => emit(vec![Event::Eval(report)], &mut history),
                    None => {
                        interrupted = true;
                        break;
                    }
                }
            }
            if self.due(stepped, &mut saves, save_every)
                && let Some(path) = self.config.save_path.clone()
            {
                // Report (and check for divergence) every step up to here first, so a
                // periodic checkpoint never holds the parameters of a diverged run.
                emit(self.drain(ctx)?, &mut history);
                self.check_diverged()?;
                self.save(ctx, &path)?;
                emit(
                    vec![Event::Saved {
                        path: path.display().to_string(),
                        step: self.progress.step,
                    }],
                    &mut history,
                );
            }
            if let Some(epoch) = advance.epoch_ended {
                emit(self.drain(ctx)?, &mut history);
                self.check_diverged()?;
                let eval = match (self.config.validate, split.eval_set()) {
                    (true, Some(set)) => match unless_interrupted(self.evaluate(ctx, set))? {
                        Some(eval) => Some(eval),
                        None => {
                            interrupted = true;
                            break;
                        }
                    },
                    _ => None,
                };
                let secs = epoch_start.elapsed().as_secs_f64();
                let report = EpochReport {
                    epoch,
                    val_loss: eval.map(|e| e.loss),
                    val_accuracy: eval.and_then(|e| e.accuracy),
                    images_per_sec: (epoch_images * self.trainer.ranks()) as f64 / secs.max(1e-9),
                    peak_gpu_bytes: ctx.memory().peak_bytes,
                    steps: self.progress.step,
                };
                emit(vec![Event::Epoch(report)], &mut history);
                last_eval = eval.or(last_eval);
                epoch_start = Instant::now();
                epoch_images = 0;
            }
            if advance.interrupted {
                interrupted = true;
                break;
            }
        }
        emit(self.drain(ctx)?, &mut history);
        self.check_diverged()?;
        let elapsed = start.elapsed().as_secs_f64();
        // An interrupted run stops without the final validation: it is asked to stop soon.
        if !interrupted
            && last_eval.is_none()
            && self.config.validate
            && let Some(set) = split.eval_set()
        {
            match unless_interrupted(self.evaluate(ctx, set))? {
                Some(eval) => last_eval = Some(eval),
                None => interrupted = true,
            }
        }
        let save_to = match (&self.config.save_path, &self.config.interrupt) {
            (Some(path), _) => Some(path.clone()),
            (None, Some(i)) if interrupted => i.save_to.clone(),
            _ => None,
        };
        if let Some(path) = &save_to {
            self.save(ctx, path)?;
            emit(
                vec![Event::Saved {
                    path: path.display().to_string(),
                    step: self.progress.step,
                }],
                &mut history,
            );
        }
        let steps = self.progress.step - start_step;
        let final_scale = self.trainer.scaler.get_scale(ctx)?;
        // Data-parallel: every rank must end with the same state; samples of every rank.
        self.check_replicas(ctx)?;
        let distributed = self.distributed_summary()?;
        let images = images * self.trainer.ranks();
        Ok(RunSummary {
            precision: self.config.step.precision.name().into(),
            adapter: ctx.report.name.clone(),
            backend: ctx.report.backend.clone(),
            f16_storage: format!("{:?}", ctx.f16_storage).to_lowercase(),
            tensor_cores: self.tensor_cores(ctx),
            steps: self.progress.step,
            epochs: self.progress.epoch,
            first_loss: history.first().map(|s| s.loss),
            final_loss: history.last().map(|s| s.loss),
            val_loss: last_eval.map(|e| e.loss),
            val_accuracy: last_eval.and_then(|e| e.accuracy),
            ms_per_step: 1000.0 * elapsed / steps.max(1) as f64,
            images_per_sec: images as f64 / elapsed.max(1e-9),
            tokens_per_sec: split
                .train
                .x
                .tokens()
                .map(|t| (images * t.block_size()) as f64 / elapsed.max(1e-9)),
            peak_gpu_bytes: ctx.memory().peak_bytes,
            skipped_steps: history.iter().filter(|s| s.skipped).count() as u64,
            final_scale,
            host_waits: ctx.host_waits() - waits_before,
            throttle_waits: self.trainer.throttle_waits() - throttles_before,
            history,
            distributed,
            interrupted,
            saved: save_to,
        })
    }

    /// Wait for every submitted step (one host wait) and return its events, up to and with
    /// a step that diverged: the caller emits them, then ends on [`Self::check_diverged`]
    /// (the failing step's loss and numerics are reported before the error).
    fn drain(&mut self, ctx: &GpuContext) -> Result<Vec<Event>> {
        let stats = self.trainer.finish(ctx)?;
        let mut events = Vec::new();
        self.deliver(stats, &mut events);
        Ok(events)
    }

    /// Validation loss and accuracy over a held-out set, forward only, one batch gathered
    /// at a time: every sample in order, or for token data ([`Dataset::is_tokens`]) the
    /// random batches of an estimate at this step ([`RunConfig::eval`]'s `batches`; a text's
    /// whole validation split is too big to go through at every epoch end).
    ///
    /// [`RunConfig::eval`]: crate::train::RunConfig::eval
    pub fn evaluate(&mut self, ctx: &GpuContext, set: &Dataset) -> Result<Evaluation> {
        if self.rank.collective().is_some() {
            return self.evaluate_sharded(ctx, set);
        }
        let b = self.config.batch_size;
        if set.is_tokens() {
            // Random batches of the size training takes, drawn one at a time.
            let draw = self.estimate_draw(b.min(self.samples_per_epoch().max(1)));
            let batches = draw.validation_batches(set);
            return evaluate_indices(ctx, &mut self.trainer, set, batches);
        }
        let batches = Loader::new(set.n, b, false, 0)?.batches(0);
        evaluate_indices(ctx, &mut self.trainer, set, &batches)
    }

    /// Everything needed to resume, read back from the GPU (outside the step loop).
    pub fn checkpoint(&mut self, ctx: &GpuContext) -> Result<Checkpoint> {
        let finished = self.trainer.finish(ctx)?;
        self.undelivered.extend(finished);
        let mut params: Vec<NamedTensor> = self
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
        // A tied weight under both names, as PyTorch's state_dict has it.
        add_tied_aliases(&mut params, &self.trainer.spec.tied_parameters())?;
        // Under the names of the model family's convention (nanoGPT's for a GPT).
        let spec = &self.trainer.spec;
        for t in &mut params {
            t.name = spec.export_name(&t.name)?;
        }
        let state = self.trainer.optimizer.state(ctx)?;
        let optimizer = NamedOptimizerState::from_flat(
            *self.trainer.optimizer.config(),
            &state,
            &trainable_slices(&self.trainer),
        );
        let scaler = self.trainer.scaler.state_dict(ctx)?;
        // Buffers in their own dtype, in the model's order; not the non-persistent ones
        // (RoPE's table), which the model remakes from its config as PyTorch's state_dict
        // leaves them out.
        let entries = self.trainer.store.buffers.entries.iter();
        let buffers = (self.trainer.store.buffers.download(ctx)?.into_iter())
            .zip(entries)
            .filter(|(_, e)| e.persistent)
            .map(|((name, values), e)| {
                let name = self.trainer.spec.export_name(&name)?;
                Ok(NamedBuffer::new(name, e.shape.clone(), values))
            })
            .collect::<Result<_>>()?;
        Ok(Checkpoint {
            params,
            buffers,
            optimizer: Some(optimizer),
            scaler: Some(scaler),
            progress: self.resume_point(),
            precision: Some(self.config.step.precision.name().into()),
            vocab: self.vocab.clone(),
            model: self.trainer.spec.description(),
            data: Some(self.data_order().clone()),
        })
    }

    /// Write a checkpoint atomically. Refuses parameters with inf/NaN (a diverged run), so
    /// the file at `path` keeps its last good content. In a data-parallel job only rank 0
    /// writes.
    pub fn save(&mut self, ctx: &GpuContext, path: &std::path::Path) -> Result<()> {
        // In a data-parallel job rank 0 writes; every rank holds the same state (and a rank
        // that fails names rank 0's checkpoint: rank 0 ends the job if its save fails).
        if !self.is_writer() {
            self.last_saved = Some((path.display().to_string(), self.progress.step));
            return Ok(());
        }
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
        checkpoint
            .save(path)
            .map_err(|e| match (e, &self.last_saved) {
                // Which step a resume would start from.
                (Error::Checkpoint(m), Some((last, step))) => {
                    Error::Checkpoint(format!("{m}; {last} still holds step {step}"))
                }
                (e, _) => e,
            })?;
        self.last_saved = Some((path.display().to_string(), self.progress.step));
        if let Some(c) = self.collective() {
            c.set_failure_note(self.checkpoint_note());
        }
        Ok(())
    }
}

/// An estimate or a validation that a signal cut short ([`Error::Interrupted`]): `None`,
/// and the run stops and saves as it does between steps.
fn unless_interrupted<T>(result: Result<T>) -> Result<Option<T>> {
    match result {
        Err(Error::Interrupted(_)) => Ok(None),
        other => other.map(Some),
    }
}
