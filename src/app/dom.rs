//! The page's DOM, for the browser entry (wasm32 only).
//!
//! DOM contract (what `web/index.html` provides and the end-to-end test reads):
//! - `#message`: hidden until something stops the app (no WebGPU, a bad query string, a
//!   failed start); then it shows why;
//! - `#status`: one line of progress during an autorun;
//! - `#result`: the autorun's JSON result, also published as `window.webgpuAmpResult`.

use wasm_bindgen::prelude::*;

/// Shown when the browser has no WebGPU at all (`navigator.gpu` missing).
pub const NO_WEBGPU: &str = "WebGPU is not available in this browser, so webgpu-amp cannot \
train here. Use a browser with WebGPU enabled (Chrome or Edge 113+, Safari 26+, Firefox 141+ \
on Windows; on Linux Chrome needs chrome://flags/#enable-unsafe-webgpu), or run the native \
app: `webgpu-amp gui`.";

/// Why eframe could not start, in words for the page.
pub fn start_failure(e: &JsValue) -> String {
    let why = e
        .as_string()
        .unwrap_or_else(|| format!("{e:?}"))
        .replace("Failed to create wgpu painter: ", "");
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
