//! The app's controller, with no UI in it: it owns the [`GpuContext`] and one
//! [`train::Run`](Run) per selected precision mode, and advances training *inside frames*.
//!
//! Every frame ([`Session::tick`]) calls [`Run::advance`] once per mode with a budget of a
//! few steps (none while paused): the same training loop the CLI drives, which submits only
//! what it can without waiting and hands back the step stats that have come back.
//! Validation accuracy, the gradient histogram and the kernel profile ([`super::probes`])
//! are GPU work read back through [`crate::gpu::ReadbackRing`]s, like the step stats; a
//! frame only polls the device (`PollType::Poll` on native, the browser's own event loop on
//! the web) and picks up what has landed. Nothing here blocks on the GPU, so the same code
//! runs in the browser.
//!
//! All modes start from the same initial weights (`spec.init_params(seed)`, or a picked
//! Hugging Face folder's tensors) and see the same batches in the same order (each run's
//! loader is seeded alike).

use std::sync::Arc;

pub use super::config::{DATASETS, OptimizerKind, SessionConfig, Status};
use super::folder::{PickedFolder, is_folder_model};
pub use super::mode_run::ModeRun;
use super::model::{ModelCache, Resolved};
use super::numerics_history::NumericsHistory;
use super::probes::eval::{EvalProbe, EvalSet};
use super::probes::histogram::HistogramProbe;
pub use super::probes::histogram::HistogramSnapshot;
pub use super::probes::profile::KernelTime;
use super::probes::profile::Profiler;
use super::probes::sample::{SampleProbe, SampleText};
use crate::amp::policy::{Policy, Precision, PrecisionRow};
use crate::data::{Split, Tokenizer};
use crate::error::Result;
use crate::gpu::GpuContext;
use crate::nn::{self, LossKind, ModelSpec};
use crate::ops::histogram::HistogramRange;
use crate::train::fault_hooks::FaultHooks;
use crate::train::{Event, Run, Trainer};

/// What every mode of a started session trains on: the data, the model, its initial
/// weights and loss, and the held-out batches the eval probe uses.
struct SessionInputs {
    split: Arc<Split>,
    spec: ModelSpec,
    init: Vec<(String, Vec<f32>)>,
    loss: LossKind,
    eval: Option<EvalSet>,
    /// A picked folder's tokenizer (the samples decode through it).
    tokenizer: Option<Arc<Tokenizer>>,
}

/// The app's controller. See the module docs.
pub struct Session {
    pub(super) ctx: Arc<GpuContext>,
    /// The configuration of the current run (the setup panel edits its own copy).
    pub config: SessionConfig,
    status: Status,
    pub(super) runs: Vec<ModeRun>,
    inputs: Option<SessionInputs>,
    /// The model and data set last resolved, so the precision map and restarts don't reload.
    models: ModelCache,
    histogram: Option<HistogramProbe>,
    histogram_latest: Option<HistogramSnapshot>,
    histogram_range: HistogramRange,
    /// Wall-clock seconds spent running (not paused), for steps per second.
    running_secs: f64,
    last_time: Option<f64>,
    /// Faults to cause in every run (the page's `lose_device_at` test hook); unset, each
    /// run keeps its own (from the environment on native).
    pub fault_hooks: Option<FaultHooks>,
}

impl Session {
    pub fn new(ctx: Arc<GpuContext>) -> Self {
        Self {
            ctx,
            config: SessionConfig::default(),
            status: Status::Idle,
            runs: Vec::new(),
            inputs: None,
            models: ModelCache::default(),
            histogram: None,
            histogram_latest: None,
            histogram_range: HistogramRange::default(),
            running_secs: 0.0,
            last_time: None,
            fault_hooks: None,
        }
    }

    pub fn ctx(&self) -> &GpuContext {
        &self.ctx
    }

    pub fn status(&self) -> &Status {
        &self.status
    }

    pub fn runs(&self) -> &[ModeRun] {
        &self.runs
    }

