//! The app's controller, with no UI in it: it owns the [`GpuContext`] and one [`Trainer`]
//! per selected precision mode, and advances training *inside frames*.
//!
//! Every frame ([`Session::tick`]) submits at most a few steps per running mode, and only
//! when the trainer can take one without waiting ([`Trainer::can_submit`]); step stats come
//! back through [`Trainer::poll_stats`] a few steps late. Validation accuracy, the gradient
//! histogram and the kernel profile are GPU work whose results are copied into staging
//! buffers and mapped asynchronously; a frame only polls the device (`PollType::Poll` on
//! native, the browser's own event loop on the web) and picks up what has landed. Nothing
//! here blocks on the GPU, so the same code runs in the browser.
//!
//! All modes start from the same initial weights (`spec.init_params(seed)`) and see the same
//! batches in the same order (one seeded [`Loader`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use crate::amp::policy::{Policy, Precision, PrecisionRow};
use crate::amp::scaler::ScalerConfig;
use crate::data::{Batch, BatchLabels, DataSource, Loader, Split};
use crate::error::{Error, Result};
use crate::gpu::{GpuBuffer, GpuContext, Kernel};
use crate::nn::{self as network, LossKind};
use crate::nn::{ModelSpec, preset};
use crate::ops::histogram::{self, GradHistograms, HistogramRange};
use crate::optim::OptimizerConfig;
use crate::train::{BatchTargets, StepConfig, StepStats, Trainer};

/// Model presets the setup panel offers.
pub const MODELS: [&str; 4] = ["mlp", "linear", "simple-cnn", "mnist-cnn"];
/// Data sets the setup panel offers (`mnist` and `fashion-mnist` need
/// `scripts/fetch-data.sh` first; the error says so).
#[cfg(not(target_arch = "wasm32"))]
pub const DATASETS: &[&str] = &["mnist-embedded", "fashion-mnist", "mnist", "synthetic:512"];
/// Data sets the page offers: those in the wasm itself (a page reads no local files).
#[cfg(target_arch = "wasm32")]
pub const DATASETS: &[&str] = &["mnist-embedded", "synthetic:512"];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OptimizerKind {
    Sgd,
    Adam,
    AdamW,
}

impl OptimizerKind {
    pub const ALL: [OptimizerKind; 3] = [Self::Sgd, Self::Adam, Self::AdamW];

    pub fn name(self) -> &'static str {
        match self {
            Self::Sgd => "SGD",
            Self::Adam => "Adam",
            Self::AdamW => "AdamW",
        }
    }

    pub fn config(self, lr: f32) -> OptimizerConfig {
        match self {
            Self::Sgd => OptimizerConfig::sgd(lr),
            Self::Adam => OptimizerConfig::adam(lr),
            Self::AdamW => OptimizerConfig::adamw(lr),
        }
    }
}

/// What a session trains: the setup panel edits one of these, Start hands it over.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionConfig {
    /// A preset name ([`MODELS`]).
    pub model: String,
    /// A data set name ([`DATASETS`], or anything [`DataSource`] parses).
    pub dataset: String,
    pub batch_size: usize,
    pub optimizer: OptimizerKind,
    pub lr: f32,
    /// Optimizer steps per mode.
    pub steps: u64,
    pub seed: u64,
    /// Modes to train side by side, in display order.
    pub modes: Vec<Precision>,
    /// GradScaler settings; `enabled` is per mode (on for amp-f16, as PyTorch recommends)
    /// unless `scaler_everywhere` turns it on for every low-precision mode.
    pub scaler: ScalerConfig,
    pub scaler_everywhere: bool,
    /// Most steps one mode submits per frame.
    pub steps_per_frame: usize,
    /// Validate every this many steps (and at the end), on `eval_samples` held-out samples.
    pub eval_every: u64,
    pub eval_samples: usize,
    /// Profile every kernel of a step (GPU timestamps) every this many steps.
    pub profile_every: u64,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            model: "mlp".into(),
            dataset: "mnist-embedded".into(),
            batch_size: 64,
            optimizer: OptimizerKind::Adam,
            lr: 1e-3,
            steps: 300,
            seed: 0,
            modes: vec![Precision::F32, Precision::AmpF16],
            scaler: ScalerConfig::default(),
            scaler_everywhere: false,
            steps_per_frame: 2,
            eval_every: 50,
            eval_samples: 512,
            profile_every: 50,
        }
    }
}

