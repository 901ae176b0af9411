//! Setup panel: the device, what to train, which precision modes, the scaler; Start,
//! Pause, Stop, Reset.

use eframe::egui;

use super::config::{DATASETS, OptimizerKind, Status};
use super::model::MODELS;
use super::model::{dataset_for, model_for};
use super::{App, mode_color};
use crate::amp::policy::Precision;

pub fn show(ui: &mut egui::Ui, app: &mut App) {
    device(ui, app);
    ui.separator();
    controls(ui, app);
    ui.separator();
    let editable = matches!(
        app.session.status(),
        Status::Idle | Status::Stopped | Status::Finished | Status::Failed(_)
    );
    ui.add_enabled_ui(editable, |ui| {
        training(ui, app);
        folder(ui, app);
        ui.separator();
        modes(ui, app);
        ui.separator();
        scaler(ui, app);
        ui.separator();
        super::numerics::switch(ui, &mut app.config);
    });
}

fn device(ui: &mut egui::Ui, app: &App) {
    let ctx = app.session.ctx();
    let r = &ctx.report;
    ui.heading("Device");
    egui::Grid::new("device").num_columns(2).show(ui, |ui| {
        ui.label("adapter");
        ui.label(&r.name);
        ui.end_row();
        ui.label("backend");
        ui.label(format!("{} ({})", r.backend, r.device_type));
        ui.end_row();
        ui.label("f16 storage");
        ui.label(match ctx.f16_storage {
            crate::F16Storage::Native => "native (shader-f16)",
            crate::F16Storage::Packed => "packed (2 halves per u32)",
        });
        ui.end_row();
        ui.label("timestamps");
        ui.label(if ctx.caps.timestamp_query {
            "yes"
        } else {
            "no"
        });
        ui.end_row();
        ui.label("max binding");
        ui.label(format!(
            "{} MiB",
            ctx.caps.max_storage_buffer_binding_size >> 20
        ));
        ui.end_row();
        ui.label("workgroup");
        ui.label(format!(
            "{} invocations, {} KiB shared",
            ctx.caps.max_compute_invocations_per_workgroup,
            ctx.caps.max_compute_workgroup_storage_size >> 10
        ));
        ui.end_row();
    });
}

fn controls(ui: &mut egui::Ui, app: &mut App) {
    let status = app.session.status().clone();
    ui.horizontal(|ui| {
        let can_start = !matches!(status, Status::Running | Status::Preparing { .. });
        let start_label = if status == Status::Paused {
            "Resume"
        } else {
            "Start"
        };
        if ui
            .add_enabled(can_start, egui::Button::new(start_label))
            .clicked()
        {
            app.session.start(app.config.clone());
        }
        if ui
            .add_enabled(status == Status::Running, egui::Button::new("Pause"))
            .clicked()
        {
            app.session.pause();
        }
        let active = matches!(
            status,
            Status::Running | Status::Paused | Status::Preparing { .. }
        );
        if ui.add_enabled(active, egui::Button::new("Stop")).clicked() {
            app.session.stop();
        }
        if ui.button("Reset").clicked() {
            app.session.reset();
        }
    });
    let color = match status {
        Status::Failed(_) => ui.visuals().error_fg_color,
        _ => ui.visuals().text_color(),
    };
    ui.colored_label(color, format!("Status: {}", status.label()));
    for run in app.session.runs() {
        ui.label(format!(
            "{}: step {}/{}",
            run.precision,
            run.history.len(),
            app.session.config.steps
        ));
    }
}

/// A Hugging Face folder to fine-tune: natively a path and Load (the page picks one with its
/// folder input, web/index.html); then what was picked, or why it was refused.
fn folder(ui: &mut egui::Ui, app: &mut App) {
    #[cfg(not(target_arch = "wasm32"))]
    ui.horizontal(|ui| {
        let name = ui.label("Hugging Face folder").id;
        ui.text_edit_singleline(&mut app.folder_path)
            .labelled_by(name);
        if ui.button("Load").clicked() {
            // Named by its path: `hf:PATH` is also the CLI's flag (the resume command of a
            // run cut short by closing the window says it).
            let path = app.folder_path.trim().to_string();
            let source = Box::new(crate::data::hf::DiskFolder::new(path.as_ref()));
            app.folder_note = Some(app.pick_folder(&path, source).map_err(|e| e.to_string()));
        }
    });
    match &app.folder_note {
        Some(Ok(summary)) => {
            ui.weak(summary);
        }
        Some(Err(why)) => {
            ui.colored_label(ui.visuals().error_fg_color, why);
        }
        None => {}
    }
}

