//! The app driven headlessly with egui_kittest on a real GPU context (lavapipe on CI):
//! start two modes, advance frames until both have loss points, pause (no new points),
//! stop; the gradient histogram and the precision map show data; a rendered snapshot of
//! the precision map (kittest's wgpu renderer) is compared with `tests/snapshots/`.
//!
//! Cases that depend on the adapter are separate tests named for the case, each asserting
//! what it can: the kernel profile with timestamp queries and the Kernels tab's message
//! without them (a device made without the feature), and autoruns on native and on packed
//! f16 storage (a native case on an adapter without shader-f16 says so on stderr and runs
//! packed, see `common::ctx_native`).
//!
//! Update the snapshot after an intended UI change with
//! `UPDATE_SNAPSHOTS=1 cargo test --test app` and commit `tests/snapshots/*.png`.

mod common;

use std::sync::Arc;

use eframe::egui;
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use webgpu_amp::amp::policy::Precision;
use webgpu_amp::app::autorun::{Autorun, AutorunResult};
use webgpu_amp::app::session::{Session, SessionConfig, Status};
use webgpu_amp::app::{App, Tab, precision};
use webgpu_amp::tensor::DType;

fn config() -> SessionConfig {
    SessionConfig {
        modes: vec![Precision::F32, Precision::AmpF16],
        // Long enough that the run is still going when the test pauses it.
        steps: 400,
        eval_every: 10,
        profile_every: 10,
        ..Default::default()
    }
}

fn app() -> App {
    App::new(Arc::new(common::ctx_owned()), config())
}

/// A context of its own on the test adapter whose device lacks timestamp queries.
fn ctx_without_timestamps() -> webgpu_amp::GpuContext {
    let adapter = common::ctx_owned().adapter;
    let mut desc = webgpu_amp::GpuContext::device_descriptor(&adapter);
    desc.required_features
        .remove(wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS);
    let (device, queue) = pollster::block_on(adapter.request_device(&desc)).expect("device");
    webgpu_amp::GpuContext::from_device(adapter, device, queue, webgpu_amp::F16StorageChoice::Auto)
        .unwrap()
}

/// Runs `config()` headlessly until every mode has `points` loss points; returns the harness.
fn run_until_points(ctx: webgpu_amp::GpuContext, points: usize) -> Harness<'static, App> {
    let mut harness = Harness::builder()
        .with_size(egui::vec2(1280.0, 820.0))
        .build_ui_state(
            |ui, app: &mut App| app.update(ui),
            App::new(Arc::new(ctx), config()),
        );
    harness.get_by_label("Start").click();
    harness.step();
    step_until(&mut harness, 3000, "both modes have loss points", |app| {
        let runs = app.session.runs();
        runs.len() == 2 && runs.iter().all(|r| r.history.len() >= points)
    });
    harness
}

/// Step frames until `done` holds, failing with `what` after `max` frames.
fn step_until(harness: &mut Harness<'_, App>, max: usize, what: &str, done: impl Fn(&App) -> bool) {
    for _ in 0..max {
        if done(harness.state()) {
            return;
        }
        harness.step();
    }
    let app = harness.state();
    let counts: Vec<String> = app
        .session
        .runs()
        .iter()
        .map(|r| format!("{}: {} points", r.precision, r.history.len()))
        .collect();
    panic!(
        "{what}: not reached after {max} frames (status {}, {})",
        app.session.status().label(),
        counts.join(", ")
    );
}

fn points(app: &App) -> Vec<usize> {
    app.session.runs().iter().map(|r| r.history.len()).collect()
}