impl SessionConfig {
    /// Whether `precision` trains with the GradScaler under this config.
    pub fn scaler_for(&self, precision: Precision) -> bool {
        precision.scaler_enabled_by_default()
            || (self.scaler_everywhere && precision != Precision::F32)
    }

    fn validate(&self) -> Result<()> {
        if self.modes.is_empty() {
            return Err(Error::InvalidArgument(
                "select at least one precision mode".into(),
            ));
        }
        if self.batch_size == 0 || self.steps == 0 || self.steps_per_frame == 0 {
            return Err(Error::InvalidArgument(
                "batch size, steps and steps per frame must be at least 1".into(),
            ));
        }
        self.optimizer.config(self.lr).validate()?;
        ScalerConfig {
            enabled: true,
            ..self.scaler
        }
        .validate()
    }
}

/// Where the session is.
#[derive(Clone, Debug, PartialEq)]
pub enum Status {
    Idle,
    /// Building one mode per frame (pipelines compile here).
    Preparing {
        built: usize,
        total: usize,
    },
    Running,
    Paused,
    /// Stopped by the user; results stay on screen until Reset.
    Stopped,
    Finished,
    Failed(String),
}

impl Status {
    pub fn label(&self) -> String {
        match self {
            Status::Idle => "idle".into(),
            Status::Preparing { built, total } => format!("preparing ({built}/{total} modes)"),
            Status::Running => "running".into(),
            Status::Paused => "paused".into(),
            Status::Stopped => "stopped".into(),
            Status::Finished => "finished".into(),
            Status::Failed(e) => format!("failed: {e}"),
        }
    }
}

const FREE: u8 = 0;
const PENDING: u8 = 1;
const READY: u8 = 2;

/// A staging buffer read back asynchronously: copy into it, [`AsyncRead::map`], and
/// [`AsyncRead::take`] the bytes in a later frame once the map callback has fired.
struct AsyncRead {
    staging: Arc<GpuBuffer>,
    state: Arc<AtomicU8>,
    tag: u64,
}

impl AsyncRead {
    fn new(ctx: &GpuContext, label: &str, bytes: u64) -> Self {
        Self {
            staging: ctx.alloc(
                label,
                bytes,
                wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            ),
            state: Arc::new(AtomicU8::new(FREE)),
            tag: 0,
        }
    }

    fn is_free(&self) -> bool {
        self.state.load(Ordering::Acquire) == FREE
    }

    fn in_flight(&self) -> bool {
        !self.is_free()
    }

    /// Start mapping (after the submit that copies into the staging buffer).
    fn map(&mut self, tag: u64) {
        self.tag = tag;
        self.state.store(PENDING, Ordering::Release);
        let state = self.state.clone();
        self.staging
            .raw()
            .slice(..)
            .map_async(wgpu::MapMode::Read, move |r| {
                // A failed map (device lost) leaves it pending: nothing more will come.
                if r.is_ok() {
                    state.store(READY, Ordering::Release);
                }
            });
    }

    /// The bytes and tag, once mapped; frees the buffer for the next read.
    fn take(&mut self) -> Option<(u64, Vec<u8>)> {
        if self.state.load(Ordering::Acquire) != READY {
            return None;
        }
        let bytes = self
            .staging
            .raw()
            .slice(..)
            .get_mapped_range()
            .ok()
            .map(|v| v.to_vec());
        self.staging.raw().unmap();
        self.state.store(FREE, Ordering::Release);
        bytes.map(|b| (self.tag, b))
    }
}

fn words(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Validation of one mode without waiting: per batch, the loss and correct count land in a
/// slot of `counts`; then all slots are copied to the staging buffer and mapped.
struct EvalProbe {
    counts: Arc<GpuBuffer>,
    read: AsyncRead,
    next_step: u64,
}

/// Per-kernel GPU time of one mode's step, measured on a twin trainer (same model,
/// precision and batch; its weights do not matter) so the real run is untouched: every
/// kernel in its own compute pass with timestamp writes, resolved and mapped asynchronously.
struct Profiler {
    twin: Trainer,
    query_set: wgpu::QuerySet,
    resolve: Arc<GpuBuffer>,
    read: AsyncRead,
    labels: Vec<String>,
    next_step: u64,
}

/// One kernel's GPU time in the latest profile of a mode.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelTime {
    pub label: String,
    pub ms: f64,
}

