//! The flags `train` and `compare` share (everything but the precision and the files a run
//! writes), and the run they describe: its data, model and initial parameters
//! ([`RunArgs::prepare`]), and its [`RunConfig`] made with the library's run builder and
//! checked by its one validation, every setting named by its flag ([`super::flag`]).

use std::path::PathBuf;

use clap::Args;
use webgpu_amp::amp::policy::Precision;
use webgpu_amp::amp::scaler::ScalerConfig;
use webgpu_amp::data::Split;
use webgpu_amp::nn::{LossKind, ModelSpec};
use webgpu_amp::ops::buffers::OnSkippedStep;
use webgpu_amp::optim::OptimizerConfig;
use webgpu_amp::train::checkpoint::Checkpoint;
use webgpu_amp::train::planning::check_params_fit;
use webgpu_amp::train::{MAX_COUNT, RunConfig, Setting, StepConfig};
use webgpu_amp::{Error, GpuContext, Result};

use super::augment_args::AugmentArgs;
use super::doctor::DoctorArgs;
use super::numbers::{number, setting};
use super::out::outln;
use super::recipe::RecipeArgs;
use super::resolve::{ModelAndData, SEQ_LEN_RANGE, Wanted, resolve};
use super::run_checks::{self, OptimizerFlags, ResumeFlags};
use super::{AttentionArgs, DeviceArgs};
use webgpu_amp::nn::family::Recipe;

