//! What the AMP doctor concludes from counts (no GPU): where a skipped step's inf began
//! (the first inf/NaN in step order, a cast's overflow before it, pure f16's rounded weight
//! gradients), and the end-of-run advice (overflow the GradScaler cannot fix means f32;
//! gradient underflow it fixes means nothing; f32 tensors at f16's threshold count only
//! where they are to be rounded), with the flag to paste.

use std::sync::Arc;

use webgpu_amp::amp::policy::Precision;
use webgpu_amp::nn::probes::ProbeTensor::{self, InputGrad, Output, WeightGrad};
use webgpu_amp::ops::numerics::{BINS, TensorCounts};
use webgpu_amp::tensor::DType;
use webgpu_amp::train::numerics::advice::{NumericsTally, Suggestion, keep_f32_flag};
use webgpu_amp::train::numerics::{LayerName, Record, StepNumerics, skip_note};

fn layers() -> Arc<Vec<LayerName>> {
    let rows = [
        ("fc1", "Linear"),
        ("ln", "LayerNorm"),
        ("fc2", "Linear"),
        ("loss", "MseLoss"),
    ];
    Arc::new(
        rows.iter()
            .enumerate()
            .map(|(index, (name, op))| LayerName {
                index,
                name: name.to_string(),
                op: op.to_string(),
                loss: index == 3,
            })
            .collect(),
    )
}

/// 1000 values: `non_finite` inf, `overflow` finite values at the threshold (plus the infs),
/// `underflow` tiny ones.
fn counts(non_finite: u64, overflow: u64, underflow: u64) -> TensorCounts {
    TensorCounts {
        elements: 1000,
        non_finite,
        nan: 0,
        overflow: overflow + non_finite,
        underflow,
        zero: 0,
        max_binade: Some(3),
        min_binade: Some(-3),
        binades: vec![0; BINS + 2],
    }
}

fn rec(layer: usize, tensor: ProbeTensor, stored: DType, c: TensorCounts) -> Record {
    Record {
        layer,
        tensor,
        stored,
        counts: c,
    }
}

/// A step of fc1 (f16) → ln (f32) → fc2 (f16) → loss, in step order, with `edit` applied.
fn step(edit: impl Fn(&mut Vec<Record>)) -> StepNumerics {
    let clean = || counts(0, 0, 0);
    let mut records = vec![
        rec(0, Output, DType::F16, clean()),
        rec(1, Output, DType::F32, clean()),
        rec(2, Output, DType::F16, clean()),
        rec(3, InputGrad, DType::F16, clean()),
        rec(2, WeightGrad, DType::F32, clean()),
        rec(2, InputGrad, DType::F16, clean()),
        rec(1, WeightGrad, DType::F32, clean()),
        rec(1, InputGrad, DType::F32, clean()),
        rec(0, WeightGrad, DType::F32, clean()),
    ];
    edit(&mut records);
    StepNumerics {
        low: DType::F16,
        layers: layers(),
        records,
        grads_rounded: false,
    }
}

fn set(records: &mut [Record], layer: usize, tensor: ProbeTensor, c: TensorCounts) {
    let r = records
        .iter_mut()
        .find(|r| r.layer == layer && r.tensor == tensor)
        .unwrap();
    r.counts = c;
}

#[test]
fn the_first_inf_in_step_order_is_the_cause() {
    // fc2's output overflows; everything after it is inf too.
    let n = step(|r| {
        set(r, 2, Output, counts(4, 0, 0));
        set(r, 3, InputGrad, counts(1000, 0, 0));
        set(r, 0, WeightGrad, counts(1000, 0, 0));
    });
    let c = n.skip_cause().unwrap();
    assert_eq!(
        (c.layer.name.as_str(), c.phase, c.tensor),
        ("fc2", "forward", Output)
    );
    assert!(c.non_finite);
    assert_eq!(
        c.to_string(),
        "layer fc2 (Linear) output held inf/NaN, first in the forward"
    );
    assert_eq!(c.short(), "layer fc2 output inf/NaN (forward)");
    // A clean step names nothing.
    assert_eq!(step(|_| {}).skip_cause(), None);
}

#[test]
fn an_f32_tensor_at_the_threshold_before_a_cast_is_the_cause() {
    // ln's f32 input gradient reaches 65520; the cast to f16 before fc1 makes it inf, which
    // fc1's weight gradient then holds.
    let n = step(|r| {
        set(r, 1, InputGrad, counts(0, 7, 0));
        set(r, 0, WeightGrad, counts(3, 0, 0));
    });
    let c = n.skip_cause().unwrap();
    assert_eq!(
        (c.layer.name.as_str(), c.phase, c.tensor),
        ("ln", "backward", InputGrad)
    );
    assert!(!c.non_finite);
    assert!(
        c.to_string().contains("turned inf when rounded to it"),
        "{c}"
    );
}