    /// Whether the adapter can time kernels (timestamp queries).
    pub fn has_timestamps(&self) -> bool {
        self.ctx
            .device
            .features()
            .contains(wgpu::Features::TIMESTAMP_QUERY)
    }

    pub fn histogram(&self) -> Option<&HistogramSnapshot> {
        self.histogram_latest.as_ref()
    }

    pub fn histogram_range(&self) -> HistogramRange {
        self.histogram_range
    }

    /// Wall-clock seconds spent running (not paused or preparing).
    /// Some run's text sample is on its way back.
    pub fn sampling(&self) -> bool {
        self.runs.iter().any(ModeRun::sampling)
    }

    pub fn running_secs(&self) -> f64 {
        self.running_secs
    }

    /// Optimizer steps finished per wall-clock second while running, all modes together.
    pub fn steps_per_sec(&self) -> Option<f64> {
        let steps: usize = self.runs.iter().map(|r| r.history.len()).sum();
        (self.running_secs > 0.5 && steps > 0).then(|| steps as f64 / self.running_secs)
    }

    /// Start training `config` (from Idle, Stopped, Finished or Failed: a fresh run).
    pub fn start(&mut self, config: SessionConfig) {
        if matches!(self.status, Status::Preparing { .. } | Status::Running) {
            return;
        }
        if self.status == Status::Paused {
            self.status = Status::Running;
            return;
        }
        self.reset();
        if let Err(e) = config.validate() {
            self.status = Status::Failed(e.to_string());
            return;
        }
        let total = config.modes.len();
        self.config = config;
        self.status = Status::Preparing { built: 0, total };
    }

    pub fn pause(&mut self) {
        if self.status == Status::Running {
            self.status = Status::Paused;
        }
    }

    pub fn resume(&mut self) {
        if self.status == Status::Paused {
            self.status = Status::Running;
        }
    }

    /// Stop submitting; what has been trained stays visible.
    pub fn stop(&mut self) {
        if matches!(
            self.status,
            Status::Running | Status::Paused | Status::Preparing { .. }
        ) {
            self.status = Status::Stopped;
        }
    }

    /// Drop every run and go back to Idle.
    pub fn reset(&mut self) {
        self.runs.clear();
        self.inputs = None;
        self.histogram = None;
        self.histogram_latest = None;
        self.running_secs = 0.0;
        self.last_time = None;
        self.status = Status::Idle;
        self.ctx.allocator.reset_peak();
    }

    /// Steps whose stats, evaluations, profiles or histograms are still on their way.
    pub fn in_flight(&self) -> bool {
        self.runs.iter().any(ModeRun::in_flight)
            || self
                .histogram
                .as_ref()
                .is_some_and(HistogramProbe::in_flight)
    }

    /// Advance one frame; `now` is the frame time in seconds. Returns whether another
    /// frame is wanted soon (training, or results still on their way).
    pub fn tick(&mut self, now: f64) -> bool {
        if let Some(last) = self.last_time
            && self.status == Status::Running
        {
            self.running_secs += (now - last).clamp(0.0, 1.0);
        }
        self.last_time = Some(now);
        if let Err(e) = self.tick_inner(now) {
            // A lost device or GPU error names the step it stopped at, as the CLI's does.
            let e = match self.runs.first() {
                Some(mode) => mode.run.explain_fault(&self.ctx, e),
                None => e,
            };
            self.status = Status::Failed(e.to_string());
        }
        matches!(self.status, Status::Running | Status::Preparing { .. }) || self.in_flight()
    }

