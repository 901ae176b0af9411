//! The page's DOM, for the browser entry (wasm32 only).
//!
//! DOM contract (what `web/index.html` provides and the end-to-end test reads):
//! - `#message`: hidden until something stops the app or training (no WebGPU, no adapter or
//!   device, a bad query string, a failed run) or the page wants to say something about it
//!   (the picture cannot be drawn, no step has finished for a while); then it shows why;
//! - `#status`: one line of progress during an autorun;
//! - `#result`: the autorun's JSON result, also published as `window.webgpuAmpResult`.

use wasm_bindgen::prelude::*;

/// Shown when the browser has no WebGPU at all (`navigator.gpu` missing).
pub const NO_WEBGPU: &str = "WebGPU is not available in this browser, so webgpu-amp cannot \
train here. Use a browser with WebGPU enabled (Chrome or Edge 113+, Safari 26+, Firefox 141+ \
on Windows; on Linux Chrome needs chrome://flags/#enable-unsafe-webgpu), or run the native \
app: `webgpu-amp gui`.";

/// Why eframe (the picture) could not start, in words for the page.
pub fn start_failure(e: &JsValue) -> String {
    let why = e
        .as_string()
        .unwrap_or_else(|| format!("{e:?}"))
        .replace("Failed to create wgpu painter: ", "");
    explain(&why)
}

/// Why training's WebGPU device could not be made, in words for the page.
pub fn device_failure(e: &crate::Error) -> String {
    match e {
        // The native message's advice (install Mesa) does not apply in a browser.
        crate::Error::NoAdapter { .. } => explain("requestAdapter() gave no adapter"),
        other => explain(&other.to_string()),
    }
}

fn explain(why: &str) -> String {
    if why.contains("adapter") {
        // wgpu's own words here ("... webgpu not requested") mislead; say what happened.
        format!(
            "WebGPU is present, but the browser offered no GPU adapter (WebGPU may be \
             turned off, or this GPU blocklisted; on Linux, Chrome needs \
             chrome://flags/#enable-unsafe-webgpu). Details: {why}"
        )
    } else {
        format!("WebGPU is present, but the app could not start on it: {why}")
    }
}

/// Show `text` in `#message` without ending anything (a notice: the picture failed, a run
/// failed, training stalled).
pub fn notice(text: &str) {
    if let Some(el) = element("message") {
        el.set_text_content(Some(text));
        let _ = el.remove_attribute("hidden");
    }
}

/// Hide `#message` again if it shows a notice starting with `prefix`.
pub fn clear_notice(prefix: &str) {
    if let Some(el) = element("message")
        && el.text_content().is_some_and(|t| t.starts_with(prefix))
    {
        el.set_text_content(None);
        let _ = el.set_attribute("hidden", "");
    }
}

/// Whether the page is hidden (a background tab, a minimised window).
pub fn document_hidden() -> bool {
    web_sys::window()
        .and_then(|w| w.document())
        .is_some_and(|d| d.hidden())
}

/// Remove and return a `sessionStorage` item (`None` when absent or storage is off).
pub fn take_session_item(key: &str) -> Option<String> {
    let storage = web_sys::window()?.session_storage().ok()??;
    let value = storage.get_item(key).ok()??;
    let _ = storage.remove_item(key);
    Some(value)
}

pub fn set_session_item(key: &str, value: &str) {
    if let Some(Ok(Some(storage))) = web_sys::window().map(|w| w.session_storage()) {
        let _ = storage.set_item(key, value);
    }
}

/// Load the page again (same address).
pub fn reload() {
    if let Some(w) = web_sys::window() {
        let _ = w.location().reload();
    }
}

pub fn query_string() -> String {
    web_sys::window()
        .and_then(|w| w.location().search().ok())
        .unwrap_or_default()
}

/// `navigator.gpu` exists (the adapter may still be refused; `start` reports that).
pub fn has_webgpu() -> bool {
    web_sys::window().is_some_and(|w| {
        js_sys::Reflect::get(&w.navigator(), &JsValue::from_str("gpu"))
            .is_ok_and(|gpu| !gpu.is_undefined() && !gpu.is_null())
    })
}

/// The page's `<canvas id="canvas_id">`, or why not.
pub fn canvas(canvas_id: &str) -> Result<web_sys::HtmlCanvasElement, String> {
    element(canvas_id)
        .and_then(|e| e.dyn_into::<web_sys::HtmlCanvasElement>().ok())
        .ok_or_else(|| format!("no <canvas id=\"{canvas_id}\"> in the page"))
}

/// Show `why` in `#message`; during an autorun also publish a failed result, so a test
/// waiting for one ends at once with the reason. Returns the error for the promise.
pub fn fail(autorun: bool, why: &str) -> JsValue {
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
pub fn publish(json: &str) {
    set_text("result", json);
    if let (Some(window), Ok(value)) = (web_sys::window(), js_sys::JSON::parse(json)) {
        let _ = js_sys::Reflect::set(&window, &JsValue::from_str("webgpuAmpResult"), &value);
    }
}

fn element(id: &str) -> Option<web_sys::Element> {
    web_sys::window()?.document()?.get_element_by_id(id)
}

pub fn set_text(id: &str, text: &str) {
    if let Some(el) = element(id) {
        el.set_text_content(Some(text));
    }
}
