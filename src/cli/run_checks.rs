//! Checks of `train`'s and `compare`'s flags against each other and against what a run
//! continues from, so no flag is silently dropped: flags the run's optimizer has no use
//! for, and flags a `--resume` checkpoint would override. Each is refused with one line
//! that names the flag and what to do instead.

use std::io::Read;
use std::path::Path;

use webgpu_amp::amp::scale_text;
use webgpu_amp::data::{DataSource, Dataset};
use webgpu_amp::nn::family::Recipe;
use webgpu_amp::optim::OptimizerConfig;
use webgpu_amp::train::checkpoint::{Checkpoint, DataOrder};
use webgpu_amp::train::{MAX_BATCH_SIZE, MAX_GRAD_ACCUM, ModelChoice, RunConfig};
use webgpu_amp::{Error, Result};

use super::resolve::read_model_file;

/// The flags [`no_ignored_optimizer_flags`] checks: which optimizer settings were given.
pub struct OptimizerFlags {
    pub momentum: bool,
    pub dampening: bool,
    pub nesterov: bool,
    pub beta1: bool,
    pub beta2: bool,
    pub eps: bool,
}

/// The flags a resumed checkpoint would override, as given (`None`: not given).
pub struct ResumeFlags {
    pub seed: Option<u64>,
    pub init_scale: Option<f32>,
    pub growth_factor: Option<f64>,
    pub backoff_factor: Option<f64>,
    pub growth_interval: Option<u32>,
}

/// The family recipe the run trains with, as far as the flags say before the data is
/// loaded: a family's preset or JSON file (a GPT's: nanoGPT's), or no `--model` and text or
/// token data (the default language model's). `None` for a model of no family, and when
/// that cannot be known yet (an unreadable model or data file: its error comes with the data).
pub fn recipe_hint(model: Option<&str>, dataset: Option<&str>) -> Option<Recipe> {
    let choice = match model {
        Some(m) if m.ends_with(".json") => ModelChoice::Json(read_model_file(m).ok()?),
        Some(m) => ModelChoice::Preset(m.into()),
        None => {
            let tokens = match dataset.map(str::parse::<DataSource>) {
                Some(Ok(DataSource::Custom(path))) => has_token_inputs(&path)?,
                Some(Ok(source)) => source.is_text(),
                // The default MNIST set; a bad name is reported with the data.
                None | Some(Err(_)) => false,
            };
            if !tokens {
                return None;
            }
            ModelChoice::default_for_text()
        }
    };
    choice.family()?.recipe()
}

/// Whether a safetensors data file's `x` holds integers (token ids, so a GPT trains on it),
/// read from its header alone.
fn has_token_inputs(path: &Path) -> Option<bool> {
    // safetensors refuses headers over 100 MB.
    const MAX_HEADER: u64 = 100_000_000;
    let mut file = std::fs::File::open(path).ok()?;
    let mut len = [0u8; 8];
    file.read_exact(&mut len).ok()?;
    let len = u64::from_le_bytes(len);
    if len > MAX_HEADER {
        return None;
    }
    let mut header = Vec::new();
    file.take(len).read_to_end(&mut header).ok()?;
    let header: serde_json::Value = serde_json::from_slice(&header).ok()?;
    let dtype = header.get("x")?.get("dtype")?.as_str()?;
    Some(dtype.starts_with('I') || dtype.starts_with('U'))
}