/// One precision mode's run.
pub struct ModeRun {
    pub precision: Precision,
    pub scaler_enabled: bool,
    pub batch_size: usize,
    trainer: Trainer,
    /// Every finished step, in order (step `i + 1` at index `i`).
    pub history: Vec<StepStats>,
    /// (step, accuracy on the held-out samples).
    pub val_accuracy: Vec<(u64, f32)>,
    /// (step, GPU ms of one whole step) from the kernel profiles.
    pub gpu_ms: Vec<(u64, f64)>,
    /// Kernels of the latest profile, in step order.
    pub kernel_times: Vec<KernelTime>,
    /// Bytes this mode's planned step allocated: parameters, gradients, low-precision
    /// weight copy, optimizer state, scaler, activations and their gradients. Everything is
    /// allocated once, so this is also its peak.
    pub memory_bytes: u64,
    /// Optimizer steps submitted.
    pub submitted: u64,
    eval: Option<EvalProbe>,
    profiler: Option<Profiler>,
}

impl ModeRun {
    pub fn trainer(&self) -> &Trainer {
        &self.trainer
    }

    /// Latest GPU ms per step, if a profile has landed.
    pub fn latest_gpu_ms(&self) -> Option<f64> {
        self.gpu_ms.last().map(|&(_, ms)| ms)
    }

    pub fn skipped_steps(&self) -> usize {
        self.history.iter().filter(|s| s.skipped).count()
    }

    /// The GradScaler's scale after the last finished step (1 without a scaler).
    pub fn final_scale(&self) -> Option<f32> {
        self.history.last().map(|s| s.scale_after)
    }
}

/// The latest gradient histogram of the chosen mode and parameter.
#[derive(Clone, Debug, PartialEq)]
pub struct HistogramSnapshot {
    pub precision: Precision,
    pub param: String,
    /// Steps submitted when it was taken (the histogram shows that step's gradients).
    pub step: u64,
    /// The scale the second histogram was multiplied by (the scaler's current scale).
    pub scale: f32,
    pub hist: GradHistograms,
}

struct HistogramProbe {
    mode: usize,
    param: String,
    kernel: Kernel,
    counts: Arc<GpuBuffer>,
    read: AsyncRead,
    last_step: u64,
}

/// Held-out batches for validation (full batches only, so the training network serves).
struct EvalSet {
    batches: Vec<Batch>,
}

/// Everything a started run needs from the data and the model.
struct Prepared {
    split: Arc<Split>,
    spec: ModelSpec,
    init: Vec<(String, Vec<f32>)>,
    loss: LossKind,
    loader: Loader,
    eval: Option<EvalSet>,
}

/// The app's controller. See the module docs.
pub struct Session {
    ctx: Arc<GpuContext>,
    /// The configuration of the current run (the setup panel edits its own copy).
    pub config: SessionConfig,
    status: Status,
    runs: Vec<ModeRun>,
    prepared: Option<Prepared>,
    /// Cached data set, by name, so the precision map and restarts don't reload it.
    data_cache: Option<(String, Arc<Split>)>,
    /// One epoch's batch order, shared by every mode.
    epoch_batches: Option<(u64, Arc<Vec<Vec<usize>>>)>,
    batch_buf: Option<Batch>,
    histogram: Option<HistogramProbe>,
    histogram_latest: Option<HistogramSnapshot>,
    histogram_range: HistogramRange,
    /// Wall-clock seconds spent running (not paused), for steps per second.
    running_secs: f64,
    last_time: Option<f64>,
}

