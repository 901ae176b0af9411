//! Precision map: per layer of the model, the dtype each op computes in, its output dtype
//! and the casts autocast inserts, for the selected mode (from `Policy::precision_map`).

use eframe::egui;

use super::{App, mode_color};
use crate::amp::policy::Precision;

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
        "{} on {}: matmul and conv run in the mode's low dtype, losses in f32, the rest in \
         their input's dtype (PyTorch's CUDA autocast lists).",
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
                        "casts inserted",
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
                        ui.label(if r.casts.is_empty() {
                            "–".to_string()
                        } else {
                            // The bundled font has no arrow glyph.
                            r.casts.join("; ").replace('→', " -> ")
                        });
                        ui.end_row();
                    }
                });
        }
    }
}
