//! Runs side by side: loss, validation accuracy, loss scale (log axis, skipped steps
//! marked) and ms/step per mode; bars of ms/step and memory per mode (the tutorial's
//! FP32-vs-AMP chart); the loss difference of each low-precision path against f32.

use eframe::egui;
use egui_plot::{Bar, BarChart, Legend, Line, MarkerShape, Plot, PlotPoints, Points};

use super::session::ModeRun;
use super::{App, mode_color};
use crate::amp::policy::Precision;

const PLOT_HEIGHT: f32 = 190.0;

pub fn show(ui: &mut egui::Ui, app: &mut App) {
    let runs = app.session.runs();
    if runs.is_empty() {
        ui.label("Press Start: every selected mode trains from the same initial weights on the same batches.");
        return;
    }
    let timestamps = app.session.has_timestamps();
    ui.columns(2, |cols| {
        loss_plot(&mut cols[0], runs);
        accuracy_plot(&mut cols[1], runs);
        scale_plot(&mut cols[0], runs);
        ms_plot(&mut cols[1], runs, timestamps);
        difference_plot(&mut cols[0], runs);
        bars(&mut cols[1], runs, timestamps, app.session.steps_per_sec());
    });
}

fn plot(id: &str) -> Plot<'static> {
    Plot::new(id.to_string())
        .height(PLOT_HEIGHT)
        .legend(Legend::default())
        .allow_scroll(false)
        .y_axis_min_width(44.0)
}

/// Finite (x, y) points only: a NaN loss (pure f16 diverging) leaves a gap, not a broken plot.
fn finite(points: impl Iterator<Item = [f64; 2]>) -> PlotPoints<'static> {
    points.filter(|p| p[1].is_finite()).collect()
}

fn loss_plot(ui: &mut egui::Ui, runs: &[ModeRun]) {
    ui.label("Training loss");
    plot("loss").show(ui, |p| {
        for r in runs {
            let pts = finite(r.history.iter().map(|s| [s.step as f64, s.loss as f64]));
            p.line(Line::new(r.precision.name(), pts).color(mode_color(r.precision)));
        }
    });
}

fn accuracy_plot(ui: &mut egui::Ui, runs: &[ModeRun]) {
    ui.label("Validation accuracy (held-out images, every 50 steps)");
    plot("accuracy")
        .include_y(0.0)
        .include_y(1.0)
        .show(ui, |p| {
            for r in runs {
                let pts: Vec<[f64; 2]> = r
                    .val_accuracy
                    .iter()
                    .map(|&(s, a)| [s as f64, a as f64])
                    .collect();
                let c = mode_color(r.precision);
                p.line(Line::new(r.precision.name(), pts.clone()).color(c));
                p.points(Points::new(r.precision.name(), pts).color(c).radius(3.0));
            }
        });
}

fn scale_plot(ui: &mut egui::Ui, runs: &[ModeRun]) {
    ui.label("Loss scale (log2 axis); × marks skipped steps (inf/NaN gradients)");
    let top = runs
        .iter()
        .filter(|r| r.scaler_enabled)
        .flat_map(|r| r.history.iter().map(|s| (s.scale as f64).log2()))
        .filter(|v| v.is_finite())
        .fold(16.0f64, f64::max);
    plot("scale")
        .include_y(0.0)
        .include_y(top + 2.0)
        .y_grid_spacer(egui_plot::uniform_grid_spacer(|_| [8.0, 4.0, 2.0]))
        .y_axis_formatter(|mark, _| {
            let k = mark.value.round();
            if (mark.value - k).abs() < 1e-6 {
                format!("2^{k}")
            } else {
                String::new()
            }
        })
        .show(ui, |p| {
            for r in runs.iter().filter(|r| r.scaler_enabled) {
                let c = mode_color(r.precision);
                let pts = finite(
                    r.history
                        .iter()
                        .map(|s| [s.step as f64, (s.scale as f64).log2()]),
                );
                p.line(Line::new(r.precision.name(), pts).color(c));
                let skipped = finite(
                    r.history
                        .iter()
                        .filter(|s| s.skipped)
                        .map(|s| [s.step as f64, (s.scale as f64).log2()]),
                );
                p.points(
                    Points::new(format!("{} skipped", r.precision), skipped)
                        .shape(MarkerShape::Cross)
                        .radius(5.0)
                        .color(egui::Color32::RED),
                );
            }
        });
    for r in runs.iter().filter(|r| r.scaler_enabled) {
        ui.label(format!(
            "{}: {} skipped step(s), scale now {}",
            r.precision,
            r.skipped_steps(),
            r.history
                .last()
                .map_or("–".into(), |s| crate::amp::scale_text(s.scale))
        ));
    }
    if runs.iter().all(|r| !r.scaler_enabled) {
        ui.weak("No selected mode runs the GradScaler.");
    }
}

