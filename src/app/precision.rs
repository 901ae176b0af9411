//! Precision map: per layer of the model, the dtype each op computes in, its output dtype
//! and the casts autocast inserts, for the selected mode (from `Policy::precision_map`).

use eframe::egui;

use super::{App, mode_color};
use crate::amp::policy::{Precision, PrecisionRow};

/// What an op computes in f32 inside, whatever its own row says (autocast's fp32 list
/// applies within it): the attention's softmax.
pub fn f32_inside(op: &str) -> Option<&'static str> {
    (op == "Attention").then_some("softmax in f32")
}

/// The last column of a row: the casts autocast inserts, and what runs in f32 inside.
pub fn notes(row: &PrecisionRow) -> String {
    // The bundled font has no arrow glyph.
    let mut notes: Vec<String> = row.casts.iter().map(|c| c.replace('→', " -> ")).collect();
    notes.extend(f32_inside(row.op.name).map(String::from));
    if notes.is_empty() {
        "–".to_string()
    } else {
        notes.join("; ")
    }
}

pub fn show(ui: &mut egui::Ui, app: &mut App) {
    ui.horizontal(|ui| {
        ui.label("mode");
        for p in Precision::ALL {
            ui.selectable_value(
                &mut app.map_mode,
                p,
                egui::RichText::new(p.name()).color(mode_color(p)),
            );
        }
    });
    ui.label(format!(
        "{} on {}: matmul and conv run in the mode's low dtype; LayerNorm, softmax and losses \
         in f32; the rest in their input's dtype (PyTorch's CUDA autocast lists).",
        app.config.model, app.config.dataset
    ));
    match app.precision_rows() {
        None => {
            ui.label("Computing…");
        }
        Some(Err(e)) => {
            ui.colored_label(ui.visuals().error_fg_color, e);
        }
        Some(Ok(rows)) => {
            egui::Grid::new("precision_map")
                .striped(true)
                .num_columns(6)
                .show(ui, |ui| {
                    for h in [
                        "#",
                        "layer",
                        "op",
                        "input",
                        "compute",
                        "output",
                        "casts inserted, f32 inside",
                    ] {
                        ui.strong(h);
                    }
                    ui.end_row();
                    for r in rows {
                        ui.label(r.index.to_string());
                        ui.label(&r.name);
                        ui.label(r.op.name);
                        ui.label(r.input_dtype.to_string());
                        ui.label(r.compute_dtype.to_string());
                        ui.label(r.output_dtype.to_string());
                        ui.label(notes(r));
                        ui.end_row();
                    }
                });
        }
    }
}