/// Flags shared by `train` and `compare` (everything but the precision). Numeric flags take
/// their ranges from the run builder ([`Setting::range`], the guide's table of flags).
#[derive(Args, Clone, Debug)]
pub struct RunArgs {
    /// Preset (linear, mlp, simple-cnn, mnist-cnn, gpt-tiny, gpt-char, llama-tiny,
    /// smollm2-135m, resnet-tiny, resnet8-fashion, resnet20-cifar, resnet56-cifar,
    /// resnet18-cifar), a JSON model file, or hf:DIR (a Hugging Face transformers folder:
    /// config.json and model.safetensors, trained from its weights).
    /// A GPT's unset flags default to nanoGPT's shakespeare-char recipe: --optimizer adamw
    /// --lr 1e-3 --beta2 0.99 --weight-decay 0.1 --clip-grad-norm 1 --lr-schedule cosine
    /// (--warmup-steps: steps / 50, --min-lr: lr / 10).
    #[arg(long)]
    pub model: Option<String>,
    /// A Llama's training window in tokens, 1 to its max_position_embeddings (default
    /// min(1024, max_position_embeddings), as transformers' run_clm.py).
    #[arg(long, allow_negative_numbers = true, value_parser = number::<usize>(SEQ_LEN_RANGE))]
    pub seq_len: Option<usize>,
    /// default (embedded MNIST subset), mnist, fashion-mnist, cifar10[:DIR], synthetic[:N],
    /// hamlet (embedded text), shakespeare, text:FILE, or FILE.safetensors. Default: default,
    /// or hamlet for a GPT.
    #[arg(long)]
    pub dataset: Option<String>,
    /// A Hugging Face tokenizer.json that encodes a text data set (text:FILE, hamlet,
    /// shakespeare) into a language model's token ids, cut into --seq-len windows (first 90%
    /// train). Default with --model hf:DIR: DIR/tokenizer.json when the folder has one;
    /// otherwise a text trains on its characters.
    #[arg(long, value_name = "FILE")]
    pub tokenizer: Option<PathBuf>,
    /// mse or cross-entropy (default: cross-entropy for class labels, mse for targets).
    #[arg(long)]
    pub loss: Option<String>,
    /// sgd, adam or adamw (default adam; adamw for a GPT).
    #[arg(long)]
    pub optimizer: Option<String>,
    /// Learning rate (default 1e-3 for adam/adamw, 0.01 for sgd). With --lr-schedule cosine,
    /// the rate after warm-up.
    #[arg(long, allow_negative_numbers = true, value_parser = setting::<f32>(Setting::Lr))]
    pub lr: Option<f32>,
    /// SGD momentum (default 0).
    #[arg(long, allow_negative_numbers = true, value_parser = setting::<f32>(Setting::Momentum))]
    pub momentum: Option<f32>,
    /// SGD dampening (default 0).
    #[arg(long, allow_negative_numbers = true, value_parser = setting::<f32>(Setting::Dampening))]
    pub dampening: Option<f32>,
    /// SGD Nesterov momentum.
    #[arg(long)]
    pub nesterov: bool,
    /// Weight decay (default 0, or 0.01 for adamw as in PyTorch; 0.1 for a GPT, on its
    /// weights of two or more dimensions only, as nanoGPT's parameter groups).
    #[arg(long, allow_negative_numbers = true, value_parser = setting::<f32>(Setting::WeightDecay))]
    pub weight_decay: Option<f32>,
    /// Samples per micro-batch (32: one epoch of mlp on MNIST reaches 97%).
    #[arg(long, default_value_t = 32, allow_negative_numbers = true,
          value_parser = setting::<usize>(Setting::BatchSize))]
    pub batch_size: usize,
    /// Epochs to train (default 1 when --steps is not given).
    #[arg(long, allow_negative_numbers = true, value_parser = setting::<u64>(Setting::Epochs))]
    pub epochs: Option<u64>,
    /// Optimizer steps to train (stops early within an epoch).
    #[arg(long, allow_negative_numbers = true, value_parser = setting::<u64>(Setting::Steps))]
    pub steps: Option<u64>,
    /// Seed of the data order, dropout and initial weights (default 0; a resumed run keeps
    /// its checkpoint's).
    #[arg(long, allow_negative_numbers = true, value_parser = number::<u64>(SEED_RANGE))]
    pub seed: Option<u64>,
    /// Keep the data set's order instead of shuffling each epoch.
    #[arg(long)]
    pub no_shuffle: bool,
    /// Initial parameters (PyTorch names, e.g. from safetensors.torch.save_file(model.state_dict())).
    #[arg(long)]
    pub init: Option<PathBuf>,
    /// Clip gradients to this global L2 norm, after unscaling (default none; 1 for a GPT;
    /// 0: none).
    #[arg(long, allow_negative_numbers = true,
          value_parser = setting::<f32>(Setting::ClipGradNorm))]
    pub clip_grad_norm: Option<f32>,
    /// Cross-entropy's label smoothing, PyTorch's `CrossEntropyLoss(label_smoothing=...)`:
    /// each target is (1 − ε)·one-hot + ε/classes (default 0: none).
    #[arg(long, allow_negative_numbers = true,
          value_parser = setting::<f32>(Setting::LabelSmoothing))]
    pub label_smoothing: Option<f32>,
    /// Micro-batches per optimizer step.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true,
          value_parser = setting::<usize>(Setting::GradAccum))]
    pub grad_accum: usize,
    /// GradScaler initial scale (default 65536; a resumed run continues its checkpoint's).
    #[arg(long, allow_negative_numbers = true, value_parser = setting::<f32>(Setting::InitScale))]
    pub init_scale: Option<f32>,
    /// GradScaler growth interval (default 2000).
    #[arg(long, allow_negative_numbers = true,
          value_parser = setting::<u32>(Setting::GrowthInterval))]
    pub growth_interval: Option<u32>,
    /// GradScaler growth factor (default 2).
    #[arg(long, allow_negative_numbers = true,
          value_parser = setting::<f64>(Setting::GrowthFactor))]
    pub growth_factor: Option<f64>,
    /// GradScaler backoff factor (default 0.5).
    #[arg(long, allow_negative_numbers = true,
          value_parser = setting::<f64>(Setting::BackoffFactor))]
    pub backoff_factor: Option<f64>,
    /// Stop the run when the GradScaler skips this many steps in a row, or its scale falls
    /// below 2^-24 (default 50; 0: never). Skipped steps change no weight, but a run whose
    /// every step is skipped no longer trains.
    #[arg(long, default_value_t = webgpu_amp::train::MAX_SKIPPED_STEPS,
          allow_negative_numbers = true, value_parser = setting::<u64>(Setting::MaxSkippedSteps))]
    pub max_skipped_steps: u64,
    /// Turn the GradScaler on or off (default: on for amp-f16 only, as PyTorch recommends).
    #[arg(long)]
    pub scaler: Option<bool>,
    /// What a step the GradScaler skips does to BatchNorm's running statistics (every layer
    /// buffer): keep them as they were (the default), or update them with the skipped
    /// step's batch as PyTorch does (pytorch#88474; for parity runs).
    #[arg(long, default_value = "keep", value_parser = OnSkippedStep::NAMES)]
    pub buffers_on_skip: String,
    /// Classes a preset predicts on class labels (default 10, as the tutorials'
    /// `SimpleCNN(num_classes=10)`); a label outside 0..N is an error. A JSON model's last
    /// layer sets its own count; float targets set the output width from the data.
    #[arg(long, allow_negative_numbers = true, value_parser = number::<usize>(NUM_CLASSES_RANGE))]
    pub num_classes: Option<usize>,
    /// Skip validation at epoch ends.
    #[arg(long)]
    pub no_validate: bool,
    #[command(flatten)]
    pub augment: AugmentArgs,
    #[command(flatten)]
    pub doctor: DoctorArgs,
    #[command(flatten)]
    pub recipe: RecipeArgs,
    #[command(flatten)]
    pub attention: AttentionArgs,
    #[command(flatten)]
    pub device: DeviceArgs,
}

