//! The browser entry point (wasm32 only): `web/index.html` loads the module that
//! `scripts/build-web.sh` builds and calls [`start`] with its canvas id. Its twin for the
//! desktop is `native.rs`.
//!
//! The page runs the same [`App`] as `webgpu-amp gui`, with two differences that keep
//! training independent of the picture:
//!
//! - training has a WebGPU device of its own ([`GpuContext::new_async`], with `shader-f16`
//!   where the adapter has it, packed f16 storage where it does not); eframe's renderer
//!   draws on another. A canvas that cannot present (a headless browser without a
//!   compositor for WebGPU, a lost renderer device) leaves training untouched;
//! - training advances from a timer (`setTimeout`), not only inside animation frames: the
//!   browser stops `requestAnimationFrame` when nothing is presented and in hidden tabs,
//!   but runs timers (throttled to about once a second in a hidden tab), so a run always
//!   goes on. Each tick is [`App::tick_at`], the same logic a frame runs; nothing waits on
//!   the GPU (read-backs are asynchronous maps the browser resolves).
//!
//! - the picture is redrawn at most [`REPAINT`] apart while training (SwiftShader and other
//!   CPU adapters spend their time drawing otherwise);
//! - where presenting a WebGPU canvas destroys every WebGPU device of the page (headless
//!   Chromium with only `--enable-unsafe-webgpu`: its software compositor cannot take the
//!   canvas's frames, and the GPU process drops the page's WebGPU instance on the first
//!   frame), the page notices that training's device was lost while the canvas was in use,
//!   reloads once without the picture (a flag in `sessionStorage`) and trains there,
//!   saying so in `#message`.
//!
//! When the page cannot train it says why in `#message`: no WebGPU, no adapter or device,
//! a bad query string, a failed run (a lost device included), or no step finishing for
//! [`STALL_SECS`] seconds. The DOM contract is in `dom.rs`.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use eframe::egui;
use eframe::egui_wgpu::{WgpuConfiguration, WgpuSetup, WgpuSetupCreateNew};
use wasm_bindgen::prelude::*;

use super::App;
use super::autorun::{Autorun, AutorunPublisher, AutorunUpdate};
use super::dom;
use super::session::Status;
use crate::gpu::{BackendChoice, F16StorageChoice, GpuContext, GpuOptions};

/// Seconds without a finished step, while running, before the page says training stalled.
pub const STALL_SECS: f64 = 30.0;

/// How the stall notice starts (it is cleared when steps finish again).
const STALL_NOTICE: &str = "No training step has finished";

/// Longest time between two redraws while training (sooner on input).
const REPAINT: std::time::Duration = std::time::Duration::from_millis(100);

/// The `sessionStorage` key that makes the next load run without the picture; its value is
/// why (the lost device's message).
const NO_CANVAS_KEY: &str = "webgpu-amp-no-canvas";

