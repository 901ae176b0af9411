//! Why scaling matters: a histogram of log2|gradient| of one layer, computed on the GPU
//! and read back asynchronously, against f16's limits: subnormal below 2^-14, flushed to
//! zero below 2^-24, overflow above 65504. Unscaled, and as scaled by the current scale:
//! the picture from the mixed-precision paper (Micikevicius et al., 2018), live.

use eframe::egui;
use egui_plot::{Bar, BarChart, Legend, LineStyle, Plot, VLine};

use super::session::HistogramSnapshot;
use super::{App, mode_color};
use crate::ops::histogram::Log2Histogram;

/// log2 of f16's largest finite value, 65504.
const F16_MAX_LOG2: f64 = 15.999_295;

pub fn show(ui: &mut egui::Ui, app: &mut App) {
    let runs = app.session.runs();
    if runs.is_empty() {
        ui.label("Start a run to see its gradients.");
        return;
    }
    ui.horizontal(|ui| {
        let name = ui.label("mode").id;
        let shown = app.session.histogram().map(|h| h.precision);
        let current = shown.map_or("", |p| p.name());
        egui::ComboBox::from_id_salt("hist_mode")
            .selected_text(current)
            .show_ui(ui, |ui| {
                for (i, r) in runs.iter().enumerate() {
                    if ui
                        .selectable_label(shown == Some(r.precision), r.precision.name())
                        .clicked()
                    {
                        app.hist_mode = Some(i);
                        app.hist_param = None;
                    }
                }
            })
            .response
            .labelled_by(name);
        let name = ui.label("parameter").id;
        let entries = runs
            .iter()
            .find(|r| Some(r.precision) == shown)
            .map(|r| r.trainer().store.layout.entries.clone())
            .unwrap_or_default();
        egui::ComboBox::from_id_salt("hist_param")
            .selected_text(app.hist_param.clone().unwrap_or_default())
            .show_ui(ui, |ui| {
                for e in &entries {
                    ui.selectable_value(
                        &mut app.hist_param,
                        Some(e.name.clone()),
                        format!("{} {:?}", e.name, e.shape),
                    );
                }
            })
            .response
            .labelled_by(name);
    });
    ui.weak(
        "Gradients sit in the flat f32 buffer unscaled once a step is done (unscale runs \
         before the optimizer), so the GPU histograms them as they are and multiplied by the \
         scaler's current scale (in f32): the values the f16 backward holds at that scale.",
    );
    match app.session.histogram() {
        Some(snap) => histogram(ui, snap),
        None => {
            ui.label("Waiting for the first histogram…");
        }
    }
}

fn histogram(ui: &mut egui::Ui, snap: &HistogramSnapshot) {
    ui.label(format!(
        "{} · {} · after step {} · scale {}",
        snap.precision, snap.param, snap.step, snap.scale
    ));
    let unscaled = &snap.hist.unscaled;
    let scaled = &snap.hist.scaled;
    Plot::new("histogram")
        .height(300.0)
        .legend(Legend::default())
        .allow_scroll(false)
        .x_axis_formatter(|m, _| format!("2^{}", m.value.round()))
        .x_axis_label("log2 |gradient|")
        .y_axis_label("values")
        .show(ui, |p| {
            p.add(
                BarChart::new("unscaled", bars(unscaled, -0.2))
                    .color(egui::Color32::from_rgb(120, 120, 200))
                    .width(0.4),
            );
            p.add(
                BarChart::new("scaled × scale", bars(scaled, 0.2))
                    .color(mode_color(snap.precision))
                    .width(0.4),
            );
            let limit = |name: &str, x: f64, color: egui::Color32| {
                VLine::new(name, x)
                    .color(color)
                    .style(LineStyle::dashed_loose())
                    .width(1.5)
            };
            p.vline(limit(
                "f16 flush to zero (2^-24)",
                -24.0,
                egui::Color32::RED,
            ));
            p.vline(limit(
                "f16 subnormal below 2^-14",
                -14.0,
                egui::Color32::from_rgb(230, 180, 0),
            ));
            p.vline(limit(
                "f16 overflow above 65504",
                F16_MAX_LOG2,
                egui::Color32::RED,
            ));
        });
    egui::Grid::new("hist_stats").striped(true).show(ui, |ui| {
        ui.strong("");
        ui.strong("values");
        ui.strong("zero");
        ui.strong("|g| < 2^-24 (lost in f16)");
        ui.strong("2^-24 ≤ |g| < 2^-14 (subnormal)");
        ui.strong("|g| ≥ 2^16 (overflow)");
        ui.strong("inf/NaN");
        ui.end_row();
        for (name, h) in [("unscaled", unscaled), ("scaled", scaled)] {
            let total = h.total().max(1) as f64;
            let pct = |n: u64| format!("{:.2}%", 100.0 * n as f64 / total);
            let tiny = h.count_below_binade(-24);
            let subnormal = h.count_below_binade(-14) - tiny;
            ui.label(name);
            ui.label(h.total().to_string());
            ui.label(pct(h.zero as u64));
            ui.label(pct(tiny));
            ui.label(pct(subnormal));
            ui.label(pct(h.count_from_binade(16)));
            ui.label(pct(h.non_finite as u64));
            ui.end_row();
        }
    });
}

/// One bar per binade, at x = binade + offset.
fn bars(h: &Log2Histogram, offset: f64) -> Vec<Bar> {
    h.bins
        .iter()
        .enumerate()
        .filter(|(_, c)| **c > 0)
        .map(|(k, &c)| Bar::new((h.lo + k as i32) as f64 + 0.5 + offset, c as f64))
        .collect()
}
