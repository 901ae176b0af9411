//! The canvas fallback. Where presenting a WebGPU canvas destroys every WebGPU device of the
//! page (headless Chromium with only `--enable-unsafe-webgpu`: its software compositor
//! cannot take the canvas's frames, and the GPU process drops the page's WebGPU instance on
//! the first frame), the page notices that training's device was lost while the canvas was
//! in use, reloads once without the picture (a flag in `sessionStorage`) and trains there,
//! saying so in `#message`.

use super::super::dom;
use super::super::session::{Session, Status};

/// The `sessionStorage` key that makes the next load run without the picture; its value is
/// why (the lost device's message).
const NO_CANVAS_KEY: &str = "webgpu-amp-no-canvas";

/// Why the load before this one gave up its canvas, if it did (and forget it: a reload by
/// the user tries the picture again).
pub fn take_no_canvas() -> Option<String> {
    dom::take_session_item(NO_CANVAS_KEY)
}

/// The notice of a page that runs without the picture.
pub fn notice_no_canvas(why: &str) {
    dom::notice(&format!(
        "This browser cannot show WebGPU frames here: presenting the app's canvas lost every \
         WebGPU device of the page ({why}), so this page runs without the picture. Training \
         is unaffected; its progress and result appear on this page. (Reloading tries the \
         picture again.)"
    ));
}

/// With a canvas in use and the run not finished, a lost training device means the canvas
/// took it (or the GPU went away): reload without the picture, once, before anything is
/// published. Whether the page is reloading.
pub fn reload_if_canvas_lost(canvas: bool, session: &Session) -> bool {
    // A device the page destroyed itself (the `lose_device_at` test hook) is no canvas's
    // doing: the run fails and says so instead.
    if !canvas || *session.status() == Status::Finished || session.ctx().device_destroyed() {
        return false;
    }
    let Some(why) = session.ctx().device_lost() else {
        return false;
    };
    dom::set_text(
        "status",
        "the WebGPU device was lost; reloading without the picture",
    );
    dom::set_session_item(NO_CANVAS_KEY, &why);
    dom::reload();
    true
}