/// `--seed`: any 64-bit seed.
pub const SEED_RANGE: &str = "0 to 18446744073709551615";
/// `--num-classes`: at least one class, and no more than the largest batch has samples.
pub const NUM_CLASSES_RANGE: &str = "1 to 16777216";
const MAX_CLASSES: usize = 1 << 24;
/// f16's smallest (subnormal) value, 2^-24.
const SMALLEST_F16: f32 = 5.960_464_5e-8;

/// Data, model and initial parameters of a run, resolved from the flags.
pub struct RunInputs {
    pub split: Split,
    pub spec: ModelSpec,
    pub init: Vec<(String, Vec<f32>)>,
    pub loss: LossKind,
    /// The data set's name as resolved (`--dataset`, or the model's default).
    pub dataset: String,
}

/// Where a run writes checkpoints: `--save-every N` to `--save FILE` (`train` only).
pub type SaveFlags = (Option<u64>, Option<PathBuf>);

impl RunArgs {
    /// Checks the flags that need no data or GPU, so a typo fails at once: the run they
    /// describe, as far as it is known before the data (a GPT when the model or data says
    /// so; a schedule over at most `--steps`), through the run validation, then the flags
    /// only parsed here.
    pub fn validate_args(&self, precision: Precision, save: SaveFlags) -> Result<()> {
        let recipe = run_checks::recipe_hint(self.model.as_deref(), self.dataset.as_deref());
        let mut cfg = self.config(precision, LossKind::CrossEntropy, recipe, save)?;
        let lr = cfg.step.optimizer.lr();
        cfg.step.lr_schedule = self
            .recipe
            .schedule(recipe, lr, self.steps.unwrap_or(MAX_COUNT))?;
        cfg.validate_named(super::flag)?;
        if let Some(n) = self.num_classes
            && !(1..=MAX_CLASSES).contains(&n)
        {
            return Err(Error::InvalidArgument(format!(
                "--num-classes must be {NUM_CLASSES_RANGE}, got {n}"
            )));
        }
        if let Some(loss) = &self.loss {
            LossKind::parse(loss)?;
        }
        self.device.options()?;
        // A scale below f16's smallest value turns every loss under 1 into zero in the f16
        // backward: every gradient underflows and nothing trains, with no step skipped.
        let scaler = self.scaler.unwrap_or(precision.scaler_enabled_by_default());
        if let Some(scale) = self.init_scale
            && scaler
            && precision.low_dtype() == webgpu_amp::DType::F16
            && scale < SMALLEST_F16
        {
            outln!(
                "warning: --init-scale {scale:e} is below f16's smallest value ({SMALLEST_F16:e}): \
                 a loss under 1 scales to zero in the f16 backward and every gradient \
                 underflows; the default, 65536, is PyTorch's"
            )?;
        }
        Ok(())
    }

    /// The batch a run on `inputs` trains with: `--batch-size`, or the whole training set
    /// when that is smaller (as a PyTorch `DataLoader` would batch it).
    pub fn batch_used(&self, inputs: &RunInputs) -> usize {
        self.batch_size.min(inputs.split.train.n)
    }

    /// The note (one line) when `--batch-size` is larger than the training set, so the batch
    /// actually used is never a surprise. The progress wrapper prints it once the first step
    /// is back ([`super::progress::run_with_progress`]), so a run refused before it trains
    /// still ends with its one `error:` line.
    pub fn batch_note(&self, inputs: &RunInputs) -> Option<String> {
        let used = self.batch_used(inputs);
        (used < self.batch_size).then(|| {
            format!(
                "note: --batch-size {} is larger than the {used} training samples of {}; \
                 training with batch {used} (the whole set each step)",
                self.batch_size, inputs.dataset
            )
        })
    }