/// Refuse flags of another optimizer than `optimizer`: SGD's momentum, dampening and
/// Nesterov with Adam or AdamW, and Adam's betas and eps with SGD (PyTorch's constructors
/// would refuse an unknown keyword the same way).
pub fn no_ignored_optimizer_flags(
    given: &OptimizerFlags,
    optimizer: &OptimizerConfig,
) -> Result<()> {
    let sgd = matches!(optimizer, OptimizerConfig::Sgd { .. });
    let flags = [
        (!sgd && given.momentum, "--momentum", "sgd"),
        (!sgd && given.dampening, "--dampening", "sgd"),
        (!sgd && given.nesterov, "--nesterov", "sgd"),
        (sgd && given.beta1, "--beta1", "adam or adamw"),
        (sgd && given.beta2, "--beta2", "adam or adamw"),
        (sgd && given.eps, "--eps", "adam or adamw"),
    ];
    match flags.iter().find(|(given, _, _)| *given) {
        Some((_, flag, owner)) => Err(Error::InvalidArgument(format!(
            "{flag} is a setting of --optimizer {owner}, but this run's optimizer is {} (it \
             would be ignored)",
            optimizer.name()
        ))),
        None => Ok(()),
    }
}

/// Refuse `--init` beside `--resume`: the checkpoint's weights would replace the file's.
pub fn no_init_with_resume(init: Option<&Path>, resume: Option<&Path>) -> Result<()> {
    match (init, resume) {
        (Some(init), Some(resume)) => Err(Error::InvalidArgument(format!(
            "--init {} and --resume {}: a resumed run continues the checkpoint's weights, so \
             --init would be ignored; give one of them",
            init.display(),
            resume.display()
        ))),
        _ => Ok(()),
    }
}

