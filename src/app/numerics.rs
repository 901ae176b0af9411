//! Numerics (the AMP doctor): per mode, a heat map of layers (down the side) by counted
//! steps (along the bottom), each cell coloured by the share of the layer's values that
//! overflow (red; inf/NaN solid red) and underflow (blue) the low dtype (clean: dark
//! green; not counted: grey), skipped steps
//! marked above their column; the modes side by side. Clicking a layer shows its exponent
//! histogram (latest counted step) against f16's range, as the whole-model histogram of
//! "Why scaling matters" does. The switch in the setup panel turns the counting on.

use eframe::egui;
use egui_plot::{Bar, BarChart, Legend, LineStyle, Plot, VLine};

use super::config::SessionConfig;
use super::numerics_history::NumericsHistory;
use super::{App, mode_color};
use crate::amp::policy::Precision;
use crate::nn::probes::ProbeTensor;

/// The newest counted steps a heat map shows.
const MAX_COLUMNS: usize = 160;
const ROW_HEIGHT: f32 = 14.0;
const LABEL_WIDTH: f32 = 150.0;
/// log2 of f16's largest finite value, 65504.
const F16_MAX_LOG2: f64 = 15.999_295;

/// The setup panel's switch: count numerics every N steps (off by default: no cost).
pub fn switch(ui: &mut egui::Ui, config: &mut SessionConfig) {
    ui.heading("AMP doctor");
    let mut on = config.numerics.is_some();
    ui.checkbox(&mut on, "count per-layer numerics (AMP doctor)");
    let mut every = config.numerics.unwrap_or(1);
    ui.add_enabled_ui(on, |ui| {
        ui.horizontal(|ui| {
            let name = ui.label("every N steps").id;
            ui.add(egui::DragValue::new(&mut every).range(1..=1000))
                .labelled_by(name);
        });
    });
    config.numerics = on.then_some(every);
}

/// A cell's colour: clean dark green, overflow red, underflow blue (log scale from 1e-6 to
/// all values), inf/NaN solid red, not counted grey.
pub fn cell_color(overflow: f32, underflow: f32, non_finite: bool, counted: bool) -> egui::Color32 {
    if !counted {
        return egui::Color32::from_gray(70);
    }
    if non_finite {
        return egui::Color32::from_rgb(255, 0, 0);
    }
    let level = |f: f32| {
        if f <= 0.0 {
            0.0
        } else {
            ((f.log10() + 6.0) / 6.0).clamp(0.2, 1.0)
        }
    };
    let (o, u) = (level(overflow), level(underflow));
    let c = |v: f32| (40.0 + 215.0 * v) as u8;
    let green = (90.0 * (1.0 - o.max(u))) as u8;
    egui::Color32::from_rgb(c(o), 30 + green, c(u))
}

pub fn show(ui: &mut egui::Ui, app: &mut App) {
    let runs = app.session.runs();
    if runs.is_empty() {
        ui.label(
            "Tick \"count per-layer numerics\" in the setup panel and press Start: each \
             layer's output and gradients are counted on the GPU against the low dtype's range.",
        );
        return;
    }
    if runs.iter().all(|r| r.numerics.steps.is_empty()) {
        ui.label(match app.session.config.numerics {
            None => {
                "Numerics are off for this run: tick \"count per-layer numerics\" in the \
                     setup panel and start again."
            }
            Some(_) => "Waiting for the first counted step…",
        });
        return;
    }
    ui.weak(
        "Rows: layers (click one for its exponent histogram). Columns: counted steps. Red: \
         share of values at or beyond the low dtype's overflow threshold (solid: inf/NaN); \
         blue: share of non-zero values rounding to a subnormal or zero (log scale, 1e-6 to \
         all); dark green: clean; grey: not counted. An f32 run is counted against f16's \
         range. A red mark above a column: a skipped step.",
    );
    let modes: Vec<(Precision, &NumericsHistory)> =
        runs.iter().map(|r| (r.precision, &r.numerics)).collect();
    let drawn = draw(ui, &modes, &mut app.numerics_layer);
    for (run, cells) in app.session.runs.iter_mut().zip(drawn) {
        run.numerics.cells_drawn = cells;
    }
}

/// The modes' heat maps side by side, and under them the `selected` layer's histograms;
/// the cells drawn per mode.
pub fn draw(
    ui: &mut egui::Ui,
    modes: &[(Precision, &NumericsHistory)],
    selected: &mut Option<usize>,
) -> Vec<usize> {
    let mut drawn = vec![0; modes.len()];
    ui.columns(modes.len().max(1), |cols| {
        for ((col, (precision, h)), cells) in cols.iter_mut().zip(modes).zip(&mut drawn) {
            *cells = heat_map(col, *precision, h, selected);
        }
    });
    if let Some(layer) = *selected {
        ui.separator();
        ui.columns(modes.len().max(1), |cols| {
            for (col, (precision, h)) in cols.iter_mut().zip(modes) {
                histogram(col, *precision, h, layer);
            }
        });
    }
    drawn
}

