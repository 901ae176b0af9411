//! The browser entry point (wasm32 only): `web/index.html` loads the module that
//! `scripts/build-web.sh` builds and calls [`start`] with its canvas id. Its twin for the
//! desktop is `native.rs`. The page runs the same [`App`] as `webgpu-amp gui`, with
//! training independent of the picture:
//!
//! - training has a WebGPU device of its own ([`GpuContext::new_async`], `shader-f16` where
//!   the adapter has it, packed f16 storage where not); eframe's renderer draws on another;
//! - training advances from a timer as well as from frames (`web/driver.rs`), so a hidden
//!   tab or a canvas that never presents does not stop it;
//! - a canvas that loses every WebGPU device of the page makes it reload once without the
//!   picture (`web/fallback.rs`).
//!
//! When the page cannot train it says why in `#message` (`web/page.rs`; the DOM contract is
//! in `dom.rs`). [`train_headless`] trains an autorun the same way without a page (no DOM:
//! `web/dawn/train.mjs` runs it in Node on Dawn).

mod driver;
mod fallback;
mod headless;
mod page;

use std::sync::Arc;

use eframe::egui_wgpu::{WgpuConfiguration, WgpuSetup, WgpuSetupCreateNew};
use wasm_bindgen::prelude::*;

use super::App;
use super::autorun::Autorun;
use super::dom;
use super::folder::PickedFolder;
use super::session::SessionConfig;
use crate::data::hf::MemoryFolder;
use crate::gpu::{BackendChoice, F16StorageChoice, GpuContext, GpuOptions};
use driver::{Shared, WebApp, drive};
pub use headless::train_headless;
pub use page::STALL_SECS;

/// Start the app in the canvas `canvas_id`. On failure the page's `#message` says why
/// (and, during an autorun, the result carries the error), and the promise rejects.
#[wasm_bindgen]
pub async fn start(canvas_id: String) -> Result<(), JsValue> {
    let query = dom::query_string();
    let autorun = Autorun::from_query(&query)
        .map_err(|e| dom::fail(query.contains("autorun"), &format!("bad page address: {e}")))?;
    let lose_device_at = autorun.as_ref().and_then(|a| a.lose_device_at);
    let config = autorun.map(|a| a.config);
    let autorunning = config.is_some();
    if !dom::has_webgpu() {
        return Err(dom::fail(autorunning, dom::NO_WEBGPU));
    }
    let canvas = dom::canvas(&canvas_id).map_err(|why| dom::fail(autorunning, &why))?;

    // Training's own device (WebGPU only: the app trains with compute shaders).
    let options = GpuOptions {
        backend: BackendChoice::Webgpu,
        adapter: None,
        f16_storage: F16StorageChoice::Auto,
        tensor_cores: Default::default(),
    };
    let ctx = GpuContext::new_async(&options)
        .await
        .map_err(|e| dom::fail(autorunning, &dom::device_failure(&e)))?;
    let mut app = app_for(ctx, config, lose_device_at);
    if let Some(folder) = PICKED_EARLY.with(|early| early.borrow_mut().take()) {
        app.use_folder(folder);
    }
    // A load before this one lost the device to its canvas: no picture this time.
    let no_canvas = fallback::take_no_canvas();
    let shared = Shared::new(app, autorunning, no_canvas.is_none());
    RUNNING.with(|running| *running.borrow_mut() = Some(shared.clone()));
    drive(shared.clone());
    if let Some(why) = no_canvas {
        fallback::notice_no_canvas(&why);
        return Ok(());
    }

    // The picture, on eframe's own device.
    let mut setup = WgpuSetupCreateNew::without_display_handle();
    setup.instance_descriptor.backends = wgpu::Backends::BROWSER_WEBGPU;
    setup.power_preference = wgpu::PowerPreference::HighPerformance;
    let web_options = eframe::WebOptions {
        wgpu_options: WgpuConfiguration {
            wgpu_setup: WgpuSetup::CreateNew(setup),
            ..Default::default()
        },
        ..Default::default()
    };
    let painter = shared.clone();
    let started = eframe::WebRunner::new()
        .start(
            canvas,
            web_options,
            Box::new(move |cc| {
                painter.borrow_mut().egui = Some(cc.egui_ctx.clone());
                Ok(Box::new(WebApp { shared: painter }))
            }),
        )
        .await;
    if let Err(e) = started {
        // Training goes on without the picture; say why the canvas stays empty.
        dom::notice(&format!(
            "{} Training does not need it and goes on: its progress and result appear on \
             this page.",
            dom::start_failure(&e)
        ));
    }
    Ok(())
}

