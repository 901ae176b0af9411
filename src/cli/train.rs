//! `webgpu-amp train`: train a model on a data set under one precision mode, with a progress
//! bar, JSON-lines metrics, checkpoints and resume.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use webgpu_amp::amp::policy::Precision;
use webgpu_amp::amp::scaler::ScalerConfig;
use webgpu_amp::data::Split;
use webgpu_amp::nn::LossKind;
use webgpu_amp::nn::ModelSpec;
use webgpu_amp::optim::OptimizerConfig;
use webgpu_amp::train::StepConfig;
use webgpu_amp::train::checkpoint::{Checkpoint, check_save_target};
use webgpu_amp::train::planning::check_params_fit;
use webgpu_amp::train::profile::profile_steps;
use webgpu_amp::train::run::MAX_GRAD_ACCUM;
use webgpu_amp::train::run::{Event, RunConfig};
use webgpu_amp::train::{BatchTargets, StepProfile, Trainer};
use webgpu_amp::{Error, GpuContext, Result};

use super::DeviceArgs;
use super::distributed::{DistArgs, Joined};
use super::out::outln;
use super::progress::{planned_steps, print_summary, run_rank_with_progress};
use super::recipe::{RecipeArgs, gpt};
use super::resolve::{Resolved, resolve};

/// Flags shared by `train` and `compare` (everything but the precision).
#[derive(Args, Clone, Debug)]
pub struct TrainCommon {
    /// Preset (linear, mlp, simple-cnn, mnist-cnn, gpt-tiny, gpt-char) or a JSON model file.
    /// A GPT's unset flags default to nanoGPT's shakespeare-char recipe: --optimizer adamw
    /// --lr 1e-3 --beta2 0.99 --weight-decay 0.1 --clip-grad-norm 1 --lr-schedule cosine
    /// (--warmup-steps: steps / 50, --min-lr: lr / 10).
    #[arg(long)]
    pub model: Option<String>,
    /// default (embedded MNIST subset), mnist, fashion-mnist, synthetic[:N], hamlet (embedded
    /// text), shakespeare, text:FILE, or FILE.safetensors. Default: default, or hamlet for a GPT.
    #[arg(long)]
    pub dataset: Option<String>,
    /// mse or cross-entropy (default: cross-entropy for class labels, mse for targets).
    #[arg(long)]
    pub loss: Option<String>,
    /// sgd, adam or adamw (default adam; adamw for a GPT).
    #[arg(long)]
    pub optimizer: Option<String>,
    /// Learning rate (default 1e-3 for adam/adamw, 0.01 for sgd). With --lr-schedule cosine,
    /// the rate after warm-up.
    #[arg(long, allow_negative_numbers = true)]
    pub lr: Option<f32>,
    /// SGD momentum.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub momentum: f32,
    /// SGD dampening.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub dampening: f32,
    /// SGD Nesterov momentum.
    #[arg(long)]
    pub nesterov: bool,
    /// Weight decay (default 0, or 0.01 for adamw as in PyTorch; 0.1 for a GPT, on its
    /// weights of two or more dimensions only, as nanoGPT's parameter groups).
    #[arg(long, allow_negative_numbers = true)]
    pub weight_decay: Option<f32>,
    /// Samples per micro-batch (32: one epoch of mlp on MNIST reaches 97%).
    #[arg(long, default_value_t = 32, allow_negative_numbers = true)]
    pub batch_size: usize,
    /// Epochs to train (default 1 when --steps is not given).
    #[arg(long, allow_negative_numbers = true)]
    pub epochs: Option<u64>,
    /// Optimizer steps to train (stops early within an epoch).
    #[arg(long, allow_negative_numbers = true)]
    pub steps: Option<u64>,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Keep the data set's order instead of shuffling each epoch.
    #[arg(long)]
    pub no_shuffle: bool,
    /// Initial parameters (PyTorch names, e.g. from safetensors.torch.save_file(model.state_dict())).
    #[arg(long)]
    pub init: Option<PathBuf>,
    /// Clip gradients to this global L2 norm, after unscaling (default none; 1 for a GPT;
    /// 0: none).
    #[arg(long, allow_negative_numbers = true)]
    pub clip_grad_norm: Option<f32>,
    /// Micro-batches per optimizer step.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    pub grad_accum: usize,
    /// GradScaler initial scale.
    #[arg(long, default_value_t = 65536.0, allow_negative_numbers = true)]
    pub init_scale: f32,
    #[arg(long, default_value_t = 2000, allow_negative_numbers = true)]
    pub growth_interval: u32,
    #[arg(long, default_value_t = 2.0, allow_negative_numbers = true)]
    pub growth_factor: f64,
    #[arg(long, default_value_t = 0.5, allow_negative_numbers = true)]
    pub backoff_factor: f64,
    /// Turn the GradScaler on or off (default: on for amp-f16 only, as PyTorch recommends).
    #[arg(long)]
    pub scaler: Option<bool>,
    /// Classes a preset predicts on class labels (default 10, as the tutorials'
    /// `SimpleCNN(num_classes=10)`); a label outside 0..N is an error. A JSON model's last
    /// layer sets its own count; float targets set the output width from the data.
    #[arg(long, allow_negative_numbers = true)]
    pub num_classes: Option<usize>,
    /// Skip validation at epoch ends.
    #[arg(long)]
    pub no_validate: bool,
    #[command(flatten)]
    pub recipe: RecipeArgs,
    #[command(flatten)]
    pub device: DeviceArgs,
}