/// One mode's heat map; a click on a row selects its layer. Returns the cells drawn.
pub fn heat_map(
    ui: &mut egui::Ui,
    precision: Precision,
    h: &NumericsHistory,
    selected: &mut Option<usize>,
) -> usize {
    ui.label(
        egui::RichText::new(precision.name())
            .color(mode_color(precision))
            .strong(),
    );
    let steps = &h.steps[h.steps.len().saturating_sub(MAX_COLUMNS)..];
    if steps.is_empty() {
        ui.label("no counted step yet");
        return 0;
    }
    let width = (ui.available_width() - LABEL_WIDTH - 8.0).max(40.0);
    let cell = width / steps.len() as f32;
    // Skipped steps, marked above their column.
    ui.horizontal(|ui| {
        ui.add_space(LABEL_WIDTH + ui.spacing().item_spacing.x);
        let (rect, _) = ui.allocate_exact_size(egui::vec2(width, 6.0), egui::Sense::hover());
        for (i, s) in steps.iter().enumerate() {
            if s.skipped {
                let x = rect.left() + i as f32 * cell;
                let mark = egui::Rect::from_min_size(
                    egui::pos2(x, rect.top()),
                    egui::vec2(cell.max(2.0), 6.0),
                );
                ui.painter().rect_filled(mark, 0.0, egui::Color32::RED);
            }
        }
    });
    for (layer, name) in h.layers.iter().enumerate() {
        ui.horizontal(|ui| {
            let text = format!("{} ({})", name.name, name.op);
            let label = egui::Button::selectable(*selected == Some(layer), text)
                .min_size(egui::vec2(LABEL_WIDTH, ROW_HEIGHT));
            if ui.add_sized([LABEL_WIDTH, ROW_HEIGHT], label).clicked() {
                *selected = Some(layer);
            }
            let size = egui::vec2(width, ROW_HEIGHT);
            let (rect, response) = ui.allocate_exact_size(size, egui::Sense::click());
            for (i, s) in steps.iter().enumerate() {
                let c = s.cells.get(layer).copied().unwrap_or_default();
                let x = rect.left() + i as f32 * cell;
                let r = egui::Rect::from_min_size(
                    egui::pos2(x, rect.top()),
                    egui::vec2(cell, ROW_HEIGHT),
                );
                let color = cell_color(c.overflow, c.underflow, c.non_finite, c.counted);
                ui.painter().rect_filled(r.shrink(0.5), 0.0, color);
            }
            if response.clicked() {
                *selected = Some(layer);
            }
            if let Some(pos) = response.hover_pos() {
                let i = (((pos.x - rect.left()) / cell) as usize).min(steps.len() - 1);
                let s = &steps[i];
                let c = s.cells.get(layer).copied().unwrap_or_default();
                let cause = s
                    .cause
                    .as_ref()
                    .map_or(String::new(), |c| format!("\nskipped: {c}"));
                response.on_hover_text(format!(
                    "{} at step {}: overflow {:.2e}, underflow {:.2e}{}{cause}",
                    name.name,
                    s.step,
                    c.overflow,
                    c.underflow,
                    if c.non_finite { ", inf/NaN" } else { "" }
                ));
            }
        });
    }
    let (first, last) = (steps[0].step, steps[steps.len() - 1].step);
    ui.horizontal(|ui| {
        ui.add_space(LABEL_WIDTH);
        ui.weak(format!("steps {first} … {last}"));
    });
    if let Some(s) = h.steps.iter().rev().find(|s| s.cause.is_some()) {
        let cause = s.cause.as_ref().expect("found");
        ui.colored_label(
            ui.visuals().warn_fg_color,
            format!("step {} skipped: {cause}", s.step),
        );
    }
    steps.len() * h.layers.len()
}

/// One mode's exponent histogram of `layer` (its output, input gradient and weight
/// gradient) against f16's range.
fn histogram(ui: &mut egui::Ui, precision: Precision, h: &NumericsHistory, layer: usize) {
    let Some(name) = h.layers.get(layer) else {
        return;
    };
    let tensors: Vec<(ProbeTensor, _)> = ProbeTensor::ALL
        .into_iter()
        .filter_map(|t| h.binades(layer, t).map(|b| (t, b)))
        .collect();
    let Some(step) = tensors.first().map(|(_, b)| b.step) else {
        ui.label(format!(
            "{}: layer {} was not counted",
            precision, name.name
        ));
        return;
    };
    ui.label(format!(
        "{precision} · layer {} ({}) · step {step}: log2 |value|, as stored",
        name.name, name.op
    ));
    let colors = [
        mode_color(precision),
        egui::Color32::from_rgb(120, 120, 200),
        egui::Color32::from_rgb(90, 170, 120),
    ];
    Plot::new(format!("numerics_hist_{precision}"))
        .height(220.0)
        .legend(Legend::default())
        .allow_scroll(false)
        .x_axis_formatter(|m, _| format!("2^{}", m.value.round()))
        .y_axis_label("values")
        .show(ui, |p| {
            for (k, (tensor, b)) in tensors.iter().enumerate() {
                let offset = -0.25 + 0.25 * k as f64;
                let bars = b
                    .bins
                    .iter()
                    .map(|&(e, n)| Bar::new(e as f64 + 0.5 + offset, n as f64))
                    .collect();
                let label = format!("{} ({})", tensor.name(), b.stored);
                p.add(BarChart::new(label, bars).color(colors[k]).width(0.25));
            }
            let limit = |name: &str, x: f64| {
                VLine::new(name, x)
                    .color(egui::Color32::RED)
                    .style(LineStyle::dashed_loose())
                    .width(1.5)
            };
            p.vline(limit("f16 flush to zero (2^-24)", -24.0));
            p.vline(limit("f16 subnormal below 2^-14", -14.0));
            p.vline(limit("f16 overflow above 65504", F16_MAX_LOG2));
        });
    for (tensor, b) in &tensors {
        ui.weak(format!(
            "{}: {} zero, {} inf/NaN, {} below 2^-48, {} at or above 2^24",
            tensor.name(),
            b.zero,
            b.non_finite,
            b.below,
            b.above
        ));
    }
}
