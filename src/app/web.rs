//! The browser entry point (wasm32 only): `web/index.html` loads the module that
//! `scripts/build-web.sh` builds and calls [`start`] with its canvas id. Its twin for the
//! desktop is `native.rs`.
//!
//! The page runs the same [`App`] as `webgpu-amp gui`, on the device eframe's WebGPU
//! renderer creates (with `shader-f16` requested where the adapter has it; packed f16
//! storage where it does not). Training advances inside frames (see
//! [`crate::app::session`]); nothing here waits on the GPU. The DOM contract is in `dom.rs`.

use std::sync::Arc;

use eframe::egui;
use eframe::egui_wgpu::{WgpuConfiguration, WgpuSetup, WgpuSetupCreateNew};
use wasm_bindgen::prelude::*;

use super::App;
use super::autorun::{Autorun, AutorunPublisher, AutorunUpdate};
use super::dom;
use crate::gpu::{F16StorageChoice, GpuContext};

/// Start the app in the canvas `canvas_id`. On failure the page's `#message` says why
/// (and, during an autorun, the result carries the error), and the promise rejects.
#[wasm_bindgen]
pub async fn start(canvas_id: String) -> Result<(), JsValue> {
    let query = dom::query_string();
    let autorun = Autorun::from_query(&query)
        .map_err(|e| dom::fail(query.contains("autorun"), &format!("bad page address: {e}")))?;
    let config = autorun.map(|a| a.config);
    let autorunning = config.is_some();
    if !dom::has_webgpu() {
        return Err(dom::fail(autorunning, dom::NO_WEBGPU));
    }
    let canvas = dom::canvas(&canvas_id).map_err(|why| dom::fail(autorunning, &why))?;

    // WebGPU only: the app trains with compute shaders, which WebGL does not have.
    let mut setup = WgpuSetupCreateNew::without_display_handle();
    setup.instance_descriptor.backends = wgpu::Backends::BROWSER_WEBGPU;
    setup.power_preference = wgpu::PowerPreference::HighPerformance;
    setup.device_descriptor = Arc::new(GpuContext::device_descriptor);
    let options = eframe::WebOptions {
        wgpu_options: WgpuConfiguration {
            wgpu_setup: WgpuSetup::CreateNew(setup),
            ..Default::default()
        },
        ..Default::default()
    };
    eframe::WebRunner::new()
        .start(
            canvas,
            options,
            Box::new(move |cc| {
                let start = config.clone().unwrap_or_default();
                let mut app = App::from_creation_context(cc, F16StorageChoice::Auto, start)?;
                app.autostart = autorunning;
                let autorun = autorunning.then(AutorunPublisher::default);
                Ok(Box::new(WebApp { app, autorun }))
            }),
        )
        .await
        .map_err(|e| dom::fail(autorunning, &dom::start_failure(&e)))
}

/// The app plus, during an autorun, its publisher.
struct WebApp {
    app: App,
    autorun: Option<AutorunPublisher>,
}

impl eframe::App for WebApp {
    fn logic(&mut self, ctx: &egui::Context, _frame: &mut eframe::Frame) {
        self.app.tick(ctx);
        match self
            .autorun
            .as_mut()
            .and_then(|p| p.update(&self.app.session))
        {
            Some(AutorunUpdate::Progress(line)) => dom::set_text("status", &line),
            Some(AutorunUpdate::Finished { status, result }) => {
                dom::set_text("status", &status);
                dom::publish(&result.to_json());
            }
            None => {}
        }
    }

    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        self.app.show(ui);
    }
}