#[derive(Args, Debug)]
pub struct TrainArgs {
    /// f32, amp-f16, amp-bf16 or f16.
    #[arg(long, default_value = "amp-f16")]
    precision: String,
    #[command(flatten)]
    common: TrainCommon,
    /// Write the final checkpoint here (safetensors; parameters load in PyTorch).
    #[arg(long)]
    save: Option<PathBuf>,
    /// Also save every N optimizer steps (to --save).
    #[arg(long, allow_negative_numbers = true)]
    save_every: Option<u64>,
    /// Continue from a checkpoint written by --save.
    #[arg(long)]
    resume: Option<PathBuf>,
    /// Write one JSON object per step, per epoch, and a final summary.
    #[arg(long)]
    metrics: Option<PathBuf>,
    /// After training, profile the step on a twin of the model (same model, precision and
    /// batch size; the trained weights are untouched): GPU time per kernel and per phase
    /// from timestamp queries, host time per step (encode, submit, read-back); a table, and
    /// a JSON line in --metrics.
    #[arg(long)]
    profile: bool,
    #[command(flatten)]
    dist: DistArgs,
}

/// Data, model and initial parameters resolved from the flags.
pub struct Prepared {
    pub split: Split,
    pub spec: ModelSpec,
    pub init: Vec<(String, Vec<f32>)>,
    pub loss: LossKind,
    /// The data set's name as resolved (`--dataset`, or the model's default).
    pub dataset: String,
}

impl TrainCommon {
    /// Checks the flags that need no data or GPU, so a typo fails at once.
    pub fn validate_args(&self) -> Result<()> {
        if self.batch_size == 0 {
            return Err(Error::InvalidArgument(
                "--batch-size must be at least 1".into(),
            ));
        }
        if self.grad_accum == 0 {
            return Err(Error::InvalidArgument(
                "--grad-accum must be at least 1".into(),
            ));
        }
        if self.grad_accum > MAX_GRAD_ACCUM {
            return Err(Error::InvalidArgument(format!(
                "--grad-accum {} is over the limit of {MAX_GRAD_ACCUM} micro-batches per optimizer step",
                self.grad_accum
            )));
        }
        if (self.batch_size as u64)
            .checked_mul(self.grad_accum as u64)
            .is_none()
        {
            return Err(Error::InvalidArgument(format!(
                "--batch-size {} × --grad-accum {} overflows 64 bits",
                self.batch_size, self.grad_accum
            )));
        }
        if self.num_classes == Some(0) {
            return Err(Error::InvalidArgument(
                "--num-classes must be at least 1".into(),
            ));
        }
        if self.steps == Some(0) {
            return Err(Error::InvalidArgument("--steps must be at least 1".into()));
        }
        if self.epochs == Some(0) {
            return Err(Error::InvalidArgument("--epochs must be at least 1".into()));
        }
        if let Some(max) = self.clip_grad_norm
            && !(max >= 0.0 && max.is_finite())
        {
            return Err(Error::InvalidArgument(format!(
                "--clip-grad-norm must be finite and > 0 (or 0 for no clipping), got {max}"
            )));
        }
        if let Some(loss) = &self.loss {
            LossKind::parse(loss)?;
        }
        self.optimizer(false)?;
        self.recipe.validate()?;
        self.scaler_config(true).validate()?;
        self.device.options()?;
        Ok(())
    }

    fn scaler_config(&self, enabled: bool) -> ScalerConfig {
        ScalerConfig {
            init_scale: self.init_scale,
            growth_factor: self.growth_factor,
            backoff_factor: self.backoff_factor,
            growth_interval: self.growth_interval,
            enabled,
        }
    }

