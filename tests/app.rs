//! The app driven headlessly with egui_kittest on a real GPU context (lavapipe on CI):
//! start two modes, advance frames until both have loss points, pause (no new points),
//! stop; the gradient histogram and the precision map show data; a rendered snapshot of
//! the precision map (kittest's wgpu renderer) is compared with `tests/snapshots/`.
//!
//! Cases that depend on the adapter are separate tests named for the case, each asserting
//! what it can: the kernel profile with timestamp queries and the Kernels tab's message
//! without them (a device made without the feature). The browser page's autorun is in
//! `app/autorun.rs`.
//!
//! Update the snapshot after an intended UI change with
//! `UPDATE_SNAPSHOTS=1 cargo test --test app` and commit `tests/snapshots/*.png`.

#[path = "app/autorun.rs"]
mod autorun;
mod common;

use std::sync::Arc;

use eframe::egui;
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use webgpu_amp::amp::policy::Precision;
use webgpu_amp::app::session::{SessionConfig, Status};
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
    let tensor_cores = webgpu_amp::TensorCoreChoice::Auto;
    let mut desc = webgpu_amp::GpuContext::device_descriptor(&adapter, tensor_cores);
    desc.required_features
        .remove(wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS);
    let (device, queue) = pollster::block_on(adapter.request_device(&desc)).expect("device");
    let f16 = webgpu_amp::F16StorageChoice::Auto;
    webgpu_amp::GpuContext::from_device(adapter, device, queue, f16, tensor_cores).unwrap()
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