thread_local! {
    /// The running app, for [`pick_folder`] (set once [`start`] has its device), and a
    /// folder picked before that, which [`start`] hands the app.
    static RUNNING: std::cell::RefCell<Option<driver::Handle>> = const { std::cell::RefCell::new(None) };
    static PICKED_EARLY: std::cell::RefCell<Option<PickedFolder>> = const { std::cell::RefCell::new(None) };
}

/// The page's folder input: fine-tune the Hugging Face folder `folder` whose files are
/// `names` (paths inside the folder) with the bytes `files` (`Uint8Array`s, in the same
/// order). Returns a line on what was picked; a folder that is not a Llama folder with a
/// tokenizer is an error saying why, which the page shows beside the input. A folder picked
/// before the app has its device is read now and handed to it when it starts.
#[wasm_bindgen]
pub fn pick_folder(
    folder: String,
    names: js_sys::Array,
    files: js_sys::Array,
) -> Result<String, JsValue> {
    let error = |msg: String| JsValue::from_str(&msg);
    if names.length() != files.length() {
        return Err(error(format!(
            "{folder}: {} names for {} files",
            names.length(),
            files.length()
        )));
    }
    let mut held = Vec::new();
    for (name, bytes) in names.iter().zip(files.iter()) {
        let name = name
            .as_string()
            .ok_or_else(|| error(format!("{folder}: a file name is not a string")))?;
        let bytes = bytes.dyn_into::<js_sys::Uint8Array>().map_err(|_| {
            error(format!(
                "{folder}/{name}: its contents are not a Uint8Array"
            ))
        })?;
        held.push((name, bytes.to_vec()));
    }
    let picked = MemoryFolder::new(&folder, held)
        .and_then(|source| PickedFolder::new(&folder, Box::new(source)))
        .map_err(|e| error(e.to_string()))?;
    RUNNING.with(|running| match running.borrow().as_ref() {
        Some(shared) => {
            let mut shared = shared
                .try_borrow_mut()
                .map_err(|_| error("the app is busy: pick the folder again".into()))?;
            Ok(shared.app.use_folder(picked))
        }
        None => {
            let summary = picked.summary();
            PICKED_EARLY.with(|early| *early.borrow_mut() = Some(picked));
            Ok(format!("{summary} (the app takes it once it has started)"))
        }
    })
}

/// The app training's device drives: it starts `config` (an autorun's) by itself, with the
/// `lose_device_at` test hook armed; without a config it waits for the setup panel. The
/// page and the headless entry (`web/headless.rs`) both train through it.
fn app_for(ctx: GpuContext, config: Option<SessionConfig>, lose_device_at: Option<u64>) -> App {
    let autorunning = config.is_some();
    let counting = config.as_ref().is_some_and(|c| c.numerics.is_some());
    let mut app = App::new(Arc::new(ctx), config.unwrap_or_default());
    app.autostart = autorunning;
    // An autorun that counts numerics shows them.
    if counting {
        app.tab = super::Tab::Numerics;
    }
    if lose_device_at.is_some() {
        app.session.fault_hooks = Some(crate::train::fault_hooks::FaultHooks {
            lose_device_at,
            ..Default::default()
        });
    }
    app
}
