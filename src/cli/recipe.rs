//! The training-recipe flags of `train` and `compare` (Adam's betas and eps, the learning-rate
//! schedule, periodic loss estimates), and where the user gave no flag the defaults of the
//! model family's recipe (`nn::family::Recipe`: a GPT's is nanoGPT's
//! `config/train_shakespeare_char.py`).

use clap::Args;
use webgpu_amp::nn::ModelSpec;
use webgpu_amp::nn::family::{COSINE_MIN_LR_DIVISOR, COSINE_WARMUP_DIVISOR, Recipe};
use webgpu_amp::optim::{LrSchedule, OptimizerConfig, widen};
use webgpu_amp::train::{EVAL_BATCHES, EvalConfig, Setting};
use webgpu_amp::{Error, Result};

use super::numbers::setting;

#[derive(Args, Clone, Debug, Default)]
pub struct RecipeArgs {
    /// Adam/AdamW beta1 (default 0.9).
    #[arg(long, allow_negative_numbers = true, value_parser = setting::<f32>(Setting::Beta1))]
    pub beta1: Option<f32>,
    /// Adam/AdamW beta2 (default 0.999; 0.99 for a GPT).
    #[arg(long, allow_negative_numbers = true, value_parser = setting::<f32>(Setting::Beta2))]
    pub beta2: Option<f32>,
    /// Adam/AdamW eps (default 1e-8).
    #[arg(long, allow_negative_numbers = true, value_parser = setting::<f32>(Setting::Eps))]
    pub eps: Option<f32>,
    /// constant or cosine (nanoGPT's warm-up and cosine decay). Default: constant; cosine
    /// for a GPT.
    #[arg(long)]
    pub lr_schedule: Option<String>,
    /// Cosine: steps of linear warm-up (default: the step budget / 50, rounded down, as
    /// nanoGPT's 100 of 5000).
    #[arg(long, allow_negative_numbers = true,
          value_parser = setting::<u64>(Setting::WarmupSteps))]
    pub warmup_steps: Option<u64>,
    /// Cosine: the learning rate the decay ends at (default --lr / 10; at most --lr).
    #[arg(long, allow_negative_numbers = true, value_parser = setting::<f32>(Setting::MinLr))]
    pub min_lr: Option<f32>,
    /// Cosine: the step where the decay reaches --min-lr (default: the run's step budget,
    /// --steps or the steps of --epochs).
    #[arg(long, allow_negative_numbers = true,
          value_parser = setting::<u64>(Setting::LrDecaySteps))]
    pub lr_decay_steps: Option<u64>,
    /// Estimate the training and validation loss every N optimizer steps (nanoGPT's
    /// estimate_loss: random batches, dropout off).
    #[arg(long, allow_negative_numbers = true,
          value_parser = setting::<u64>(Setting::EvalEvery))]
    pub eval_every: Option<u64>,
    /// Random batches per split of each estimate, and of the epoch-end and final validation
    /// of text and token data (1 to 65536).
    #[arg(long, default_value_t = EVAL_BATCHES, allow_negative_numbers = true,
          value_parser = setting::<usize>(Setting::EvalBatches))]
    pub eval_batches: usize,
    /// Freeze these parameters (PyTorch's `requires_grad_(False)`: no update, no weight
    /// decay, no optimizer state; still saved), by their `state_dict` names; `*` matches any
    /// run of characters, `?` one (`--freeze '*.norm?.weight'`). Comma-separated.
    #[arg(long, value_delimiter = ',', value_name = "NAME")]
    pub freeze: Vec<String>,
}

fn bad(message: String) -> Error {
    Error::InvalidArgument(message)
}

impl RecipeArgs {
    /// Whether the schedule is cosine (`--lr-schedule`, else cosine for a GPT).
    fn schedule_kind(&self, recipe: Option<Recipe>) -> Result<bool> {
        match self.lr_schedule.as_deref() {
            None => Ok(recipe.is_some()),
            Some("constant") => Ok(false),
            Some("cosine") => Ok(true),
            Some(other) => Err(bad(format!(
                "unknown --lr-schedule `{other}` (expected constant or cosine)"
            ))),
        }
    }

    /// The schedule for a run of `budget` optimizer steps whose optimizer starts at `lr`
    /// (checked with the run: [`webgpu_amp::train::StepConfig::validate_named`]).
    pub fn schedule(&self, recipe: Option<Recipe>, lr: f32, budget: u64) -> Result<LrSchedule> {
        if !self.schedule_kind(recipe)? {
            if let Some(flag) = [
                (self.warmup_steps.is_some(), "--warmup-steps"),
                (self.min_lr.is_some(), "--min-lr"),
                (self.lr_decay_steps.is_some(), "--lr-decay-steps"),
            ]
            .iter()
            .find_map(|&(given, flag)| given.then_some(flag))
            {
                return Err(bad(format!("{flag} needs --lr-schedule cosine")));
            }
            return Ok(LrSchedule::Constant);
        }
        // The run builder checks these against each other and the learning rate. A cosine
        // schedule asked for without a family recipe takes nanoGPT's proportions.
        let (warmup_divisor, min_lr_divisor) = recipe
            .map_or((COSINE_WARMUP_DIVISOR, COSINE_MIN_LR_DIVISOR), |r| {
                (r.warmup_divisor, r.min_lr_divisor)
            });
        let decay_steps = self.lr_decay_steps.unwrap_or(budget);
        Ok(LrSchedule::Cosine {
            warmup_steps: self.warmup_steps.unwrap_or(decay_steps / warmup_divisor),
            decay_steps,
            min_lr: self.min_lr.unwrap_or((widen(lr) / min_lr_divisor) as f32),
        })
    }

    /// Apply `--beta1`, `--beta2` and `--eps` (and a GPT's beta2) to Adam or AdamW.
    pub fn apply_betas(&self, recipe: Option<Recipe>, config: &mut OptimizerConfig) {
        if let OptimizerConfig::Adam {
            beta1, beta2, eps, ..
        }
        | OptimizerConfig::AdamW {
            beta1, beta2, eps, ..
        } = config
        {
            if let Some(r) = recipe {
                *beta2 = r.beta2;
            }
            *beta1 = self.beta1.unwrap_or(*beta1);
            *beta2 = self.beta2.unwrap_or(*beta2);
            *eps = self.eps.unwrap_or(*eps);
        }
    }

    /// `spec` with the `--freeze` parameters frozen too (an unknown name lists the nearest).
    pub fn freeze(&self, spec: ModelSpec) -> Result<ModelSpec> {
        if self.freeze.is_empty() {
            return Ok(spec);
        }
        spec.freeze(&self.freeze).map_err(|e| match e {
            Error::InvalidArgument(m) => {
                bad(format!("--freeze: {}", m.trim_start_matches("freeze: ")))
            }
            other => other,
        })
    }

    pub fn eval_config(&self) -> EvalConfig {
        EvalConfig {
            every: self.eval_every,
            batches: self.eval_batches,
        }
    }
}