    fn tick_inner(&mut self, now: f64) -> Result<()> {
        if let Status::Preparing { built, total } = self.status {
            self.prepare_one(built)?;
            self.status = if built + 1 == total {
                Status::Running
            } else {
                Status::Preparing {
                    built: built + 1,
                    total,
                }
            };
            return Ok(());
        }
        let Some(inputs) = &self.inputs else {
            return Ok(());
        };
        // A lost device or a GPU error ends the run with its reason, even when nothing is
        // submitted (a full stats ring waits for read-backs a lost device never returns).
        self.ctx.check()?;
        let running = self.status == Status::Running;
        let budget = if running {
            self.config.steps_per_frame
        } else {
            0
        };
        let ctx = &*self.ctx;
        let config = &self.config;
        for mode in &mut self.runs {
            let advance = mode.run.advance(ctx, &inputs.split.train, budget)?;
            for event in advance.events {
                if let Event::Step {
                    stats, numerics, ..
                } = event
                {
                    mode.history.push(stats);
                    if let Some(n) = &numerics {
                        mode.numerics.push(&stats, n);
                    }
                }
            }
            // The sample (a few forwards) before the validation (many): queued behind it,
            // the text would wait for every held-out batch.
            if let Some(sampler) = &mut mode.sampler {
                if let Some(sample) = sampler.take(now) {
                    mode.samples.push(sample?);
                }
                if running {
                    let due = (mode.run.progress.step, config.sample_every, config.steps);
                    sampler.maybe_submit(ctx, &mut mode.run.trainer, due, now)?;
                }
                sampler.steps_landed(mode.history.len() as u64, now);
            }
            if let (Some(probe), Some(set)) = (&mut mode.eval, &inputs.eval) {
                mode.val_accuracy.extend(probe.take(set));
                if running {
                    let submitted = mode.run.progress.step;
                    let trainer = &mut mode.run.trainer;
                    probe.maybe_submit(
                        ctx,
                        trainer,
                        set,
                        submitted,
                        config.eval_every,
                        config.steps,
                    )?;
                }
            }
            if let Some(profiler) = &mut mode.profiler {
                if let Some(p) = profiler.take(ctx) {
                    mode.kernel_times = p.kernels;
                    mode.gpu_ms.push((p.step, p.whole_ms));
                }
                if running {
                    let submitted = mode.run.progress.step;
                    let batch = mode.run.last_batch();
                    profiler.maybe_submit(ctx, batch, submitted, config.profile_every)?;
                }
            }
        }
        if let Some(h) = &mut self.histogram {
            let mode = &self.runs[h.mode];
            if let Some(snapshot) = h.take(mode.precision)? {
                self.histogram_latest = Some(snapshot);
            }
            h.maybe_submit(ctx, mode.submitted())?;
        }
        if running && self.runs.iter().all(ModeRun::finished) {
            self.status = Status::Finished;
        }
        Ok(())
    }

    /// The model `config` describes, for the data it names.
    pub fn model_spec(&mut self, config: &SessionConfig) -> Result<ModelSpec> {
        Ok(self.models.get(&config.model, &config.dataset)?.spec)
    }

    /// Fine-tune `folder` from now on: the models named `hf:...` are it.
    pub fn set_folder(&mut self, folder: PickedFolder) {
        self.models.set_folder(folder);
    }

    /// The Hugging Face folder picked, if one is.
    pub fn folder(&self) -> Option<&PickedFolder> {
        self.models.folder().map(|f| &**f)
    }

    /// Whether `config` can start: a picked folder's model waits for a folder.
    pub fn can_start(&self, config: &SessionConfig) -> bool {
        !is_folder_model(&config.model) || self.folder().is_some()
    }

    /// The precision map of `config`'s model under `precision`: one row per layer plus
    /// the loss ([`crate::nn::precision_map`]).
    pub fn precision_map(
        &mut self,
        config: &SessionConfig,
        precision: Precision,
    ) -> Result<Vec<PrecisionRow>> {
        let Resolved { spec, split, .. } = self.models.get(&config.model, &config.dataset)?;
        let loss = LossKind::default_for(&split.train.y);
        Ok(nn::precision_map(&spec, &Policy::new(precision), loss))
    }

