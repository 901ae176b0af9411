//! The browser build's headless entry: an autorun without a page. [`train_headless`] takes
//! the page's autorun query (`autorun=1&precision=amp-f16&steps=12&model=gpt-tiny&batch=8`)
//! and trains it through the same [`App`](super::super::App) the page's timer drives (the
//! app session and `train::Run`, no second trainer), on a WebGPU device of its own, and
//! resolves to the page's published result plus every step's loss. It touches no DOM: it
//! needs only `navigator.gpu` on a global that wgpu takes for a window or a worker, and
//! `setTimeout`. `web/dawn/train.mjs` runs it in Node on Dawn (npm `webgpu`).

use serde::Serialize;
use wasm_bindgen::prelude::*;

use super::super::autorun::{Autorun, AutorunPublisher, AutorunResult, AutorunUpdate};
use super::app_for;
use super::driver::now_secs;
use crate::gpu::{BackendChoice, F16StorageChoice, GpuContext, GpuOptions};

/// Milliseconds between ticks: the page's timer while training (`driver::BUSY_TICK_MS`).
const TICK_MS: i32 = 1;

/// What [`train_headless`] resolves to (as JSON): the page's result and the run's steps.
#[derive(Serialize)]
struct HeadlessResult {
    #[serde(flatten)]
    result: AutorunResult,
    /// Every finished step's loss, step 1 first.
    losses: Vec<f32>,
    /// The GradScaler's scale after each step.
    scales: Vec<f32>,
    /// The steps (1-based) skipped on inf/NaN gradients.
    skipped: Vec<u64>,
}

/// Train the autorun `query` (the page's query string; `autorun=1` is required) with f16
/// storage `f16_storage` (`auto`, `native` or `packed`, as the CLI's `--f16-storage`). The
/// promise resolves to the result as a JSON string once every step has come back, also
/// when training failed (`ok: false` and `error`); it rejects when the query is bad or no
/// device could be made (`navigator.gpu` missing, no adapter, native f16 on an adapter
/// without `shader-f16`).
#[wasm_bindgen]
pub async fn train_headless(query: String, f16_storage: String) -> Result<String, JsValue> {
    let fail = |why: String| JsValue::from_str(&format!("train_headless: {why}"));
    let autorun = Autorun::from_query(&query)
        .map_err(|e| fail(format!("bad query `{query}`: {e}")))?
        .ok_or_else(|| fail(format!("query `{query}` asks for no autorun (autorun=1)")))?;
    let f16_storage = F16StorageChoice::parse(&f16_storage).map_err(|e| fail(e.to_string()))?;
    let options = GpuOptions {
        backend: BackendChoice::Webgpu,
        adapter: None,
        f16_storage,
        tensor_cores: Default::default(),
    };
    let ctx = GpuContext::new_async(&options)
        .await
        .map_err(|e| fail(e.to_string()))?;
    let mut app = app_for(ctx, Some(autorun.config), autorun.lose_device_at);
    let mut publisher = AutorunPublisher::default();
    let result = loop {
        app.tick_at(now_secs());
        if let Some(AutorunUpdate::Finished { result, .. }) = publisher.update(&app.session) {
            break *result;
        }
        // Read-backs are asynchronous maps the JS event loop resolves: give it a turn.
        sleep_ms(TICK_MS).await?;
    };
    let history = app
        .session
        .runs()
        .first()
        .map(|r| r.history.as_slice())
        .unwrap_or_default();
    let result = HeadlessResult {
        result,
        losses: history.iter().map(|s| s.loss).collect(),
        scales: history.iter().map(|s| s.scale_after).collect(),
        skipped: history
            .iter()
            .filter(|s| s.skipped)
            .map(|s| s.step)
            .collect(),
    };
    serde_json::to_string_pretty(&result).map_err(|e| fail(e.to_string()))
}

/// Resolve after `ms` milliseconds, by the global `setTimeout` (a window's, a worker's or
/// Node's).
async fn sleep_ms(ms: i32) -> Result<(), JsValue> {
    let set_timeout: js_sys::Function =
        js_sys::Reflect::get(&js_sys::global(), &JsValue::from_str("setTimeout"))?
            .dyn_into()
            .map_err(|_| JsValue::from_str("train_headless: no global setTimeout"))?;
    let promise = js_sys::Promise::new(&mut |resolve, _reject| {
        // An error thrown here rejects the promise.
        let _ = set_timeout.call2(&JsValue::NULL, &resolve, &JsValue::from(ms));
    });
    wasm_bindgen_futures::JsFuture::from(promise).await?;
    Ok(())
}
