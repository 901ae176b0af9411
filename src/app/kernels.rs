//! Kernels: GPU time per op of one training step, each precision path side by side, from
//! timestamp queries (every kernel of a step in its own timed compute pass, on a twin
//! trainer so the real run is untouched). Adapters without timestamp queries say so.

use eframe::egui;
use egui_plot::{Bar, BarChart, Legend, Plot};

use super::session::ModeRun;
use super::{App, mode_color};

/// Per op label (in order of first appearance): for each mode, (total ms, kernel count).
pub fn per_op(runs: &[ModeRun]) -> Vec<(String, Vec<(f64, usize)>)> {
    let mut rows: Vec<(String, Vec<(f64, usize)>)> = Vec::new();
    for (m, r) in runs.iter().enumerate() {
        for k in &r.kernel_times {
            let i = match rows.iter().position(|(l, _)| *l == k.label) {
                Some(i) => i,
                None => {
                    rows.push((k.label.clone(), vec![(0.0, 0); runs.len()]));
                    rows.len() - 1
                }
            };
            rows[i].1[m].0 += k.ms;
            rows[i].1[m].1 += 1;
        }
    }
    rows
}

pub fn show(ui: &mut egui::Ui, app: &mut App) {
    if !app.session.has_timestamps() {
        ui.label(
            "This adapter has no timestamp queries (wgpu feature TIMESTAMP_QUERY), so per-kernel \
             GPU times cannot be measured here.",
        );
        return;
    }
    let runs = app.session.runs();
    if runs.iter().all(|r| r.kernel_times.is_empty()) {
        ui.label("Start a run: each mode's step is profiled every 50 steps.");
        return;
    }
    ui.label("GPU time of one step per op (ms; × kernels of that op per step).");
    ui.weak(
        "Each kernel runs in its own compute pass between two timestamps. Drivers that run \
         compute lazily (Mesa's lavapipe does) can charge a kernel's work to a neighbouring \
         pass, so trust the per-op split less than the whole step (first start to last end).",
    );
    let rows = per_op(runs);
    let n = runs.len() as f64;
    Plot::new("kernel_bars")
        .height(260.0)
        .legend(Legend::default())
        .allow_scroll(false)
        .include_y(0.0)
        .show(ui, |p| {
            for (m, r) in runs.iter().enumerate() {
                let width = 0.8 / n;
                let bars: Vec<Bar> = rows
                    .iter()
                    .enumerate()
                    .map(|(i, (label, t))| {
                        Bar::new(i as f64 - 0.4 + width * (m as f64 + 0.5), t[m].0)
                            .name(label)
                            .width(width)
                    })
                    .collect();
                p.add(BarChart::new(r.precision.name(), bars).color(mode_color(r.precision)));
            }
        });
    egui::Grid::new("kernel_table")
        .striped(true)
        .show(ui, |ui| {
            ui.strong("#");
            ui.strong("op");
            for r in runs {
                ui.colored_label(mode_color(r.precision), r.precision.name());
            }
            ui.end_row();
            for (i, (label, t)) in rows.iter().enumerate() {
                ui.label(i.to_string());
                ui.monospace(label);
                for (ms, count) in t {
                    if *count == 0 {
                        ui.label("–");
                    } else {
                        ui.label(format!("{ms:.3} ×{count}"));
                    }
                }
                ui.end_row();
            }
            ui.strong("");
            ui.strong("whole step");
            for r in runs {
                ui.strong(
                    r.latest_gpu_ms()
                        .map_or("–".to_string(), |ms| format!("{ms:.3}")),
                );
            }
            ui.end_row();
        });
}
