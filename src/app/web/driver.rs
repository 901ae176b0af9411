//! Timer-driven training. The browser stops `requestAnimationFrame` when nothing is
//! presented and in hidden tabs, but runs timers (throttled to about once a second in a
//! hidden tab), so training advances from a `setTimeout` loop as well as inside frames and
//! a run always goes on. Each tick is [`App::tick_at`], the same logic a frame runs; nothing
//! waits on the GPU (read-backs are asynchronous maps the browser resolves). The picture is
//! redrawn at most [`REPAINT`] apart while training (SwiftShader and other CPU adapters
//! spend their time drawing otherwise).

use std::cell::RefCell;
use std::rc::Rc;

use eframe::egui;
use wasm_bindgen::prelude::*;

use super::super::App;
use super::fallback::reload_if_canvas_lost;
use super::page::PageReport;

/// Longest time between two redraws while training (sooner on input).
pub const REPAINT: std::time::Duration = std::time::Duration::from_millis(100);

/// Milliseconds between timer ticks while training (the browser clamps nested timers to
/// 4 ms, and to about 1 s in a hidden tab) and while idle.
const BUSY_TICK_MS: i32 = 1;
const IDLE_TICK_MS: i32 = 200;

/// What the timer and the frames share (one thread: a `RefCell`).
pub struct Shared {
    pub app: App,
    pub page: PageReport,
    /// The renderer's context once eframe has started, to ask for a repaint after a tick.
    pub egui: Option<egui::Context>,
    /// The page draws with a WebGPU canvas (false after a fallback reload).
    pub canvas: bool,
    /// A fallback reload is under way: nothing more to show or publish.
    reloading: bool,
}

pub type Handle = Rc<RefCell<Shared>>;

pub fn now_secs() -> f64 {
    js_sys::Date::now() / 1000.0
}

impl Shared {
    pub fn new(app: App, autorun: bool, canvas: bool) -> Handle {
        Rc::new(RefCell::new(Shared {
            app,
            page: PageReport::new(autorun, now_secs()),
            egui: None,
            canvas,
            reloading: false,
        }))
    }

    /// What a repaint would show differently: steps finished and the status.
    fn shown(&self) -> (usize, String) {
        let session = &self.app.session;
        let steps = session.runs().iter().map(|r| r.history.len()).sum();
        (steps, session.status().label())
    }
}

/// The timer loop: tick, then schedule the next tick (soon while training, slowly while
/// idle). It never stops, so a run started later from the UI is driven too.
pub fn drive(shared: Handle) {
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
pub fn tick(shared: &Handle) -> bool {
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
    if reload_if_canvas_lost(s.canvas, &s.app.session) {
        s.reloading = true;
        return false;
    }
    let s = &mut *s;
    let waiting_for_folder = s.app.autostart && !s.app.session.can_start(&s.app.config);
    s.page.update(&s.app.session, waiting_for_folder, now);
    // Frames need not come on their own: ask for one when there is something new to draw,
    // at most REPAINT apart (drawing on a CPU adapter costs as much as training).
    if let Some(egui) = &s.egui
        && (busy || s.shown() != before)
    {
        egui.request_repaint_after(REPAINT);
    }
    busy
}

/// eframe's side: ticks on frames too (when there are frames) and draws.
pub struct WebApp {
    pub shared: Handle,
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