fn training(ui: &mut egui::Ui, app: &mut App) {
    let folder_model = app.session.folder().map(|f| f.model_name());
    let c = &mut app.config;
    ui.heading("Training");
    egui::Grid::new("training").num_columns(2).show(ui, |ui| {
        let (model, dataset) = (c.model.clone(), c.dataset.clone());
        let name = ui.label("model").id;
        egui::ComboBox::from_id_salt("model")
            .selected_text(c.model.clone())
            .show_ui(ui, |ui| {
                for m in MODELS {
                    ui.selectable_value(&mut c.model, m.to_string(), m);
                }
                if let Some(name) = folder_model {
                    ui.selectable_value(&mut c.model, name.clone(), name);
                }
            })
            .response
            .labelled_by(name);
        ui.end_row();
        let name = ui.label("data set").id;
        egui::ComboBox::from_id_salt("dataset")
            .selected_text(c.dataset.clone())
            .show_ui(ui, |ui| {
                for &d in DATASETS {
                    ui.selectable_value(&mut c.dataset, d.to_string(), d);
                }
            })
            .response
            .labelled_by(name);
        ui.end_row();
        // A GPT trains on text and the other presets on the rest: the choice just made
        // picks the other one when they do not go together.
        if c.model != model {
            c.dataset = dataset_for(&c.model, &c.dataset);
        } else if c.dataset != dataset {
            c.model = model_for(&c.dataset, &c.model);
        }
        let name = ui.label("batch size").id;
        labelled(
            ui,
            name,
            egui::DragValue::new(&mut c.batch_size).range(1..=1024),
        );
        ui.end_row();
        let name = ui.label("optimizer").id;
        egui::ComboBox::from_id_salt("optimizer")
            .selected_text(c.optimizer.name())
            .show_ui(ui, |ui| {
                for o in OptimizerKind::ALL {
                    ui.selectable_value(&mut c.optimizer, o, o.name());
                }
            })
            .response
            .labelled_by(name);
        ui.end_row();
        let name = ui.label("learning rate").id;
        labelled(
            ui,
            name,
            egui::DragValue::new(&mut c.lr)
                .speed(1e-4)
                .range(1e-6..=10.0),
        );
        ui.end_row();
        let name = ui.label("steps").id;
        labelled(
            ui,
            name,
            egui::DragValue::new(&mut c.steps).range(1..=100_000),
        );
        ui.end_row();
        let name = ui.label("seed").id;
        labelled(ui, name, egui::DragValue::new(&mut c.seed));
        ui.end_row();
        let name = ui.label("steps / frame").id;
        labelled(
            ui,
            name,
            egui::DragValue::new(&mut c.steps_per_frame).range(1..=16),
        );
        ui.end_row();
    });
}

fn modes(ui: &mut egui::Ui, app: &mut App) {
    ui.heading("Precision modes");
    for p in Precision::ALL {
        let mut on = app.config.modes.contains(&p);
        let text = egui::RichText::new(p.name()).color(mode_color(p));
        if ui.checkbox(&mut on, text).changed() {
            if on {
                app.config.modes.push(p);
                // Keep the display order of Precision::ALL.
                app.config
                    .modes
                    .sort_by_key(|m| Precision::ALL.iter().position(|a| a == m));
            } else {
                app.config.modes.retain(|m| *m != p);
            }
        }
    }
}

fn scaler(ui: &mut egui::Ui, app: &mut App) {
    let c = &mut app.config;
    ui.heading("GradScaler");
    ui.label("On for amp-f16 (as PyTorch recommends).");
    ui.checkbox(&mut c.scaler_everywhere, "also for amp-bf16 and f16");
    egui::Grid::new("scaler").num_columns(2).show(ui, |ui| {
        let name = ui.label("init scale").id;
        labelled(
            ui,
            name,
            egui::DragValue::new(&mut c.scaler.init_scale)
                .speed(256.0)
                .range(1.0..=1e9),
        );
        ui.end_row();
        let name = ui.label("growth factor").id;
        labelled(
            ui,
            name,
            egui::DragValue::new(&mut c.scaler.growth_factor)
                .speed(0.1)
                .range(1.0..=16.0),
        );
        ui.end_row();
        let name = ui.label("backoff factor").id;
        labelled(
            ui,
            name,
            egui::DragValue::new(&mut c.scaler.backoff_factor)
                .speed(0.05)
                .range(0.01..=0.99),
        );
        ui.end_row();
        let name = ui.label("growth interval").id;
        labelled(
            ui,
            name,
            egui::DragValue::new(&mut c.scaler.growth_interval).range(1..=100_000),
        );
        ui.end_row();
    });
}

/// Add a widget named by the label `name` (for screen readers and UI tests).
fn labelled(ui: &mut egui::Ui, name: egui::Id, widget: impl egui::Widget) -> egui::Response {
    ui.add(widget).labelled_by(name)
}
