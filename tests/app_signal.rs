//! SIGINT (or SIGTERM) while the app runs: it asks its window to close, which saves the runs
//! in flight and ends `gui` with 130, as closing the window does (tests/app_faults.rs checks
//! that save). Its own test binary: the signal's flag is the process's.

#![cfg(unix)]

mod common;

use std::sync::Arc;

use eframe::egui;
use egui_kittest::Harness;
use webgpu_amp::app::App;
use webgpu_amp::app::config::SessionConfig;
use webgpu_amp::interrupt::{self, Signal};

fn asked_to_close(harness: &Harness<'_, App>) -> bool {
    harness
        .output()
        .viewport_output
        .values()
        .any(|v| v.commands.contains(&egui::ViewportCommand::Close))
}

#[test]
fn a_signal_closes_the_app_window() {
    assert!(interrupt::install(), "the handler is installed");
    let mut app = App::new(Arc::new(common::ctx_owned()), SessionConfig::default());
    app.watch_signals = true;
    let mut harness = Harness::builder()
        .with_size(egui::vec2(1280.0, 820.0))
        .build_ui_state(|ui, app: &mut App| app.update(ui), app);
    harness.step();
    assert!(
        !asked_to_close(&harness),
        "no signal yet, yet the window closes"
    );
    interrupt::raise(Signal::Int);
    harness.step();
    assert!(asked_to_close(&harness), "SIGINT did not close the window");
}
