//! Drawing every panel: the setup at the left, the tabs in the centre (apart from `mod.rs`,
//! which holds the state the panels share, so that no panel reaches itself through it).

use eframe::egui;

use super::{App, Tab, kernels, numerics, precision, runs, samples, scaling, setup};

impl App {
    /// Draw every panel.
    pub fn show(&mut self, ui: &mut egui::Ui) {
        egui::Panel::left("setup")
            .resizable(true)
            .default_size(290.0)
            .show(ui, |ui| {
                egui::ScrollArea::vertical().show(ui, |ui| setup::show(ui, self));
            });
        egui::CentralPanel::default().show(ui, |ui| {
            ui.horizontal(|ui| {
                for tab in Tab::ALL {
                    ui.selectable_value(&mut self.tab, tab, tab.title());
                }
            });
            ui.separator();
            egui::ScrollArea::vertical().show(ui, |ui| match self.tab {
                Tab::Runs => runs::show(ui, self),
                Tab::Scaling => scaling::show(ui, self),
                Tab::Precision => precision::show(ui, self),
                Tab::Kernels => kernels::show(ui, self),
                Tab::Samples => samples::show(ui, self),
                Tab::Numerics => numerics::show(ui, self),
            });
        });
    }
}