#[test]
fn pure_f16_names_the_weight_gradient_its_rounding_overflows() {
    let mut n = step(|r| set(r, 2, WeightGrad, counts(0, 5, 0)));
    assert_eq!(
        n.skip_cause(),
        None,
        "amp keeps f32 weight gradients in f32"
    );
    n.grads_rounded = true;
    let c = n.skip_cause().unwrap();
    assert_eq!((c.layer.name.as_str(), c.tensor), ("fc2", WeightGrad));
    assert!(!c.non_finite);
}

#[test]
fn notes_without_a_cause_say_why() {
    assert!(skip_note(None, false, None).contains("--numerics every:1"));
    assert!(skip_note(None, false, Some(10)).contains("every 10-th step"));
    assert!(skip_note(None, true, Some(1)).contains("after the backward"));
}

fn advise(precision: Precision, scaler: bool, steps: &[(f32, StepNumerics)]) -> NumericsTally {
    let mut t = NumericsTally::new(precision, scaler);
    for (scale, n) in steps {
        t.add(n, *scale);
    }
    t
}

#[test]
fn overflow_the_scaler_cannot_fix_means_keep_in_f32() {
    let fwd = |_| step(|r| set(r, 2, Output, counts(1, 0, 0)));
    let t = advise(
        Precision::AmpF16,
        true,
        &[(65536.0, fwd(0)), (32768.0, fwd(1))],
    );
    let a = t.advice();
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!((a[0].layer.name.as_str(), a[0].tensor), ("fc2", Output));
    assert_eq!(a[0].suggestion, Suggestion::KeepF32);
    assert_eq!(a[0].overflow_steps, 2);
    assert_eq!(keep_f32_flag(&a).as_deref(), Some("--keep-f32 fc2"));

    // A backward overflow at a large scale is the GradScaler finding its scale...
    let bwd = || step(|r| set(r, 2, WeightGrad, counts(2, 0, 0)));
    let t = advise(
        Precision::AmpF16,
        true,
        &[(65536.0, bwd()), (32768.0, bwd())],
    );
    assert!(t.advice().is_empty(), "{:?}", t.advice());
    // ...at a scale of 1 or less it is the layer's own.
    let t = advise(Precision::AmpF16, true, &[(0.5, bwd())]);
    assert_eq!(t.advice()[0].suggestion, Suggestion::KeepF32);
}

#[test]
fn underflow_advice_depends_on_where_and_on_the_scaler() {
    let tiny = |layer, tensor| step(move |r| set(r, layer, tensor, counts(0, 0, 200)));
    // Activations below f16's normal range: bf16 keeps f32's range.
    let t = advise(Precision::AmpF16, true, &[(1.0, tiny(0, Output))]);
    assert_eq!(t.advice()[0].suggestion, Suggestion::UseBf16);
    // Gradients: the GradScaler lifts them; without it, turn it on.
    let t = advise(Precision::AmpF16, true, &[(1.0, tiny(2, InputGrad))]);
    assert_eq!(t.advice()[0].suggestion, Suggestion::Nothing);
    let t = advise(Precision::F16, false, &[(1.0, tiny(2, InputGrad))]);
    assert_eq!(t.advice()[0].suggestion, Suggestion::ScalerOn);
    assert_eq!(keep_f32_flag(&t.advice()), None);
    // A few underflowing values (under 5% of the non-zero ones) are no trouble.
    let few = step(|r| set(r, 0, Output, counts(0, 0, 10)));
    assert!(
        advise(Precision::AmpF16, true, &[(1.0, few)])
            .advice()
            .is_empty()
    );
}

#[test]
fn f32_values_at_the_threshold_count_where_they_are_rounded() {
    // ln's f32 output at 65520: harmless under amp-f16 (it stays f32)...
    let big = || step(|r| set(r, 1, Output, counts(0, 9, 0)));
    assert!(
        advise(Precision::AmpF16, true, &[(1.0, big())])
            .advice()
            .is_empty()
    );
    // ...but an f32 run is counted against f16's range: what amp-f16 would meet.
    let t = advise(Precision::F32, false, &[(1.0, big())]);
    assert_eq!(t.advice()[0].suggestion, Suggestion::KeepF32);
    // The loss is f32 already: its gradient is stored like the last layer's output, so
    // the flag keeps that layer.
    let loss = step(|r| set(r, 3, InputGrad, counts(5, 0, 0)));
    let t = advise(Precision::AmpF16, false, &[(1.0, loss)]);
    assert_eq!(t.advice()[0].layer.name, "loss");
    assert_eq!(
        keep_f32_flag(&t.advice()).as_deref(),
        Some("--keep-f32 fc2")
    );
}