fn ms_plot(ui: &mut egui::Ui, runs: &[ModeRun], timestamps: bool) {
    ui.label("GPU ms per step (timestamp profile of every kernel)");
    if !timestamps {
        ui.weak("This adapter has no timestamp queries: per-mode GPU time is unavailable.");
        return;
    }
    plot("ms").include_y(0.0).show(ui, |p| {
        for r in runs {
            let pts: Vec<[f64; 2]> = r.gpu_ms.iter().map(|&(s, ms)| [s as f64, ms]).collect();
            let c = mode_color(r.precision);
            p.line(Line::new(r.precision.name(), pts.clone()).color(c));
            p.points(Points::new(r.precision.name(), pts).color(c).radius(3.0));
        }
    });
}

/// Loss of each low-precision path minus the f32 path's, step by step.
pub fn differences(runs: &[ModeRun]) -> Vec<(Precision, Vec<[f64; 2]>)> {
    let Some(base) = runs.iter().find(|r| r.precision == Precision::F32) else {
        return Vec::new();
    };
    runs.iter()
        .filter(|r| r.precision != Precision::F32)
        .map(|r| {
            let pts = r
                .history
                .iter()
                .zip(&base.history)
                .map(|(a, b)| [a.step as f64, a.loss as f64 - b.loss as f64])
                .filter(|p| p[1].is_finite())
                .collect();
            (r.precision, pts)
        })
        .collect()
}

fn difference_plot(ui: &mut egui::Ui, runs: &[ModeRun]) {
    ui.label("Loss difference: low-precision path − f32 path");
    let diffs = differences(runs);
    if diffs.is_empty() {
        ui.weak("Select f32 and at least one other mode to compare.");
        return;
    }
    plot("difference").show(ui, |p| {
        for (precision, pts) in diffs {
            p.line(Line::new(format!("{precision} − f32"), pts).color(mode_color(precision)));
        }
    });
}

fn bars(ui: &mut egui::Ui, runs: &[ModeRun], timestamps: bool, steps_per_sec: Option<f64>) {
    ui.label("Per mode: GPU ms/step (left) and planned GPU memory in MiB (right)");
    let ms: Vec<Bar> = runs
        .iter()
        .enumerate()
        .filter_map(|(i, r)| {
            r.latest_gpu_ms().map(|ms| {
                Bar::new(i as f64, ms)
                    .name(r.precision.name())
                    .fill(mode_color(r.precision))
            })
        })
        .collect();
    let mem: Vec<Bar> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| {
            Bar::new(i as f64, r.memory_bytes as f64 / (1 << 20) as f64)
                .name(r.precision.name())
                .fill(mode_color(r.precision))
        })
        .collect();
    let names: Vec<String> = runs
        .iter()
        .map(|r| r.precision.name().to_string())
        .collect();
    let names2 = names.clone();
    ui.columns(2, |cols| {
        Plot::new("ms_bars")
            .height(PLOT_HEIGHT)
            .allow_scroll(false)
            .include_y(0.0)
            .x_axis_formatter(move |m, _| mode_name(&names, m.value))
            .show(&mut cols[0], |p| {
                p.add(BarChart::new("ms/step", ms).width(0.6))
            });
        Plot::new("mem_bars")
            .height(PLOT_HEIGHT)
            .allow_scroll(false)
            .include_y(0.0)
            .x_axis_formatter(move |m, _| mode_name(&names2, m.value))
            .show(&mut cols[1], |p| {
                p.add(BarChart::new("MiB", mem).width(0.6))
            });
    });
    egui::Grid::new("bars_table").striped(true).show(ui, |ui| {
        ui.strong("mode");
        ui.strong("GPU ms/step");
        ui.strong("images/s (GPU)");
        ui.strong("memory");
        ui.end_row();
        for r in runs {
            ui.colored_label(mode_color(r.precision), r.precision.name());
            match r.latest_gpu_ms() {
                Some(ms) if ms > 0.0 => {
                    ui.label(format!("{ms:.2}"));
                    ui.label(format!("{:.0}", r.batch_size as f64 * 1000.0 / ms));
                }
                _ => {
                    ui.label(if timestamps { "…" } else { "n/a" });
                    ui.label("–");
                }
            }
            ui.label(format!(
                "{:.2} MiB",
                r.memory_bytes as f64 / (1 << 20) as f64
            ));
            ui.end_row();
        }
    });
    if let Some(sps) = steps_per_sec {
        ui.weak(format!(
            "Wall clock, all modes interleaved: {sps:.1} optimizer steps/s."
        ));
    }
}

/// Axis label of a bar position: the mode's name at integer positions.
fn mode_name(names: &[String], x: f64) -> String {
    let i = x.round();
    if (x - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < names.len() {
        names[i as usize].clone()
    } else {
        String::new()
    }
}