/// Refuse flags that resuming from `ck` (the file `what`) would override: a `--seed` other
/// than the checkpoint's (its data order and dropout continue), and the GradScaler's
/// settings when the run restores the checkpoint's scaler (`scaler_on`), as PyTorch's
/// `GradScaler.load_state_dict` replaces them.
pub fn no_flags_resume_overrides(
    args: &ResumeFlags,
    ck: &Checkpoint,
    scaler_on: bool,
    what: &str,
) -> Result<()> {
    let refuse = |m: String| Err(Error::InvalidArgument(format!("--resume {what}: {m}")));
    let saved = ck.progress.seed;
    if let Some(seed) = args.seed.filter(|&s| s != saved) {
        return refuse(format!(
            "--seed {seed}, but the run continues the checkpoint's seed {saved} (its data \
             order and dropout); leave --seed out or give {saved}"
        ));
    }
    let Some(s) = ck.scaler.as_ref().filter(|s| scaler_on && !s.is_empty()) else {
        return Ok(());
    };
    if let Some(scale) = args.init_scale {
        return refuse(format!(
            "--init-scale {} is the scale a run starts with, but a resumed run continues \
             the checkpoint's GradScaler (scale {}); leave --init-scale out",
            scale_text(scale),
            s.scale.map_or("unknown".into(), scale_text)
        ));
    }
    let differs = [
        (
            "--growth-factor",
            args.growth_factor,
            s.growth_factor,
            "growth_factor",
        ),
        (
            "--backoff-factor",
            args.backoff_factor,
            s.backoff_factor,
            "backoff_factor",
        ),
        (
            "--growth-interval",
            args.growth_interval.map(f64::from),
            s.growth_interval.map(f64::from),
            "growth_interval",
        ),
    ];
    for (flag, given, saved, key) in differs {
        if let (Some(given), Some(saved)) = (given, saved)
            && given != saved
        {
            return refuse(format!(
                "{flag} {given}, but the checkpoint's GradScaler has {key} {saved}, which \
                 resuming restores (as PyTorch's load_state_dict); leave {flag} out or give \
                 {saved}"
            ));
        }
    }
    Ok(())
}
/// A resume must continue where the checkpoint's run stood: cut the same data the same way
/// (batch size, gradient accumulation, shuffling and the data set, by its contents, move the
/// position that `progress` counts, as `--seed` does), keep the same layers in f32, and have
/// steps left to take (a run resumed at or past its limit would rewrite the checkpoint having
/// trained nothing). `keep_f32`: the layers this run keeps in f32; `what` is the checkpoint's
/// path. Advice names only values the flags take: an edited file's `--batch-size 0` is said
/// to be the file's, not offered.
pub fn resume_continues(
    ck: &Checkpoint,
    cfg: &RunConfig,
    train: &Dataset,
    keep_f32: &[String],
    what: &str,
) -> Result<()> {
    let refuse = |m: String| Err(Error::InvalidArgument(format!("--resume {what}: {m}")));
    let p = ck.progress;
    if let Some(saved) = &ck.data {
        let now = DataOrder::of(cfg, train, keep_f32);
        let moved = format!(
            "batch {} of epoch {} would be other samples",
            p.batch_in_epoch, p.epoch
        );
        for (flag, was, is, max) in [
            (
                "--batch-size",
                saved.batch_size,
                now.batch_size,
                MAX_BATCH_SIZE as u64,
            ),
            (
                "--grad-accum",
                saved.grad_accum,
                now.grad_accum,
                MAX_GRAD_ACCUM as u64,
            ),
        ] {
            if was == is {
                continue;
            }
            if !(1..=max).contains(&was) {
                return refuse(format!(
                    "the checkpoint's metadata says its run used {flag} {was}, which no run \
                     can (1 to {max}): the file was edited or damaged; start a new run \
                     without --resume"
                ));
            }
            return refuse(format!(
                "{flag} {is}, but the checkpoint's run used {flag} {was}: {moved}; give \
                 {flag} {was}"
            ));
        }
        if saved.shuffle != now.shuffle {
            let (given, fix) = if now.shuffle {
                ("shuffled batches", "add --no-shuffle")
            } else {
                ("--no-shuffle", "leave --no-shuffle out")
            };
            return refuse(format!(
                "{given}, but the checkpoint's run {} its data: {moved}; {fix}",
                if saved.shuffle {
                    "shuffled"
                } else {
                    "did not shuffle"
                }
            ));
        }
        if saved.samples != now.samples {
            return refuse(format!(
                "the data has {} training samples ({}), but the checkpoint's run had {} ({}): \
                 {moved}; resume on the same data set",
                now.samples, now.dataset, saved.samples, saved.dataset
            ));
        }
        if let (Some(was), Some(is)) = (&saved.content, &now.content)
            && was != is
        {
            return refuse(format!(
                "the data read now ({}, {} samples, {is}) is not what the checkpoint's run read \
                 ({}, {was}): the same count of other samples, so {moved}; resume on the same \
                 data",
                now.dataset, now.samples, saved.dataset
            ));
        }
        if let (Some(was), Some(is)) = (&saved.keep_f32, &now.keep_f32)
            && was != is
        {
            let flag = |names: &Vec<String>| match names.is_empty() {
                true => "no --keep-f32".to_string(),
                false => format!("--keep-f32 {}", names.join(",")),
            };
            return refuse(format!(
                "{}, but the checkpoint's run kept {} in f32 ({}): from here the same steps \
                 would compute other numbers; give {} (as the run did)",
                flag(is),
                if was.is_empty() {
                    "no layer".to_string()
                } else {
                    was.join(", ")
                },
                flag(was),
                flag(was)
            ));
        }
    }
    let epochs = match (cfg.epochs, cfg.steps) {
        (Some(e), _) => Some(e),
        (None, None) => Some(1),
        (None, Some(_)) => None,
    };
    if let Some(steps) = cfg.steps.filter(|&s| p.step >= s) {
        return refuse(format!(
            "the checkpoint is at step {}, at or past --steps {steps}: nothing would train; \
             give --steps above {}",
            p.step, p.step
        ));
    }
    if let Some(e) = epochs.filter(|&e| p.epoch >= e) {
        let limit = match cfg.epochs {
            Some(_) => format!("--epochs {e}"),
            None => "the one epoch a run without --steps or --epochs trains".into(),
        };
        return refuse(format!(
            "the checkpoint has finished epoch {}, at or past {limit}: nothing would train; \
             give --epochs above {} or --steps above {}",
            p.epoch, p.epoch, p.step
        ));
    }
    Ok(())
}