    /// The run of `precision` on `inputs`, writing checkpoints as `save` says: a GPT's unset
    /// recipe flags take nanoGPT's values ([`gpt`]), and the learning-rate schedule spans the
    /// run's step budget. Checked as [`RunArgs::validate_args`] checks it.
    pub fn run_config(
        &self,
        precision: Precision,
        inputs: &RunInputs,
        save: SaveFlags,
    ) -> Result<RunConfig> {
        // The recipe of the model's family (nanoGPT's for a GPT), where flags give none.
        let recipe = inputs
            .spec
            .family
            .as_ref()
            .and_then(|f| f.family().recipe());
        let mut cfg = self.config(precision, inputs.loss, recipe, save)?;
        cfg.validate_named(super::flag)?;
        cfg.batch_size = self.batch_used(inputs);
        let n = inputs.split.train.n;
        if cfg.planned_steps(n) == Some(0) {
            // Whole epochs of fewer batches than one step accumulates: nothing would train
            // (and the micro-batches would be dropped at the epoch's end).
            let batches = n.div_ceil(cfg.batch_size);
            return Err(Error::InvalidArgument(format!(
                "--grad-accum {} takes {} micro-batches per optimizer step, but {n} training \
                 samples of {} at --batch-size {} make {batches} per epoch: {} would train \
                 no step; lower --grad-accum or --batch-size, or give --steps N (steps then \
                 run across epochs)",
                cfg.step.grad_accum,
                cfg.step.grad_accum,
                inputs.dataset,
                cfg.batch_size,
                match cfg.epochs {
                    Some(e) => format!("--epochs {e}"),
                    None => "one epoch (the default)".into(),
                }
            )));
        }
        let budget = cfg.planned_steps(n).unwrap_or(1).min(MAX_COUNT);
        let lr = cfg.step.optimizer.lr();
        cfg.step.lr_schedule = self.recipe.schedule(recipe, lr, budget)?;
        cfg.validate_named(super::flag)?;
        Ok(cfg)
    }

    /// The run the flags describe, made with the run builder (not checked yet).
    fn config(
        &self,
        precision: Precision,
        loss: LossKind,
        recipe: Option<Recipe>,
        (save_every, save_path): SaveFlags,
    ) -> Result<RunConfig> {
        let scaler = self.scaler.unwrap_or(precision.scaler_enabled_by_default());
        // A family's recipe clips (a GPT at nanoGPT's norm) unless told otherwise (0: no
        // clipping).
        let clip = self.clip_grad_norm.or(recipe.map(|r| r.clip_grad_norm));
        let mut step = StepConfig::new(precision, loss, self.optimizer(recipe)?)
            .scaler(self.scaler_config(scaler))
            .clip_grad_norm(clip)
            .label_smoothing(self.label_smoothing.unwrap_or(0.0))
            .grad_accum(self.grad_accum)
            .numerics(self.doctor.every()?);
        step.buffers_on_skip = OnSkippedStep::parse(&self.buffers_on_skip)?;
        if step.buffers_on_skip != OnSkippedStep::Keep && !scaler {
            return Err(Error::InvalidArgument(format!(
                "--buffers-on-skip {} changes nothing without a GradScaler (no step is \
                 skipped): use it with --precision amp-f16, or --scaler true",
                self.buffers_on_skip
            )));
        }
        Ok(RunConfig::new(step, self.batch_size)
            .epochs(self.epochs)
            .steps(self.steps)
            .seed(self.seed.unwrap_or(0))
            .shuffle(!self.no_shuffle)
            .validate_each_epoch(!self.no_validate)
            .eval(self.recipe.eval_config())
            .max_skipped_steps(self.max_skipped_steps)
            .augment(self.augment.augment()?, self.augment.flip_tta())
            .save(save_every, save_path))
    }

    /// The GradScaler the flags ask for: PyTorch's defaults where they give none.
    fn scaler_config(&self, enabled: bool) -> ScalerConfig {
        let default = ScalerConfig::default();
        ScalerConfig {
            init_scale: self.init_scale.unwrap_or(default.init_scale),
            growth_factor: self.growth_factor.unwrap_or(default.growth_factor),
            backoff_factor: self.backoff_factor.unwrap_or(default.backoff_factor),
            growth_interval: self.growth_interval.unwrap_or(default.growth_interval),
            enabled,
        }
    }