#[test]
fn start_pause_stop_and_every_panel_shows_data() {
    let mut harness = Harness::builder()
        .with_size(egui::vec2(1280.0, 820.0))
        .build_ui_state(|ui, app: &mut App| app.update(ui), app());

    harness.get_by_label("Start").click();
    harness.step();
    step_until(&mut harness, 3000, "both modes have loss points", |app| {
        let runs = app.session.runs();
        runs.len() == 2 && runs.iter().all(|r| r.history.len() >= 3)
    });
    assert_eq!(*harness.state().session.status(), Status::Running);
    let runs = harness.state().session.runs();
    assert_eq!(runs[0].precision, Precision::F32);
    assert_eq!(runs[1].precision, Precision::AmpF16);
    for r in runs {
        assert!(
            r.history.iter().all(|s| s.loss.is_finite()),
            "{}",
            r.precision
        );
        assert!(r.memory_bytes > 0);
    }
    // The first step of both paths starts from the same weights on the same batch.
    let (a, b) = (runs[0].history[0].loss, runs[1].history[0].loss);
    assert!((a - b).abs() < 0.02 * a.abs(), "first losses {a} vs {b}");
    assert_eq!(runs[1].history[0].scale, 65536.0);

    // Pause: in-flight results land, then nothing new arrives.
    harness.get_by_label("Pause").click();
    harness.step();
    assert_eq!(*harness.state().session.status(), Status::Paused);
    step_until(&mut harness, 500, "in-flight steps drained", |app| {
        !app.session.in_flight()
    });
    let paused_at = points(harness.state());
    for _ in 0..15 {
        harness.step();
    }
    assert_eq!(
        points(harness.state()),
        paused_at,
        "points arrived while paused"
    );

    // Resume briefly, then stop: stopping keeps the results and submits nothing more.
    harness.get_by_label("Resume").click();
    harness.step();
    step_until(&mut harness, 3000, "training resumed", |app| {
        points(app).iter().zip(&paused_at).all(|(n, p)| n > p)
    });
    harness.get_by_label("Stop").click();
    harness.step();
    assert_eq!(*harness.state().session.status(), Status::Stopped);
    step_until(&mut harness, 500, "in-flight steps drained", |app| {
        !app.session.in_flight()
    });
    let stopped_at = points(harness.state());
    for _ in 0..10 {
        harness.step();
    }
    assert_eq!(points(harness.state()), stopped_at);
    assert!(stopped_at.iter().all(|&n| (n as u64) < 400));

    // Validation accuracy and kernel profiles arrived asynchronously along the way.
    for r in harness.state().session.runs() {
        assert!(!r.val_accuracy.is_empty(), "{}: no validation", r.precision);
        assert!(
            r.val_accuracy
                .iter()
                .all(|&(_, a)| (0.0..=1.0).contains(&a))
        );
    }

    // Why scaling matters: the histogram of the chosen layer's gradients.
    harness.get_by_label(Tab::Scaling.title()).click();
    harness.step();
    step_until(&mut harness, 500, "a gradient histogram", |app| {
        app.session.histogram().is_some()
    });
    harness.step();
    let app = harness.state();
    let snap = app.session.histogram().unwrap();
    assert_eq!(
        snap.precision,
        Precision::AmpF16,
        "default: the mode with a GradScaler"
    );
    assert!(snap.scale >= 1.0);
    let run = app
        .session
        .runs()
        .iter()
        .find(|r| r.precision == snap.precision)
        .unwrap();
    let numel = run.trainer().store.layout.get(&snap.param).unwrap().numel() as u64;
    assert_eq!(snap.hist.unscaled.total(), numel);
    assert_eq!(snap.hist.scaled.total(), numel);
    assert!(snap.hist.unscaled.bins.iter().any(|&c| c > 0));
    // Scaling lifts gradients out of f16's flush-to-zero range.
    assert!(snap.hist.scaled.count_below_binade(-24) <= snap.hist.unscaled.count_below_binade(-24));
    harness.get_by_label_contains("after step");

    // Precision map of amp-f16: linear layers compute in f16 with cached weight casts.
    harness.get_by_label(Tab::Precision.title()).click();
    harness.step();
    harness.step();
    let rows = harness
        .state()
        .precision_rows()
        .expect("precision map computed")
        .clone()
        .expect("precision map");
    let linear: Vec<_> = rows
        .iter()
        .filter(|r| r.name == "1" || r.name == "3")
        .collect();
    assert_eq!(linear.len(), 2);
    assert!(linear.iter().all(|r| r.compute_dtype == DType::F16));
    assert_eq!(
        rows.last().unwrap().compute_dtype,
        DType::F32,
        "loss in f32"
    );
    assert!(
        !harness
            .query_all_by_label_contains("weights f32 -> f16")
            .collect::<Vec<_>>()
            .is_empty()
    );

    harness.get_by_label(Tab::Kernels.title()).click();
    harness.step();
    harness.get_by_label("Reset").click();
    harness.step();
    assert_eq!(*harness.state().session.status(), Status::Idle);
    assert!(harness.state().session.runs().is_empty());
}

