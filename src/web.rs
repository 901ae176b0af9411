//! The browser entry point (wasm32 only): `web/index.html` loads the module that
//! `scripts/build-web.sh` builds and calls [`start`] with its canvas id.
//!
//! The page runs the same [`App`] as `webgpu-amp gui`, on the device eframe's WebGPU
//! renderer creates (with `shader-f16` requested where the adapter has it; packed f16
//! storage where it does not). Training advances inside frames (see
//! [`crate::app::session`]); nothing here waits on the GPU.
//!
//! DOM contract (what `web/index.html` provides and the end-to-end test reads):
//! - `#message`: hidden until something stops the app (no WebGPU, a bad query string, a
//!   failed start); then it shows why;
//! - `#status`: one line of progress during an autorun;
//! - `#result`: the autorun's JSON result, also published as `window.webgpuAmpResult`.

use std::sync::Arc;

use eframe::egui;
use eframe::egui_wgpu::{WgpuConfiguration, WgpuSetup, WgpuSetupCreateNew};
use wasm_bindgen::prelude::*;

use crate::app::App;
use crate::app::autorun::{Autorun, AutorunResult};
use crate::app::session::Status;
use crate::gpu::{F16StorageChoice, GpuContext};

/// Shown when the browser has no WebGPU at all (`navigator.gpu` missing).
pub const NO_WEBGPU: &str = "WebGPU is not available in this browser, so webgpu-amp cannot \
train here. Use a browser with WebGPU enabled (Chrome or Edge 113+, Safari 26+, Firefox 141+ \
on Windows; on Linux Chrome needs chrome://flags/#enable-unsafe-webgpu), or run the native \
app: `webgpu-amp gui`.";

/// Start the app in the canvas `canvas_id`. On failure the page's `#message` says why
/// (and, during an autorun, the result carries the error), and the promise rejects.
#[wasm_bindgen]
pub async fn start(canvas_id: String) -> Result<(), JsValue> {
    let query = query_string();
    let autorun = match Autorun::from_query(&query) {
        Ok(a) => a,
        Err(e) => {
            let asked = query.contains("autorun");
            return Err(fail(asked, &format!("bad page address: {e}")));
        }
    };
    let config = autorun.as_ref().map(|a| a.config.clone());
    if !has_webgpu() {
        return Err(fail(config.is_some(), NO_WEBGPU));
    }
    let canvas = web_sys::window()
        .and_then(|w| w.document())
        .and_then(|d| d.get_element_by_id(&canvas_id))
        .and_then(|e| e.dyn_into::<web_sys::HtmlCanvasElement>().ok())
        .ok_or_else(|| {
            let why = format!("no <canvas id=\"{canvas_id}\"> in the page");
            fail(config.is_some(), &why)
        })?;

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
    let autorunning = config.is_some();
    let started = eframe::WebRunner::new()
        .start(
            canvas,
            options,
            Box::new(move |cc| {
                let mut app = App::from_creation_context(
                    cc,
                    F16StorageChoice::Auto,
                    config.clone().unwrap_or_default(),
                )?;
                app.autostart = config.is_some();
                Ok(Box::new(WebApp {
                    app,
                    autorun: config.is_some(),
                    published: false,
                }))
            }),
        )
        .await;
    started.map_err(|e| {
        let why = e
            .as_string()
            .unwrap_or_else(|| format!("{e:?}"))
            .replace("Failed to create wgpu painter: ", "");
        let text = if why.contains("adapter") {
            // wgpu's own words here ("... webgpu not requested") mislead; say what happened.
            format!(
                "WebGPU is present, but the browser offered no GPU adapter (WebGPU may be \
                 turned off, or this GPU blocklisted; on Linux, Chrome needs \
                 chrome://flags/#enable-unsafe-webgpu). Details: {why}"
            )
        } else {
            format!("WebGPU is present, but the app could not start on it: {why}")
        };
        fail(autorunning, &text)
    })
}

/// The app plus the autorun's bookkeeping: publish the result once, when training ends.
struct WebApp {
    app: App,
    autorun: bool,
    published: bool,
}

impl eframe::App for WebApp {
    fn logic(&mut self, ctx: &egui::Context, _frame: &mut eframe::Frame) {
        self.app.tick(ctx);
        if !self.autorun || self.published {
            return;
        }
        let session = &self.app.session;
        match AutorunResult::from_session(session) {
            Some(result) => {
                self.published = true;
                set_text(
                    "status",
                    &format!("autorun done: {}", session.status().label()),
                );
                publish(&result.to_json());
            }
            None => {
                let done = session.runs().first().map_or(0, |r| r.history.len());
                let line = match session.status() {
                    Status::Running => format!(
                        "autorun {}: step {done}/{}",
                        session.config.modes[0], session.config.steps
                    ),
                    other => format!("autorun: {}", other.label()),
                };
                set_text("status", &line);
            }
        }
    }

    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        self.app.show(ui);
    }
}

fn query_string() -> String {
    web_sys::window()
        .and_then(|w| w.location().search().ok())
        .unwrap_or_default()
}

/// `navigator.gpu` exists (the adapter may still be refused; `start` reports that).
fn has_webgpu() -> bool {
    web_sys::window().is_some_and(|w| {
        js_sys::Reflect::get(&w.navigator(), &JsValue::from_str("gpu"))
            .is_ok_and(|gpu| !gpu.is_undefined() && !gpu.is_null())
    })
}

/// Show `why` in `#message`; during an autorun also publish a failed result, so a test
/// waiting for one ends at once with the reason. Returns the error for the promise.
fn fail(autorun: bool, why: &str) -> JsValue {
    if let Some(el) = element("message") {
        el.set_text_content(Some(why));
        let _ = el.remove_attribute("hidden");
    }
    if autorun {
        let result = serde_json::json!({ "ok": false, "error": why });
        publish(&serde_json::to_string_pretty(&result).unwrap_or_default());
    }
    JsValue::from_str(why)
}

/// Put the result JSON in `#result` and on `window.webgpuAmpResult`.
fn publish(json: &str) {
    set_text("result", json);
    if let (Some(window), Ok(value)) = (web_sys::window(), js_sys::JSON::parse(json)) {
        let _ = js_sys::Reflect::set(&window, &JsValue::from_str("webgpuAmpResult"), &value);
    }
}

fn element(id: &str) -> Option<web_sys::Element> {
    web_sys::window()?.document()?.get_element_by_id(id)
}

fn set_text(id: &str, text: &str) {
    if let Some(el) = element(id) {
        el.set_text_content(Some(text));
    }
}