/// Milliseconds between timer ticks while training (the browser clamps nested timers to
/// 4 ms, and to about 1 s in a hidden tab) and while idle.
const BUSY_TICK_MS: i32 = 1;
const IDLE_TICK_MS: i32 = 200;

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

    // Training's own device (WebGPU only: the app trains with compute shaders).
    let options = GpuOptions {
        backend: BackendChoice::Webgpu,
        adapter: None,
        f16_storage: F16StorageChoice::Auto,
    };
    let ctx = GpuContext::new_async(&options)
        .await
        .map_err(|e| dom::fail(autorunning, &dom::device_failure(&e)))?;
    let mut app = App::new(Arc::new(ctx), config.unwrap_or_default());
    app.autostart = autorunning;
    // A load before this one lost the device to its canvas: no picture this time.
    let no_canvas = dom::take_session_item(NO_CANVAS_KEY);
    let shared = Rc::new(RefCell::new(Shared {
        app,
        autorun: autorunning.then(AutorunPublisher::default),
        egui: None,
        canvas: no_canvas.is_none(),
        reloading: false,
        progress: (0, now_secs()),
        stalled: false,
        failure_shown: false,
    }));
    drive(shared.clone());
    if let Some(why) = no_canvas {
        dom::notice(&format!(
            "This browser cannot show WebGPU frames here: presenting the app's canvas lost \
             every WebGPU device of the page ({why}), so this page runs without the picture. \
             Training is unaffected; its progress and result appear on this page. (Reloading \
             tries the picture again.)"
        ));
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

/// What the timer and the frames share (one thread: a `RefCell`).
struct Shared {
    app: App,
    /// During an autorun, its publisher.
    autorun: Option<AutorunPublisher>,
    /// The renderer's context once eframe has started, to ask for a repaint after a tick.
    egui: Option<egui::Context>,
    /// The page draws with a WebGPU canvas (false after a fallback reload).
    canvas: bool,
    /// A fallback reload is under way: nothing more to show or publish.
    reloading: bool,
    /// (steps finished, when that count last changed), for the stall notice.
    progress: (usize, f64),
    stalled: bool,
    failure_shown: bool,
}

type Handle = Rc<RefCell<Shared>>;

fn now_secs() -> f64 {
    js_sys::Date::now() / 1000.0
}

/// The timer loop: tick, then schedule the next tick (soon while training, slowly while
/// idle). It never stops, so a run started later from the UI is driven too.
fn drive(shared: Handle) {
    let busy = tick(&shared);
    let Some(window) = web_sys::window() else {
        return;
    };
    let next = Closure::once_into_js(move || drive(shared));
    let delay = if busy { BUSY_TICK_MS } else { IDLE_TICK_MS };
    let _ =
        window.set_timeout_with_callback_and_timeout_and_arguments_0(next.unchecked_ref(), delay);
}

/// One tick of training and of what the page shows about it; whether more are wanted soon.
fn tick(shared: &Handle) -> bool {
    // A frame and a timer never run at once (one thread), but never re-enter either.
    let Ok(mut s) = shared.try_borrow_mut() else {
        return true;
    };
    if s.reloading {
        return false;
    }
    let now = now_secs();
    let before = s.shown();
    let busy = s.app.tick_at(now);
    if s.canvas
        && *s.app.session.status() != Status::Finished
        && let Some(why) = s.app.session.ctx().device_lost()
    {
        // Presenting the canvas took every WebGPU device of the page with it (or the GPU
        // went away): load again without the picture, once, before anything is published.
        s.reloading = true;
        dom::set_text(
            "status",
            "the WebGPU device was lost; reloading without the picture",
        );
        dom::set_session_item(NO_CANVAS_KEY, &why);
        dom::reload();
        return false;
    }
    s.report(now);
    // Frames need not come on their own: ask for one when there is something new to draw,
    // at most REPAINT apart (drawing on a CPU adapter costs as much as training).
    if let Some(egui) = &s.egui
        && (busy || s.shown() != before)
    {
        egui.request_repaint_after(REPAINT);
    }
    busy
}

impl Shared {
    /// What a repaint would show differently: steps finished and the status.
    fn shown(&self) -> (usize, String) {
        let session = &self.app.session;
        let steps = session.runs().iter().map(|r| r.history.len()).sum();
        (steps, session.status().label())
    }

    /// The page's lines after a tick: the autorun's progress and result, a failure, a stall.
    fn report(&mut self, now: f64) {
        let session = &self.app.session;
        let hidden = dom::document_hidden();
        if let Some(publisher) = self.autorun.as_mut() {
            match publisher.update(session) {
                Some(AutorunUpdate::Progress(mut line)) => {
                    if hidden {
                        line.push_str(
                            " (tab hidden: training goes on at the browser's background timer rate)",
                        );
                    }
                    dom::set_text("status", &line);
                }
                Some(AutorunUpdate::Finished { status, result }) => {
                    dom::set_text("status", &status);
                    dom::publish(&result.to_json());
                }
                None => {}
            }
        }
        if let Status::Failed(why) = session.status()
            && !self.failure_shown
        {
            self.failure_shown = true;
            dom::notice(&format!("Training stopped: {why}"));
        }
        let steps: usize = session.runs().iter().map(|r| r.history.len()).sum();
        if steps != self.progress.0 || *session.status() != Status::Running {
            self.progress = (steps, now);
            if self.stalled {
                self.stalled = false;
                dom::clear_notice(STALL_NOTICE);
            }
        } else if !self.stalled && now - self.progress.1 > STALL_SECS {
            self.stalled = true;
            dom::notice(&format!(
                "{STALL_NOTICE} for {STALL_SECS:.0} s: the GPU has not returned results ({steps} steps so far{}). The WebGPU device may be stalled or lost; \
                 reload the page to start over.",
                if hidden { "; this tab is hidden" } else { "" }
            ));
        }
    }
}

/// eframe's side: ticks on frames too (when there are frames) and draws.
struct WebApp {
    shared: Handle,
}

impl eframe::App for WebApp {
    fn logic(&mut self, ctx: &egui::Context, _frame: &mut eframe::Frame) {
        if tick(&self.shared) {
            ctx.request_repaint_after(REPAINT);
        }
    }

    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        if let Ok(mut s) = self.shared.try_borrow_mut() {
            s.app.show(ui);
        }
    }
}
