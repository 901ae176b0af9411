//! Sampled text: what each GPT run writes as it trains, the precision modes side by side
//! (f32 next to amp-f16). Every mode samples with the same seed from the same prompt, so the
//! texts differ only where the runs' weights do.

use eframe::egui;

use super::session::ModeRun;
use super::{App, mode_color};
use crate::amp::policy::Precision;

/// The latest sample of each run: (mode, (step, text)); `None` for a run with none yet.
pub fn latest(runs: &[ModeRun]) -> Vec<(Precision, Option<(u64, String)>)> {
    runs.iter()
        .map(|r| (r.precision, r.samples.last().cloned()))
        .collect()
}

pub fn show(ui: &mut egui::Ui, app: &mut App) {
    let runs = app.session.runs();
    if runs.is_empty() || runs.iter().all(|r| r.trainer().spec.tokens().is_none()) {
        ui.label(
            "Sampled text needs a language model: choose gpt-tiny, gpt-char, llama-tiny or a \
             Hugging Face folder (they train on the hamlet text) and start a run.",
        );
        return;
    }
    ui.label(format!(
        "Text sampled from each run (temperature {}, {} tokens after a newline, decoded by the \
         folder's tokenizer for a Hugging Face folder) every {} steps and at the end, with the \
         same seed for every mode.",
        super::probes::sample::TEMPERATURE,
        super::probes::sample::SAMPLE_TOKENS,
        app.session.config.sample_every
    ));
    let latest = latest(runs);
    ui.columns(latest.len(), |cols| {
        for (col, (mode, sample)) in cols.iter_mut().zip(latest) {
            col.colored_label(mode_color(mode), egui::RichText::new(mode.name()).strong());
            match sample {
                Some((step, text)) => {
                    col.weak(format!("step {step}"));
                    col.label(egui::RichText::new(text).monospace());
                }
                None => {
                    col.weak("no sample yet");
                }
            }
        }
    });
}
