//! The native app's window closed mid-run: it stops the way `train` does on SIGINT. Every
//! mode's run finishes the steps it has in flight (a mode's step is one micro-batch) and is
//! saved, with its moments file and scaler state, as `interrupted-<mode>.safetensors` in the
//! working directory (the app has no save path of its own), and one line says where each run
//! stopped and the `train --resume` command that continues it: the app's run is `train`
//! with the flags [`train_flags`] spells out (`tests/app.rs` shows the two train the same
//! steps bit for bit). The browser's page cannot write files: closing its tab saves nothing.

use std::path::Path;

use super::session::{Session, Status};
use crate::error::Result;
use crate::optim::LrSchedule;
use crate::train::RunConfig;

impl Session {
    /// Whether closing now would cut a run short (running or paused, not finished).
    pub fn mid_run(&self) -> bool {
        matches!(self.status(), Status::Running | Status::Paused) && !self.runs().is_empty()
    }

    /// Save every mode's run in `dir` (see the module docs) when the session is mid-run;
    /// the one line to print, with `program` as the command's first word. `None` when there
    /// was nothing to save.
    pub fn save_interrupted(&mut self, dir: &Path, program: &str) -> Result<Option<String>> {
        if !self.mid_run() {
            return Ok(None);
        }
        self.stop();
        let (model, dataset) = (&self.config.model, &self.config.dataset);
        let mut saved = Vec::new();
        for mode in &mut self.runs {
            let path = dir.join(format!("interrupted-{}.safetensors", mode.precision.name()));
            // Waits for the steps in flight, reads the state back, writes atomically.
            mode.run.save(&self.ctx, &path)?;
            let run = &mode.run;
            saved.push((
                run.progress.step,
                path,
                train_flags(model, dataset, &run.config),
            ));
        }
        let stopped: Vec<String> = saved
            .iter()
            .map(|(step, path, _)| format!("step {step} in {}", file_name(path)))
            .collect();
        let commands: Vec<String> = saved
            .iter()
            .map(|(_, path, flags)| {
                let mut words = vec![program.to_string(), "train".into()];
                words.extend(flags.iter().cloned());
                words.extend(["--resume".into(), path.display().to_string()]);
                crate::interrupt::command_line(&words)
            })
            .collect();
        Ok(Some(format!(
            "the window closed mid-run: saved {}; resume with: {}",
            stopped.join(", "),
            commands.join(" ; ")
        )))
    }
}

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into(),
    )
}

/// The `train` flags of the run `config` of `model` on `dataset`, every setting the app
/// chooses spelled out (a GPT's CLI defaults, nanoGPT's recipe, are not the app's).
pub fn train_flags(model: &str, dataset: &str, config: &RunConfig) -> Vec<String> {
    let step = &config.step;
    let mut flags: Vec<(&str, String)> = vec![
        ("--model", model.into()),
        ("--dataset", dataset.into()),
        ("--precision", step.precision.name().into()),
        ("--batch-size", config.batch_size.to_string()),
        ("--seed", config.seed.to_string()),
        ("--optimizer", step.optimizer.name().to_lowercase()),
        ("--lr", step.optimizer.lr().to_string()),
    ];
    flags.extend(config.steps.map(|s| ("--steps", s.to_string())));
    flags.extend(config.epochs.map(|e| ("--epochs", e.to_string())));
    let mut switches = Vec::new();
    if let Some(s) = step.optimizer.sgd_settings() {
        flags.extend([
            ("--momentum", s.momentum.to_string()),
            ("--dampening", s.dampening.to_string()),
            ("--weight-decay", s.weight_decay.to_string()),
        ]);
        switches.extend(s.nesterov.then_some("--nesterov"));
    }
    if let Some(a) = step.optimizer.adam_settings() {
        flags.extend([
            ("--beta1", a.beta1.to_string()),
            ("--beta2", a.beta2.to_string()),
            ("--eps", a.eps.to_string()),
            ("--weight-decay", a.weight_decay.to_string()),
        ]);
    }
    let scaler = &step.scaler;
    flags.push(("--scaler", scaler.enabled.to_string()));
    // A resumed run continues the checkpoint's GradScaler, so `train` refuses --init-scale
    // beside --resume when the scaler is on; the other scaler flags equal the checkpoint's.
    if !scaler.enabled {
        flags.push(("--init-scale", scaler.init_scale.to_string()));
    }
    flags.extend([
        ("--growth-factor", scaler.growth_factor.to_string()),
        ("--backoff-factor", scaler.backoff_factor.to_string()),
        ("--growth-interval", scaler.growth_interval.to_string()),
        (
            "--clip-grad-norm",
            step.clip_norm().unwrap_or(0.0).to_string(),
        ),
        ("--grad-accum", step.grad_accum.to_string()),
    ]);
    // The app trains at a constant rate; a GPT's CLI default is cosine.
    if step.lr_schedule == LrSchedule::Constant {
        flags.push(("--lr-schedule", "constant".into()));
    }
    switches.extend((!config.shuffle).then_some("--no-shuffle"));
    switches.extend((!config.validate).then_some("--no-validate"));
    flags
        .into_iter()
        .flat_map(|(flag, value)| [flag.to_string(), value])
        .chain(switches.into_iter().map(String::from))
        .collect()
}
