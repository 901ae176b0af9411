//! The app's Numerics panel (the AMP doctor): the setup panel's switch turns counting on, a
//! real run of two modes fills one heat map per mode, clicking a layer shows its exponent
//! histograms; and a rendered snapshot (kittest's wgpu renderer) of the panel over fixed
//! numerics (f16 and f32 side by side, skipped steps marked, a layer selected) is compared
//! with `tests/snapshots/numerics.png`.
//!
//! Update the snapshot after an intended UI change with
//! `UPDATE_SNAPSHOTS=1 cargo test --test app_numerics` and commit the PNG.

mod common;

use std::sync::Arc;

use eframe::egui;
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use webgpu_amp::amp::policy::Precision;
use webgpu_amp::app::numerics::draw;
use webgpu_amp::app::numerics_history::NumericsHistory;
use webgpu_amp::app::session::{SessionConfig, Status};
use webgpu_amp::app::{App, Tab};
use webgpu_amp::nn::probes::ProbeTensor;
use webgpu_amp::ops::numerics::{BINS, LOWEST_BINADE, TensorCounts};
use webgpu_amp::tensor::DType;
use webgpu_amp::train::StepStats;
use webgpu_amp::train::numerics::{LayerName, Record, StepNumerics};

#[test]
fn the_switch_and_a_real_run_fill_the_heat_maps() {
    let config = SessionConfig {
        modes: vec![Precision::F32, Precision::AmpF16],
        steps: 4,
        eval_every: SessionConfig::NEVER,
        profile_every: SessionConfig::NEVER,
        ..Default::default()
    };
    let app = App::new(Arc::new(common::ctx_owned()), config);
    let mut harness = Harness::builder()
        .with_size(egui::vec2(1280.0, 900.0))
        .build_ui_state(|ui, app: &mut App| app.update(ui), app);
    assert_eq!(harness.state().config.numerics, None, "off by default");
    harness
        .get_by_label("count per-layer numerics (AMP doctor)")
        .click();
    harness.step();
    assert_eq!(harness.state().config.numerics, Some(1));
    harness.get_by_label("Start").click();
    for _ in 0..3000 {
        if *harness.state().session.status() == Status::Finished {
            break;
        }
        harness.step();
    }
    assert_eq!(*harness.state().session.status(), Status::Finished);
    for run in harness.state().session.runs() {
        let counted: Vec<u64> = run.numerics.steps.iter().map(|s| s.step).collect();
        assert_eq!(counted, [1, 2, 3, 4], "{}", run.precision);
        // mlp: flatten, linear, relu, linear, then the loss.
        assert_eq!(run.numerics.layers.len(), 5);
    }
    harness.get_by_label(Tab::Numerics.title()).click();
    harness.step();
    harness.step();
    // The panel drew every cell: 4 counted steps × 5 rows, per mode.
    for run in harness.state().session.runs() {
        assert_eq!(run.numerics.cells_drawn, 20, "{}", run.precision);
    }
    // One row per layer per mode; a click on one shows that layer's histograms.
    assert_eq!(harness.query_all_by_label("1 (Linear)").count(), 2);
    harness
        .get_all_by_label("1 (Linear)")
        .next()
        .unwrap()
        .click();
    harness.step();
    harness.step();
    assert_eq!(harness.state().numerics_layer, Some(1));
    harness.get_by_label_contains("amp-f16 · layer 1 (Linear) · step 4");
    harness.get_by_label_contains("f32 · layer 1 (Linear) · step 4");
}

fn layers() -> Arc<Vec<LayerName>> {
    let names = [
        ("0", "Flatten"),
        ("1", "Linear"),
        ("2", "ReLU"),
        ("3", "Linear"),
        ("loss", "CrossEntropyLoss"),
    ];
    Arc::new(
        names
            .iter()
            .enumerate()
            .map(|(index, (name, op))| LayerName {
                index,
                name: name.to_string(),
                op: op.to_string(),
                loss: index == 4,
            })
            .collect(),
    )
}