impl Session {
    pub fn new(ctx: Arc<GpuContext>) -> Self {
        Self {
            ctx,
            config: SessionConfig::default(),
            status: Status::Idle,
            runs: Vec::new(),
            prepared: None,
            data_cache: None,
            epoch_batches: None,
            batch_buf: None,
            histogram: None,
            histogram_latest: None,
            histogram_range: HistogramRange::default(),
            running_secs: 0.0,
            last_time: None,
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
        self.prepared = None;
        self.epoch_batches = None;
        self.histogram = None;
        self.histogram_latest = None;
        self.running_secs = 0.0;
        self.last_time = None;
        self.status = Status::Idle;
        self.ctx.allocator.reset_peak();
    }

    /// Steps whose stats, evaluations, profiles or histograms are still on their way.
    pub fn in_flight(&self) -> bool {
        self.runs.iter().any(|r| {
            (r.history.len() as u64) < r.submitted
                || r.eval.as_ref().is_some_and(|e| e.read.in_flight())
                || r.profiler.as_ref().is_some_and(|p| p.read.in_flight())
        }) || self.histogram.as_ref().is_some_and(|h| h.read.in_flight())
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
        if let Err(e) = self.tick_inner() {
            self.status = Status::Failed(e.to_string());
        }
        matches!(self.status, Status::Running | Status::Preparing { .. }) || self.in_flight()
    }

    fn tick_inner(&mut self) -> Result<()> {
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
        if self.runs.is_empty() {
            return Ok(());
        }
        #[cfg(not(target_arch = "wasm32"))]
        let _ = self.ctx.device.poll(wgpu::PollType::Poll);
        let running = self.status == Status::Running;
        for m in 0..self.runs.len() {
            if running {
                self.submit_steps(m)?;
            }
            let ctx = self.ctx.clone();
            let run = &mut self.runs[m];
            run.history.extend(run.trainer.poll_stats(&ctx));
            self.collect_eval(m);
            self.collect_profile(m);
            if running {
                self.maybe_eval(m)?;
                self.maybe_profile(m)?;
            }
        }
        self.collect_histogram()?;
        self.maybe_histogram()?;
        if running
            && self.runs.iter().all(|r| {
                r.submitted >= self.config.steps && r.history.len() as u64 >= self.config.steps
            })
        {
            self.status = Status::Finished;
        }
        Ok(())
    }

    /// Load a data set by name (cached).
    fn data(&mut self, name: &str) -> Result<Arc<Split>> {
        if let Some((n, split)) = &self.data_cache
            && n == name
        {
            return Ok(split.clone());
        }
        let source: DataSource = name.parse()?;
        let split = Arc::new(source.load(true)?);
        self.data_cache = Some((name.to_string(), split.clone()));
        Ok(split)
    }

    /// The model `config` describes, for the data it names.
    pub fn model_spec(&mut self, config: &SessionConfig) -> Result<ModelSpec> {
        let split = self.data(&config.dataset)?;
        let train = &split.train;
        let spec = preset(&config.model, &train.sample_shape, train.output_dim())?;
        spec.check_data(&train.sample_shape, train.output_dim())?;
        Ok(spec)
    }

    /// The precision map of `config`'s model under `precision`: one row per layer plus
    /// the loss ([`crate::nn::precision_map`]).
    pub fn precision_map(
        &mut self,
        config: &SessionConfig,
        precision: Precision,
    ) -> Result<Vec<PrecisionRow>> {
        let spec = self.model_spec(config)?;
        let split = self.data(&config.dataset)?;
        let loss = if split.train.y.is_classification() {
            LossKind::CrossEntropy
        } else {
            LossKind::Mse
        };
        Ok(network::precision_map(&spec, &Policy::new(precision), loss))
    }

    /// Build what mode `index` needs (data and model first). One mode per frame.
    fn prepare_one(&mut self, index: usize) -> Result<()> {
        if self.prepared.is_none() {
            let config = self.config.clone();
            let split = self.data(&config.dataset)?;
            let spec = self.model_spec(&config)?;
            let init = spec.init_params(config.seed);
            let loss = if split.train.y.is_classification() {
                LossKind::CrossEntropy
            } else {
                LossKind::Mse
            };
            let loader = Loader::new(split.train.n, config.batch_size, true, config.seed)?;
            let eval = match (loss, split.eval_set()) {
                (LossKind::CrossEntropy, Some(set)) if set.n >= config.batch_size => {
                    let n = (config.eval_samples / config.batch_size)
                        .clamp(1, set.n / config.batch_size);
                    let batches = (0..n)
                        .map(|b| {
                            let idx: Vec<usize> =
                                (b * config.batch_size..(b + 1) * config.batch_size).collect();
                            set.gather(&idx)
                        })
                        .collect::<Result<_>>()?;
                    Some(EvalSet { batches })
                }
                _ => None,
            };
            self.prepared = Some(Prepared {
                split,
                spec,
                init,
                loss,
                loader,
                eval,
            });
        }
        let prepared = self.prepared.as_ref().expect("prepared above");
        let precision = self.config.modes[index];
        let scaler_enabled = self.config.scaler_for(precision);
        let step_config = StepConfig {
            precision,
            loss: prepared.loss,
            optimizer: self.config.optimizer.config(self.config.lr),
            scaler: ScalerConfig {
                enabled: scaler_enabled,
                ..self.config.scaler
            },
            clip_grad_norm: None,
            grad_accum: 1,
        };
        let ctx = &*self.ctx;
        let target_dim = prepared.split.train.output_dim();
        let batch = self.config.batch_size;
        let before = ctx.memory().live_bytes;
        let mut trainer = Trainer::new(
            ctx,
            prepared.spec.clone(),
            step_config.clone(),
            target_dim,
            &prepared.init,
        )?;
        trainer.network(ctx, batch)?;
        let memory_bytes = ctx.memory().live_bytes.saturating_sub(before);
        let eval = prepared.eval.as_ref().map(|set| {
            // Per batch: mean loss and correct count (Trainer::submit_eval_batch).
            let bytes = 8 * set.batches.len() as u64;
            EvalProbe {
                counts: ctx.alloc_storage("app.eval.counts", bytes),
                read: AsyncRead::new(ctx, "app.eval.read", bytes),
                next_step: self.config.eval_every.min(self.config.steps),
            }
        });
        let profiler = if self.has_timestamps() {
            let mut twin = Trainer::new(
                ctx,
                prepared.spec.clone(),
                step_config,
                target_dim,
                &prepared.init,
            )?;
            let labels: Vec<String> = twin
                .step_kernels(ctx, batch)?
                .iter()
                .map(|k| k.label.clone())
                .collect();
            let queries = 2 * labels.len() as u32;
            let query_set = ctx.device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("app.profile"),
                ty: wgpu::QueryType::Timestamp,
                count: queries,
            });
            let bytes = 8 * queries as u64;
            Some(Profiler {
                twin,
                query_set,
                resolve: ctx.alloc(
                    "app.profile.resolve",
                    bytes,
                    wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                ),
                read: AsyncRead::new(ctx, "app.profile.read", bytes),
                labels,
                // The first profile after a few steps (pipelines warm).
                next_step: 5.min(self.config.steps),
            })
        } else {
            None
        };
        self.runs.push(ModeRun {
            precision,
            scaler_enabled,
            batch_size: batch,
            trainer,
            history: Vec::new(),
            val_accuracy: Vec::new(),
            gpu_ms: Vec::new(),
            kernel_times: Vec::new(),
            memory_bytes,
            submitted: 0,
            eval,
            profiler,
        });
        Ok(())
    }

    /// Sample indices of global batch `step` (0-based) in the shared order.
    fn batch_indices(&mut self, step: u64) -> Result<(Arc<Vec<Vec<usize>>>, usize)> {
        let prepared = self
            .prepared
            .as_ref()
            .ok_or_else(|| Error::InvalidArgument("no run prepared".into()))?;
        let per_epoch = prepared.loader.num_batches() as u64;
        let epoch = step / per_epoch;
        let cached = match &self.epoch_batches {
            Some((e, b)) if *e == epoch => b.clone(),
            _ => {
                let b = Arc::new(prepared.loader.batches(epoch));
                self.epoch_batches = Some((epoch, b.clone()));
                b
            }
        };
        Ok((cached, (step % per_epoch) as usize))
    }

    /// Gather global batch `step` into the reusable batch buffer.
    fn gather(&mut self, step: u64) -> Result<()> {
        let (batches, b) = self.batch_indices(step)?;
        let prepared = self.prepared.as_ref().expect("checked in batch_indices");
        let batch = self
            .batch_buf
            .get_or_insert_with(|| Batch::empty(&prepared.split.train.y));
        prepared.split.train.gather_into(&batches[b], batch)
    }

    fn submit_steps(&mut self, m: usize) -> Result<()> {
        for _ in 0..self.config.steps_per_frame {
            let ctx = self.ctx.clone();
            let run = &mut self.runs[m];
            if run.submitted >= self.config.steps || !run.trainer.can_submit(&ctx) {
                break;
            }
            let step = run.submitted;
            self.gather(step)?;
            let batch = self.batch_buf.as_ref().expect("gathered");
            let run = &mut self.runs[m];
            run.trainer
                .train_batch(&ctx, batch.size, &batch.x, targets(batch))?;
            run.submitted += 1;
        }
        Ok(())
    }

    fn maybe_eval(&mut self, m: usize) -> Result<()> {
        let Some(set) = self.prepared.as_ref().and_then(|p| p.eval.as_ref()) else {
            return Ok(());
        };
        let ctx = &*self.ctx;
        let run = &mut self.runs[m];
        let Some(probe) = run.eval.as_mut() else {
            return Ok(());
        };
        if run.submitted < probe.next_step || !probe.read.is_free() {
            return Ok(());
        }
        for (i, b) in set.batches.iter().enumerate() {
            run.trainer
                .submit_eval_batch(ctx, b.size, &b.x, &targets(b), &probe.counts, i)?;
        }
        let mut encoder = ctx.device.create_command_encoder(&Default::default());
        encoder.copy_buffer_to_buffer(
            probe.counts.raw(),
            0,
            probe.read.staging.raw(),
            0,
            probe.counts.size(),
        );
        ctx.queue.submit([encoder.finish()]);
        probe.read.map(run.submitted);
        probe.next_step = if run.submitted >= self.config.steps {
            u64::MAX
        } else {
            (run.submitted + self.config.eval_every).min(self.config.steps)
        };
        Ok(())
    }

    fn collect_eval(&mut self, m: usize) {
        let samples = self
            .prepared
            .as_ref()
            .and_then(|p| p.eval.as_ref())
            .map_or(0, |e| e.batches.len() * self.config.batch_size);
        let run = &mut self.runs[m];
        if let Some(probe) = run.eval.as_mut()
            && let Some((step, bytes)) = probe.read.take()
        {
            let correct: u64 = words(&bytes).chunks_exact(2).map(|w| w[1] as u64).sum();
            run.val_accuracy
                .push((step, correct as f32 / samples.max(1) as f32));
        }
    }

    fn maybe_profile(&mut self, m: usize) -> Result<()> {
        let due = {
            let run = &self.runs[m];
            match &run.profiler {
                Some(p) => run.submitted >= p.next_step && p.read.is_free(),
                None => false,
            }
        };
        if !due {
            return Ok(());
        }
        let step = self.runs[m].submitted;
        // The twin trains on the batch the run just used (any real batch will do).
        self.gather(step.saturating_sub(1))?;
        let batch = self.batch_buf.as_ref().expect("gathered");
        let ctx = &*self.ctx;
        let run = &mut self.runs[m];
        let p = run.profiler.as_mut().expect("due");
        let size = self.config.batch_size;
        let net = p
            .twin
            .planned_network(size)
            .ok_or_else(|| Error::InvalidArgument("network not planned".into()))?;
        Trainer::write_batch(ctx, net, &batch.x, &targets(batch))?;
        let grads = p.twin.store.grads.clone();
        let kernels = p.twin.step_kernels(ctx, size)?;
        let mut encoder = ctx.device.create_command_encoder(&Default::default());
        encoder.clear_buffer(grads.raw(), 0, None);
        for (i, k) in kernels.iter().enumerate() {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some(&k.label),
                timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                    query_set: &p.query_set,
                    beginning_of_pass_write_index: Some(2 * i as u32),
                    end_of_pass_write_index: Some(2 * i as u32 + 1),
                }),
            });
            k.encode(&mut pass);
        }
        let queries = 2 * kernels.len() as u32;
        encoder.resolve_query_set(&p.query_set, 0..queries, p.resolve.raw(), 0);
        encoder.copy_buffer_to_buffer(
            p.resolve.raw(),
            0,
            p.read.staging.raw(),
            0,
            p.resolve.size(),
        );
        ctx.queue.submit([encoder.finish()]);
        p.read.map(step);
        p.next_step = step + self.config.profile_every.max(1);
        Ok(())
    }

    fn collect_profile(&mut self, m: usize) {
        let period_ns = self.ctx.queue.get_timestamp_period() as f64;
        let run = &mut self.runs[m];
        let Some(p) = run.profiler.as_mut() else {
            return;
        };
        let Some((step, bytes)) = p.read.take() else {
            return;
        };
        let ticks: Vec<u64> = bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect();
        run.kernel_times = p
            .labels
            .iter()
            .enumerate()
            .map(|(i, label)| KernelTime {
                label: label.clone(),
                ms: ticks[2 * i + 1].saturating_sub(ticks[2 * i]) as f64 * period_ns / 1e6,
            })
            .collect();
        // The whole step: first kernel's start to last kernel's end, gaps between passes
        // included (some drivers run work lazily, between the timestamps of its pass).
        let whole = match (ticks.first(), ticks.last()) {
            (Some(&a), Some(&b)) => b.saturating_sub(a) as f64 * period_ns / 1e6,
            _ => 0.0,
        };
        run.gpu_ms.push((step, whole));
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
        let ctx = &*self.ctx;
        let store = &run.trainer.store;
        let entry = store.layout.get(param).ok_or_else(|| {
            Error::InvalidArgument(format!("no parameter `{param}` in this model"))
        })?;
        let range = self.histogram_range;
        let counts = ctx.alloc_storage("app.histogram.counts", range.bytes());
        let kernel = histogram::log2_histogram(
            ctx,
            &store.grads,
            entry.offset,
            entry.numel(),
            run.trainer.scaler.state_buffer(),
            &counts,
            range,
        )?;
        self.histogram = Some(HistogramProbe {
            mode,
            param: param.to_string(),
            kernel,
            counts,
            // Counts, then the scale they were multiplied by.
            read: AsyncRead::new(ctx, "app.histogram.read", range.bytes() + 4),
            last_step: 0,
        });
        Ok(())
    }

    /// After new steps of the chosen mode: histogram its gradients (unscaled, as the step
    /// left them, and times the scaler's current scale), behind them in the queue.
    fn maybe_histogram(&mut self) -> Result<()> {
        let Some(h) = self.histogram.as_mut() else {
            return Ok(());
        };
        let run = &self.runs[h.mode];
        if run.submitted <= h.last_step || !h.read.is_free() {
            return Ok(());
        }
        let ctx = &*self.ctx;
        let mut encoder = ctx.device.create_command_encoder(&Default::default());
        encoder.clear_buffer(h.counts.raw(), 0, None);
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            h.kernel.encode(&mut pass);
        }
        encoder.copy_buffer_to_buffer(h.counts.raw(), 0, h.read.staging.raw(), 0, h.counts.size());
        encoder.copy_buffer_to_buffer(
            run.trainer.scaler.state_buffer().raw(),
            0,
            h.read.staging.raw(),
            h.counts.size(),
            4,
        );
        ctx.queue.submit([encoder.finish()]);
        h.last_step = run.submitted;
        h.read.map(run.submitted);
        Ok(())
    }

    fn collect_histogram(&mut self) -> Result<()> {
        let Some(h) = self.histogram.as_mut() else {
            return Ok(());
        };
        let Some((step, bytes)) = h.read.take() else {
            return Ok(());
        };
        let w = words(&bytes);
        let range = self.histogram_range;
        let hist = GradHistograms::from_words(range, &w)?;
        self.histogram_latest = Some(HistogramSnapshot {
            precision: self.runs[h.mode].precision,
            param: h.param.clone(),
            step,
            scale: f32::from_bits(w[range.words()]),
            hist,
        });
        Ok(())
    }
}

fn targets(batch: &Batch) -> BatchTargets<'_> {
    match &batch.y {
        BatchLabels::Classes(l) => BatchTargets::Classes(l),
        BatchLabels::Targets(t) => BatchTargets::Values(t),
    }
}