    /// Load the data, resolve the model and its loss, open the device with `open`, check
    /// that the model's parameters fit it under every one of `precisions`, and only then
    /// make the initial parameters (`--init` or the model's own initialisation).
    pub fn prepare(
        &self,
        precisions: &[Precision],
        open: impl FnOnce() -> Result<GpuContext>,
    ) -> Result<(Prepared, GpuContext)> {
        let Resolved {
            split,
            spec,
            loss,
            what,
            dataset,
        } = resolve(self)?;
        let ctx = open()?;
        let optimizer = self.optimizer(spec.gpt.is_some())?;
        for &precision in precisions {
            check_params_fit(&ctx, &spec, &what, precision, &optimizer)?;
        }
        let init = match &self.init {
            Some(path) => {
                Checkpoint::load(path)?.params_for_model(&spec, &path.display().to_string())?
            }
            None => spec.init_params(self.seed),
        };
        let prepared = Prepared {
            split,
            spec,
            init,
            loss,
            dataset,
        };
        Ok((prepared, ctx))
    }

    /// The optimizer from the flags; a GPT's unset flags take nanoGPT's recipe
    /// ([`gpt`]).
    pub fn optimizer(&self, is_gpt: bool) -> Result<OptimizerConfig> {
        let default = if is_gpt { gpt::OPTIMIZER } else { "adam" };
        let adam_lr = if is_gpt { gpt::LR } else { 1e-3 };
        let mut cfg = match self.optimizer.as_deref().unwrap_or(default) {
            "sgd" => OptimizerConfig::sgd(self.lr.unwrap_or(0.01)),
            "adam" => OptimizerConfig::adam(self.lr.unwrap_or(adam_lr)),
            "adamw" => OptimizerConfig::adamw(self.lr.unwrap_or(adam_lr)),
            other => {
                return Err(Error::InvalidArgument(format!(
                    "unknown optimizer `{other}` (expected sgd, adam or adamw)"
                )));
            }
        };
        match &mut cfg {
            OptimizerConfig::Sgd {
                momentum,
                dampening,
                nesterov,
                weight_decay,
                ..
            } => {
                *momentum = self.momentum;
                *dampening = self.dampening;
                *nesterov = self.nesterov;
                *weight_decay = self.weight_decay.unwrap_or(0.0);
            }
            OptimizerConfig::Adam { weight_decay, .. }
            | OptimizerConfig::AdamW { weight_decay, .. } => {
                if is_gpt {
                    *weight_decay = gpt::WEIGHT_DECAY;
                }
                if let Some(wd) = self.weight_decay {
                    *weight_decay = wd;
                }
            }
        }
        self.recipe.apply_betas(is_gpt, &mut cfg);
        cfg.validate()?;
        Ok(cfg)
    }

    /// The run's configuration; a GPT's unset recipe flags take nanoGPT's values ([`gpt`]).
    pub fn run_config(&self, precision: Precision, prepared: &Prepared) -> Result<RunConfig> {
        self.validate_args()?;
        let is_gpt = prepared.spec.gpt.is_some();
        let scaler =
            self.scaler_config(self.scaler.unwrap_or(precision.scaler_enabled_by_default()));
        scaler.validate()?;
        let optimizer = self.optimizer(is_gpt)?;
        let clip = match self.clip_grad_norm {
            Some(0.0) => None,
            Some(max) => Some(max),
            None => is_gpt.then_some(gpt::CLIP_GRAD_NORM),
        };
        let mut cfg = RunConfig {
            step: StepConfig {
                precision,
                loss: prepared.loss,
                optimizer,
                scaler,
                clip_grad_norm: clip,
                grad_accum: self.grad_accum,
                lr_schedule: Default::default(),
            },
            batch_size: self.batch_size,
            epochs: self.epochs,
            steps: self.steps,
            seed: self.seed,
            shuffle: !self.no_shuffle,
            save_every: None,
            save_path: None,
            validate: !self.no_validate,
            eval: self.recipe.eval_config(),
        };
        let budget = planned_steps(&cfg, prepared.split.train.n).unwrap_or(1);
        cfg.step.lr_schedule = self.recipe.schedule(is_gpt, optimizer.lr(), budget)?;
        Ok(cfg)
    }
}

pub fn run(args: &TrainArgs) -> Result<()> {
    // Under mpirun: one rank of a data-parallel job; any rank's error ends the whole job.
    match super::distributed::join(&args.dist)? {
        None => train(args, None),
        Some(rank) => match train(args, Some(&rank)) {
            Ok(()) => Ok(()),
            Err(e) => rank.fail(&super::flag_names(&e.to_string())),
        },
    }
}