    /// The run these flags describe under `precision` on the device they select, checked and
    /// prepared, without training: what `plan` and `kernels` plan one step of.
    pub fn planned(&self, precision: Precision) -> Result<(RunInputs, GpuContext, RunConfig)> {
        self.validate_args(precision, (None, None))?;
        let options = self.device.options()?;
        let (inputs, ctx) = self.prepare(&[precision], || GpuContext::new(&options))?;
        let cfg = self.run_config(precision, &inputs, (None, None))?;
        Ok((inputs, ctx, cfg))
    }

    /// Load the data, resolve the model and its loss, open the device with `open`, check
    /// that the model's parameters fit it under every one of `precisions`, and only then
    /// make the initial parameters (`--init` or the model's own initialisation).
    pub fn prepare(
        &self,
        precisions: &[Precision],
        open: impl FnOnce() -> Result<GpuContext>,
    ) -> Result<(RunInputs, GpuContext)> {
        self.prepare_resumed(precisions, None, open)
    }

    /// [`Self::prepare`] for a run that resumes a checkpoint whose model description is
    /// `saved_model` (its metadata `model`): without `--model`, that is the model.
    pub fn prepare_resumed(
        &self,
        precisions: &[Precision],
        saved_model: Option<&str>,
        open: impl FnOnce() -> Result<GpuContext>,
    ) -> Result<(RunInputs, GpuContext)> {
        let ModelAndData {
            split,
            spec,
            loss,
            what,
            dataset,
        } = resolve(&Wanted {
            model: self.model.as_deref(),
            dataset: self.dataset.as_deref(),
            loss: self.loss.as_deref(),
            num_classes: self.num_classes,
            seq_len: self.seq_len,
            tokenizer: self.tokenizer.as_deref(),
            saved_model,
        })?;
        let spec = self
            .doctor
            .apply(spec.with_attention(self.attention.kernel()?))?;
        let ctx = open()?;
        super::note_unused_table(&ctx)?;
        let optimizer = self.optimizer(spec.family.as_ref().and_then(|f| f.family().recipe()))?;
        for &precision in precisions {
            check_params_fit(&ctx, &spec, &what, precision, &optimizer)?;
        }
        let hf = (self.model.as_deref()).and_then(|m| m.strip_prefix(super::resolve::HF_PREFIX));
        let init = match (&self.init, hf) {
            (Some(path), _) => {
                Checkpoint::load(path)?.params_for_model(&spec, &path.display().to_string())?
            }
            (None, Some(dir)) => Checkpoint::from_hf_folder(std::path::Path::new(dir))?
                .params_for_model(&spec, dir)?,
            (None, None) => spec.init_params(self.seed.unwrap_or(0)),
        };
        let inputs = RunInputs {
            split,
            spec,
            init,
            loss,
            dataset,
        };
        Ok((inputs, ctx))
    }

    /// The optimizer from the flags (not checked yet); unset flags take the model family's
    /// recipe (nanoGPT's for a GPT), else PyTorch's defaults.
    pub fn optimizer(&self, recipe: Option<Recipe>) -> Result<OptimizerConfig> {
        let default = recipe.map_or("adam", |r| r.optimizer);
        let adam_lr = recipe.map_or(1e-3, |r| r.lr);
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
                *momentum = self.momentum.unwrap_or(0.0);
                *dampening = self.dampening.unwrap_or(0.0);
                *nesterov = self.nesterov;
                *weight_decay = self.weight_decay.unwrap_or(0.0);
            }
            OptimizerConfig::Adam { weight_decay, .. }
            | OptimizerConfig::AdamW { weight_decay, .. } => {
                if let Some(r) = recipe {
                    *weight_decay = r.weight_decay;
                }
                if let Some(wd) = self.weight_decay {
                    *weight_decay = wd;
                }
            }
        }
        self.recipe.apply_betas(recipe, &mut cfg);
        let given = OptimizerFlags {
            momentum: self.momentum.is_some(),
            dampening: self.dampening.is_some(),
            nesterov: self.nesterov,
            beta1: self.recipe.beta1.is_some(),
            beta2: self.recipe.beta2.is_some(),
            eps: self.recipe.eps.is_some(),
        };
        run_checks::no_ignored_optimizer_flags(&given, &cfg)?;
        Ok(cfg)
    }

    /// The flags a `--resume` checkpoint would override, as given.
    pub fn resume_flags(&self) -> ResumeFlags {
        ResumeFlags {
            seed: self.seed,
            init_scale: self.init_scale,
            growth_factor: self.growth_factor,
            backoff_factor: self.backoff_factor,
            growth_interval: self.growth_interval,
        }
    }
}
