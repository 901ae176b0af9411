//! The browser page's autorun, driven one frame at a time as the page does: it trains one
//! mode and publishes the result the page shows, on native and on packed f16 storage (a
//! native case on an adapter without shader-f16 says so on stderr and runs packed, see
//! `common::ctx_native`), skips overflowing steps, publishes a bad model's error, and trains
//! the same steps as the CLI.

use webgpu_amp::app::autorun::AutorunResult;
use webgpu_amp::app::session::{Session, Status};

use super::common;
use super::common::cli::assert_success;

/// Drive a session the way the browser page's autorun does until it has a result to
/// publish (20,000 frames at most); returns the session.
fn finished_session(query: &str, ctx: webgpu_amp::GpuContext) -> Session {
    common::autorun::finished_session(query, ctx, 20_000.0 / 60.0)
}

/// The result the page publishes after an autorun.
fn autorun(query: &str, ctx: webgpu_amp::GpuContext) -> AutorunResult {
    AutorunResult::from_session(&finished_session(query, ctx)).expect("finished")
}

#[test]
fn autorun_trains_one_mode_and_publishes_the_result_the_page_shows() {
    autorun_publishes_the_result(common::ctx_owned());
}

/// The autorun on packed f16 storage (what the browser's SwiftShader adapter uses).
#[test]
fn autorun_on_packed_f16_storage() {
    let ctx = common::ctx_owned_packed();
    assert_eq!(ctx.f16_storage, webgpu_amp::F16Storage::Packed);
    autorun_publishes_the_result(ctx);
}

/// The autorun on native f16 storage (an adapter without shader-f16 says so and runs packed).
#[test]
fn autorun_on_native_f16_storage() {
    autorun_publishes_the_result(common::ctx_owned_native());
}

/// A first scale of 2^40 overflows amp-f16's backward: the page's run skips steps, halving
/// the scale each time, until the gradients fit, then trains. Per storage, as the browser
/// does on packed storage (`web/e2e`).
fn overflow_skips_steps(ctx: webgpu_amp::GpuContext) {
    let storage = ctx.f16_storage;
    let r = autorun(
        "?autorun=1&precision=amp-f16&steps=40&batch=32&init_scale=1099511627776",
        ctx,
    );
    assert!(r.ok, "autorun failed: {:?}", r.error);
    assert_eq!(r.f16_storage, storage);
    let skipped = r.skipped_steps;
    assert!(
        (1..40).contains(&skipped),
        "{storage:?}: {skipped} of 40 steps skipped"
    );
    // No growth within 40 steps: each skip halved the scale, nothing else moved it.
    let scale = r.final_scale.unwrap();
    assert_eq!(
        scale,
        2f32.powi(40 - skipped as i32),
        "{storage:?}: {skipped} skips"
    );
    assert!(r.last_loss.unwrap().is_finite());
    eprintln!(
        "overflow on {} ({storage:?} f16): {skipped} of 40 steps skipped, final scale {scale}",
        r.adapter
    );
}

#[test]
fn overflow_skips_steps_on_packed_f16_storage() {
    overflow_skips_steps(common::ctx_owned_packed());
}

#[test]
fn overflow_skips_steps_on_native_f16_storage() {
    overflow_skips_steps(common::ctx_owned_native());
}

fn autorun_publishes_the_result(ctx: webgpu_amp::GpuContext) {
    let storage = ctx.f16_storage;
    let r = autorun("?autorun=1&precision=amp-f16&steps=40&batch=32", ctx);
    assert!(r.ok, "autorun failed: {:?}", r.error);
    assert_eq!((r.steps, r.precision.as_str()), (40, "amp-f16"));
    assert_eq!(r.f16_storage, storage);
    let want = match storage {
        webgpu_amp::F16Storage::Native => "native",
        webgpu_amp::F16Storage::Packed => "packed",
    };
    assert_eq!(
        r.trained_storage, want,
        "amp-f16 trains on the storage it reports"
    );
    let (first, last) = (r.first_loss.unwrap(), r.last_loss.unwrap());
    assert!(last < 0.7 * first, "loss {first} -> {last}");
    // The scaler starts at 2^16 and only moves by powers of two.
    let scale = r.final_scale.unwrap();
    assert!(scale > 0.0 && scale.log2().fract() == 0.0, "scale {scale}");
    assert!(r.ms_per_step.unwrap() > 0.0);
    let json: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
    for key in [
        "adapter",
        "f16_storage",
        "trained_storage",
        "precision",
        "steps",
        "first_loss",
        "last_loss",
        "final_scale",
        "skipped_steps",
        "ms_per_step",
    ] {
        assert!(!json[key].is_null(), "`{key}` missing in {json}");
    }

    let r = autorun("?autorun=1&precision=f32&steps=5", common::ctx_owned());
    assert!(r.ok, "autorun failed: {:?}", r.error);
    assert_eq!(r.trained_storage, "f32");
    assert_eq!((r.steps, r.final_scale, r.skipped_steps), (5, Some(1.0), 0));
}

#[test]
fn autorun_with_a_bad_model_publishes_the_error() {
    let r = autorun("?autorun=1&model=resnet", common::ctx_owned());
    assert!(!r.ok);
    assert!(
        r.error.as_deref().unwrap_or("").contains("resnet"),
        "{:?}",
        r.error
    );
}

/// The app and the CLI share one training loop (`train::Run`): the same model, data set,
/// precision, optimizer, batch size and seed give the same step stats, bit for bit, whether
/// a session advances it frame by frame or `train --metrics` runs it.
#[test]
fn the_app_and_the_cli_train_the_same_steps() {
    type Row = (u64, u32, u32, bool);
    let steps = 12;
    let query = format!(
        "?autorun=1&precision=amp-f16&model=mlp&dataset=default&steps={steps}&batch=32&seed=3"
    );
    let session = finished_session(&query, common::ctx_owned());
    assert_eq!(*session.status(), Status::Finished);
    let app: Vec<Row> = session.runs()[0]
        .history
        .iter()
        .map(|s| (s.step, s.loss.to_bits(), s.scale.to_bits(), s.skipped))
        .collect();

    let dir = std::env::temp_dir().join(format!("webgpu-amp-app-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let metrics = dir.join("metrics.jsonl");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_webgpu-amp"))
        .args(["train", "--model", "mlp", "--precision", "amp-f16"])
        .args(["--dataset", "default", "--steps", &steps.to_string()])
        .args(["--batch-size", "32", "--seed", "3", "--optimizer", "adam"])
        .args(["--lr", "0.001", "--no-validate", "--metrics"])
        .arg(&metrics)
        .output()
        .unwrap();
    assert_success(&out, "webgpu-amp");
    let text = std::fs::read_to_string(&metrics).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let cli: Vec<Row> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v.get("loss").is_some())
        .map(|v| {
            let f = |k: &str| serde_json::from_value::<f32>(v[k].clone()).unwrap();
            let skipped = v["skipped"].as_bool().unwrap();
            (
                v["step"].as_u64().unwrap(),
                f("loss").to_bits(),
                f("scale").to_bits(),
                skipped,
            )
        })
        .collect();
    assert_eq!(cli.len(), steps as usize);
    assert_eq!(
        app, cli,
        "(step, loss bits, scale bits, skipped): app vs CLI"
    );
}