fn train(args: &TrainArgs, rank: Option<&Joined>) -> Result<()> {
    let precision = Precision::parse(&args.precision)?;
    args.common.validate_args()?;
    if args.save_every.is_some() && args.save.is_none() {
        return Err(Error::InvalidArgument(
            "--save-every needs --save FILE".into(),
        ));
    }
    if args.save_every == Some(0) {
        return Err(Error::InvalidArgument(
            "--save-every must be at least 1".into(),
        ));
    }
    // Before any training: the files the writer rank makes go only to regular files or
    // new paths (a rename onto /dev/full replaced the device node).
    if rank.is_none_or(Joined::is_writer) {
        for (flag, path) in [("--save", &args.save), ("--metrics", &args.metrics)] {
            if let Some(p) = path {
                check_save_target(p, flag)?;
            }
        }
    }
    let options = args.common.device.options()?;
    let (prepared, ctx) = args.common.prepare(&[precision], || match rank {
        Some(rank) => rank.context(&options),
        None => GpuContext::new(&options),
    })?;
    let mut cfg = args.common.run_config(precision, &prepared)?;
    cfg.save_every = args.save_every;
    cfg.save_path = args.save.clone();
    let resume = args
        .resume
        .as_ref()
        .map(|p| Checkpoint::load(p))
        .transpose()?;
    let prepared = match &resume {
        Some(ck) => {
            let init = ck.params_for_model(
                &prepared.spec,
                &args.resume.as_ref().expect("resume").display().to_string(),
            )?;
            Prepared { init, ..prepared }
        }
        None => prepared,
    };
    // Data-parallel: rank 0 writes metrics, prints and checkpoints (the others train).
    let writer = rank.is_none_or(Joined::is_writer);
    let mut metrics = match args.metrics.as_ref().filter(|_| writer) {
        Some(p) => Some(std::io::BufWriter::new(
            std::fs::File::create(p)
                .map_err(|e| Error::InvalidArgument(format!("{}: {e}", p.display())))?,
        )),
        None => None,
    };
    let metrics_path = args.metrics.clone();
    let mut write_line = move |v: serde_json::Value| -> Result<()> {
        if let Some(w) = metrics.as_mut() {
            writeln!(w, "{v}").and_then(|_| w.flush()).map_err(|e| {
                Error::InvalidArgument(format!(
                    "{}: {e}",
                    metrics_path.as_ref().expect("path").display()
                ))
            })?;
        }
        Ok(())
    };
    let (step_config, batch_size) = (cfg.step.clone(), cfg.batch_size);
    let summary = run_rank_with_progress(
        &ctx,
        &prepared,
        cfg,
        resume.as_ref(),
        precision.name(),
        rank.map(|r| r.collective.clone()),
        &mut |event| match event {
            Event::Step { stats, epoch, lr } => write_line(serde_json::json!({
                "step": stats.step, "epoch": epoch, "loss": stats.loss, "scale": stats.scale,
                "skipped": stats.skipped, "lr": webgpu_amp::optim::widen(*lr),
            })),
            Event::Eval(e) => write_line(serde_json::json!({
                "step": e.step, "train_loss": e.train_loss, "val_loss": e.val_loss,
            })),
            Event::Epoch(e) => write_line(serde_json::json!({
                "epoch": e.epoch, "val_loss": e.val_loss, "val_accuracy": e.val_accuracy,
                "images_per_sec": e.images_per_sec, "peak_gpu_bytes": e.peak_gpu_bytes,
            })),
            Event::Saved { .. } => Ok(()),
        },
    )?;
    write_line(serde_json::json!({ "summary": summary }))?;
    if !writer {
        return Ok(());
    }
    print_summary(&[&summary])?;
    if let Some(p) = &args.save {
        outln!("checkpoint: {}", p.display())?;
    }
    if args.profile {
        let profile = profile_twin(&ctx, &prepared, step_config, batch_size)?;
        println!("{}", profile.table(10));
        write_line(serde_json::json!({ "profile": profile }))?;
    }
    Ok(())
}

/// `--profile`: a twin trainer of the run's model on its first training batch, three
/// warm-up steps, then [`profile_steps`] over five.
fn profile_twin(
    ctx: &GpuContext,
    prepared: &Prepared,
    step: StepConfig,
    batch_size: usize,
) -> Result<StepProfile> {
    let train = &prepared.split.train;
    let b = batch_size.min(train.n).max(1);
    let batch = train.gather(&(0..b).collect::<Vec<_>>())?;
    let dim = train.output_dim();
    let mut twin = Trainer::new(ctx, prepared.spec.clone(), step, dim, &prepared.init)?;
    for _ in 0..3 {
        twin.train_batch(ctx, b, &batch.x, BatchTargets::from(&batch.y))?;
    }
    profile_steps(
        ctx,
        &mut twin,
        b,
        &batch.x,
        || BatchTargets::from(&batch.y),
        5,
    )
}