/// With timestamp queries every mode gets a per-kernel profile. An adapter without them
/// fails this test, unless the run says so (`WEBGPU_AMP_EXPECT_NO_TIMESTAMPS=1`): then it
/// checks that the adapter really lacks them and says on stderr that only the other case ran.
#[test]
fn kernel_profile_with_timestamp_queries() {
    let ctx = common::ctx_owned();
    if !ctx.caps.timestamp_query {
        assert_eq!(
            std::env::var("WEBGPU_AMP_EXPECT_NO_TIMESTAMPS").as_deref(),
            Ok("1"),
            "adapter `{}` has no timestamp queries, so the kernel profile cannot be tested \
             (set WEBGPU_AMP_EXPECT_NO_TIMESTAMPS=1 on adapters known to lack them)",
            ctx.report.name
        );
        common::say_once(
            "no-timestamps",
            &format!(
                "adapter `{}` has NO timestamp queries: the per-kernel profile is NOT tested \
                 here (kernel_tab_without_timestamp_queries_says_so covers that case)",
                ctx.report.name
            ),
        );
        return;
    }
    let mut harness = run_until_points(ctx, 1);
    assert!(harness.state().session.has_timestamps());
    step_until(
        &mut harness,
        3000,
        "a kernel profile for every mode",
        |app| {
            app.session
                .runs()
                .iter()
                .all(|r| !r.kernel_times.is_empty() && !r.gpu_ms.is_empty())
        },
    );
    for r in harness.state().session.runs() {
        assert!(
            r.kernel_times
                .iter()
                .all(|k| k.ms >= 0.0 && !k.label.is_empty()),
            "{}: {:?}",
            r.precision,
            r.kernel_times
        );
        assert!(r.gpu_ms.iter().all(|&(_, ms)| ms > 0.0), "{}", r.precision);
    }
    harness.get_by_label(Tab::Kernels.title()).click();
    harness.step();
    harness.get_by_label_contains("GPU time of one step per op");
}

/// Without timestamp queries (a device made without the feature, so this case runs on
/// every adapter) the app trains, profiles nothing, and the Kernels tab says why.
#[test]
fn kernel_tab_without_timestamp_queries_says_so() {
    let mut harness = run_until_points(ctx_without_timestamps(), 12);
    let app = harness.state();
    assert!(!app.session.has_timestamps());
    for r in app.session.runs() {
        assert!(
            r.kernel_times.is_empty() && r.gpu_ms.is_empty(),
            "{}",
            r.precision
        );
    }
    harness.get_by_label(Tab::Kernels.title()).click();
    harness.step();
    harness.get_by_label_contains("has no timestamp queries");
}

#[test]
fn precision_map_snapshot() {
    let mut app = app();
    app.tab = Tab::Precision;
    app.refresh_precision_map();
    let mut harness = Harness::builder()
        .with_size(egui::vec2(900.0, 260.0))
        .wgpu()
        .build_ui_state(|ui, app: &mut App| precision::show(ui, app), app);
    harness.step();
    harness.snapshot("precision_map");
}

/// Drive a session the way the browser page's autorun does (one frame at a time, nothing
/// blocking) until it has a result to publish; returns the session.
fn finished_session(query: &str, ctx: webgpu_amp::GpuContext) -> Session {
    let run = Autorun::from_query(query)
        .unwrap()
        .expect("autorun asked for");
    let mut session = Session::new(Arc::new(ctx));
    session.start(run.config);
    let mut now = 0.0;
    for _ in 0..20_000 {
        now += 1.0 / 60.0;
        session.tick(now);
        if AutorunResult::from_session(&session).is_some() {
            return session;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    panic!(
        "autorun `{query}` did not finish (status {})",
        session.status().label()
    );
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
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
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