    /// Build what mode `index` needs (data and model first). One mode per frame.
    fn prepare_one(&mut self, index: usize) -> Result<()> {
        if self.inputs.is_none() {
            let config = self.config.clone();
            let Resolved {
                spec,
                split,
                tokenizer,
            } = self.models.get(&config.model, &config.dataset)?;
            let loss = LossKind::default_for(&split.train.y);
            // The adapter's limits before the weights are made on the host (SmolLM2's 135 M),
            // or read from a picked folder.
            super::model::check_params_fit(&self.ctx, &config, &spec, loss)?;
            let eval = EvalSet::new(&split, loss, config.batch_size, config.eval_samples)?;
            let init = match self.models.folder_for(&config.model)? {
                Some(folder) => folder.weights(&spec)?,
                None => spec.init_params(config.seed),
            };
            self.inputs = Some(SessionInputs {
                init,
                split,
                spec,
                loss,
                eval,
                tokenizer,
            });
        }
        let inputs = self.inputs.as_ref().expect("prepared above");
        let config = &self.config;
        let precision = config.modes[index];
        let run_config = config.run_config(precision, inputs.loss);
        let scaler_enabled = run_config.step.scaler.enabled;
        let step = run_config.step.clone();
        let ctx = &*self.ctx;
        let train = &inputs.split.train;
        let batch = config.batch_size;
        let before = ctx.memory().live_bytes;
        let mut run = Run::new(
            ctx,
            inputs.spec.clone(),
            run_config,
            train,
            &inputs.init,
            None,
        )?;
        // The pure-f16 mode is there to show a run diverging: keep plotting it.
        run.stop_on_divergence = false;
        if let Some(hooks) = self.fault_hooks {
            run.hooks = hooks;
        }
        run.trainer.network(ctx, batch)?;
        let memory_bytes = ctx.memory().live_bytes.saturating_sub(before);
        let eval = inputs
            .eval
            .as_ref()
            .filter(|_| config.eval_every != SessionConfig::NEVER)
            .map(|set| EvalProbe::new(ctx, set, config.eval_every.min(config.steps)));
        let text = match (&inputs.tokenizer, train.vocab()) {
            (Some(tokenizer), _) => Some(SampleText::Tokens(tokenizer.clone())),
            (None, Some(vocab)) => Some(SampleText::Chars(vocab.clone())),
            (None, None) => None,
        };
        let sampler = text
            .filter(|_| {
                inputs.spec.tokens().is_some() && config.sample_every != SessionConfig::NEVER
            })
            .map(|text| {
                let first = config.sample_every.clamp(1, config.steps);
                SampleProbe::new(ctx, text, config.seed, first)
            });
        let profiler = if self.has_timestamps() && config.profile_every != SessionConfig::NEVER {
            // The first profile after a few steps (pipelines warm).
            let first = 5.min(config.steps);
            let spec = inputs.spec.clone();
            let twin = Trainer::new(ctx, spec, step, train.output_dim(), &inputs.init)?;
            Some(Profiler::new(ctx, twin, batch, first)?)
        } else {
            None
        };
        self.runs.push(ModeRun {
            precision,
            scaler_enabled,
            batch_size: batch,
            run,
            history: Vec::new(),
            val_accuracy: Vec::new(),
            gpu_ms: Vec::new(),
            kernel_times: Vec::new(),
            memory_bytes,
            samples: Vec::new(),
            numerics: NumericsHistory::default(),
            eval,
            profiler,
            sampler,
        });
        Ok(())
    }

    /// Choose the mode (index into [`Session::runs`]) and parameter the histogram shows.
    pub fn select_histogram(&mut self, mode: usize, param: &str) -> Result<()> {
        if let Some(h) = &self.histogram
            && h.mode == mode
            && h.param == param
        {
            return Ok(());
        }
        // A read in flight keeps its buffers alive through the callback; drop it.
        self.histogram = None;
        self.histogram_latest = None;
        let Some(run) = self.runs.get(mode) else {
            return Ok(());
        };
        let range = self.histogram_range;
        let probe = HistogramProbe::new(&self.ctx, mode, param, run.trainer(), range)?;
        self.histogram = Some(probe);
        Ok(())
    }
}