/// Counts of `n` values: `overflow` of them at or beyond the threshold (inf when
/// `non_finite`), `underflow` below f16's normal range, the rest spread around 2^`center`.
fn counts(n: u64, overflow: u64, underflow: u64, non_finite: bool, center: i32) -> TensorCounts {
    let mut binades = vec![0u64; BINS + 2];
    let normal = n - overflow - underflow;
    for k in 0..5 {
        let e = center - 2 + k;
        binades[(e - LOWEST_BINADE) as usize] += normal / 5;
    }
    binades[(-20 - LOWEST_BINADE) as usize] += underflow;
    if !non_finite {
        binades[(16 - LOWEST_BINADE) as usize] += overflow;
    }
    TensorCounts {
        elements: n,
        non_finite: if non_finite { overflow } else { 0 },
        nan: 0,
        overflow,
        underflow,
        zero: 0,
        max_binade: Some(if overflow > 0 { 16 } else { center + 2 }),
        min_binade: Some(if underflow > 0 { -20 } else { center - 2 }),
        binades,
    }
}

/// A fixed history: amp-f16 skips its first three steps (layer 3's weight gradient
/// overflows), layer 1's output underflows a little; the f32 run meets f16's threshold at
/// layer 3 now and then.
fn history(precision: Precision) -> NumericsHistory {
    let mut h = NumericsHistory::default();
    let amp = precision == Precision::AmpF16;
    for step in 1..=40u64 {
        let skipped = amp && step <= 3;
        let record = |layer, tensor, stored, counts| Record {
            layer,
            tensor,
            stored,
            counts,
        };
        let low = if amp { DType::F16 } else { DType::F32 };
        let under = if step % 4 == 0 { 40 } else { 2 };
        let over = if !amp && step % 7 == 0 { 3 } else { 0 };
        let records = vec![
            record(
                0,
                ProbeTensor::Output,
                DType::F32,
                counts(1000, 0, 0, false, 0),
            ),
            record(
                1,
                ProbeTensor::Output,
                low,
                counts(1000, 0, under, false, -3),
            ),
            record(2, ProbeTensor::Output, low, counts(1000, 0, 0, false, -2)),
            record(3, ProbeTensor::Output, low, counts(100, over, 0, false, 4)),
            record(4, ProbeTensor::InputGrad, low, counts(100, 0, 0, false, 10)),
            record(
                3,
                ProbeTensor::WeightGrad,
                DType::F32,
                counts(500, if skipped { 20 } else { 0 }, 0, skipped, 12),
            ),
            record(3, ProbeTensor::InputGrad, low, counts(1000, 0, 5, false, 6)),
            record(
                1,
                ProbeTensor::WeightGrad,
                DType::F32,
                counts(5000, 0, 50, false, 2),
            ),
        ];
        let n = StepNumerics {
            low: DType::F16,
            layers: layers(),
            records,
            grads_rounded: false,
        };
        let stats = StepStats {
            step,
            loss: 1.0,
            scale: 65536.0,
            scale_after: 65536.0,
            skipped,
            lr: 1e-3,
        };
        h.push(&stats, &Arc::new(n));
    }
    h
}

#[test]
fn numerics_panel_snapshot() {
    let f32_run = history(Precision::F32);
    let amp = history(Precision::AmpF16);
    assert!(amp.steps[0].cause.is_some());
    let state = (f32_run, amp, None::<usize>);
    let mut harness = Harness::builder()
        .with_size(egui::vec2(1100.0, 560.0))
        .wgpu()
        .build_ui_state(
            |ui, (f, a, selected): &mut (NumericsHistory, NumericsHistory, Option<usize>)| {
                draw(ui, &[(Precision::F32, f), (Precision::AmpF16, a)], selected);
            },
            state,
        );
    harness.step();
    harness.get_by_label_contains("step 3 skipped: layer 3 (Linear) weight gradient");
    harness
        .get_all_by_label("3 (Linear)")
        .nth(1)
        .unwrap()
        .click();
    harness.step();
    harness.step();
    assert_eq!(harness.state().2, Some(3));
    harness.get_by_label_contains("amp-f16 · layer 3 (Linear) · step 40");
    harness.snapshot("numerics");
}
