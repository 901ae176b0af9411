//! The AMP doctor end to end (`train::numerics`): a skipped step names where its inf began
//! (a forward output that overflows f16, a weight gradient that overflows in the backward
//! only), keeping the named layer in f32 stops the skipping and follows the f32 run, the
//! counters agree with a CPU count over the tensor read back on every storage, they are the
//! same bits run to run, and counting changes neither the training nor the host's waits.

mod common;

use std::sync::Arc;

use webgpu_amp::GpuContext;
use webgpu_amp::amp::policy::Precision;
use webgpu_amp::data::{Normalization, Split, embedded};
use webgpu_amp::nn::keep_f32::with_keep_f32;
use webgpu_amp::nn::probes::ProbeTensor;
use webgpu_amp::nn::{LossKind, ModelSpec};
use webgpu_amp::ops::numerics::count_cpu;
use webgpu_amp::optim::OptimizerConfig;
use webgpu_amp::tensor::{DType, Storage};
use webgpu_amp::train::numerics::StepNumerics;
use webgpu_amp::train::numerics::advice::{NumericsTally, Suggestion, keep_f32_flag};
use webgpu_amp::train::{BatchTargets, Event, Run, RunSummary, StepConfig, StepStats, Trainer};

const BATCH: usize = 32;

fn split() -> Split {
    embedded::mnist_split(Some(Normalization::MNIST)).unwrap()
}

/// flatten → linear(784→32) → linear(32→10): layer `2` is the third.
fn model() -> ModelSpec {
    ModelSpec::from_json(
        r#"{"input": [1, 28, 28], "layers": [{"flatten": {}}, {"linear": {"out": 32}},
            {"linear": {"out": 10}}]}"#,
    )
    .unwrap()
}

/// The model's initial weights with `name` multiplied by `factor`.
fn init_scaled(spec: &ModelSpec, name: &str, factor: f32) -> Vec<(String, Vec<f32>)> {
    let mut init = spec.init_params(0);
    let p = init.iter_mut().find(|(n, _)| n == name).unwrap();
    p.1.iter_mut().for_each(|v| *v *= factor);
    init
}

fn step(precision: Precision, init_scale: f32) -> StepConfig {
    let mut s = StepConfig::new(
        precision,
        LossKind::CrossEntropy,
        OptimizerConfig::adam(1e-3),
    );
    s.scaler.init_scale = init_scale;
    s
}

type Steps = Vec<(StepStats, Option<Arc<StepNumerics>>)>;

/// `steps` steps of a run through the CLI's loop, with each step's stats and numerics.
fn run(
    ctx: &GpuContext,
    spec: ModelSpec,
    init: &[(String, Vec<f32>)],
    step: StepConfig,
    steps: u64,
) -> (Steps, RunSummary) {
    let split = split();
    let cfg = common::runs::steps_run(step, BATCH, steps);
    let mut run = Run::new(ctx, spec, cfg, &split.train, init, None).unwrap();
    let mut out = Vec::new();
    let summary = run
        .run(ctx, &split, &mut |e| {
            if let Event::Step {
                stats, numerics, ..
            } = e
            {
                out.push((*stats, numerics.clone()));
            }
        })
        .unwrap();
    assert_eq!(out.len() as u64, steps);
    (out, summary)
}

#[test]
fn a_forward_overflow_names_the_layer_the_forward_and_the_output() {
    let ctx = common::ctx_owned();
    let spec = model();
    let init = init_scaled(&spec, "2.weight", 1e5);
    let (steps, _) = run(
        &ctx,
        spec,
        &init,
        step(Precision::AmpF16, 0.25).numerics(Some(1)),
        6,
    );
    for (stats, numerics) in &steps {
        assert!(stats.skipped, "step {} was not skipped", stats.step);
        let n = numerics.as_ref().expect("every step counted");
        let cause = n.skip_cause().expect("a cause");
        assert_eq!(
            (cause.layer.name.as_str(), cause.phase, cause.tensor),
            ("2", "forward", ProbeTensor::Output),
            "step {}: {cause}",
            stats.step
        );
        assert!(cause.non_finite, "{cause}");
        assert_eq!(cause.layer.op, "Linear", "{cause}");
        // The layer before it is clean: the inf began at layer 2.
        let before = n.get(1, ProbeTensor::Output).unwrap();
        assert_eq!(before.counts.non_finite, 0);
        assert!(n.get(2, ProbeTensor::Output).unwrap().counts.overflow > 0);
        println!("step {}: {cause}", stats.step);
    }
}

#[test]
fn a_backward_overflow_names_the_weight_gradient_and_the_backward() {
    let ctx = common::ctx_owned();
    // A loss scaled by 2^20: the loss gradient (≤ 2^20 / 32) and the input gradients stay
    // finite in f16, the last layer's weight gradient (a sum over the batch) does not.
    let cfg = step(Precision::AmpF16, 1048576.0).numerics(Some(1));
    let (steps, _) = run(&ctx, model(), &model().init_params(0), cfg, 1);
    let (stats, numerics) = &steps[0];
    assert!(stats.skipped);
    let n = numerics.as_ref().unwrap();
    let cause = n.skip_cause().expect("a cause");
    println!("{cause}");
    assert_eq!(
        (cause.layer.name.as_str(), cause.phase, cause.tensor),
        ("2", "backward", ProbeTensor::WeightGrad),
        "{cause}"
    );
    for r in &n.records {
        if r.tensor != ProbeTensor::WeightGrad {
            assert_eq!(r.counts.non_finite, 0, "{r:?}");
        }
    }
    // The loss gradient came first in the backward and was finite.
    assert!(n.get(3, ProbeTensor::InputGrad).unwrap().counts.counted());
}

#[test]
fn keep_f32_on_the_named_layer_stops_the_skipping_and_follows_f32() {
    let ctx = common::ctx_owned();
    let spec = model();
    let init = init_scaled(&spec, "2.weight", 1e5);
    let steps = 12;
    // As the doctor says: every step skips at layer 2's output; the advice keeps it in f32.
    let amp = step(Precision::AmpF16, 0.25).numerics(Some(1));
    let (skipping, _) = run(&ctx, spec.clone(), &init, amp.clone(), steps);
    assert!(skipping.iter().all(|(s, _)| s.skipped));
    let mut tally = NumericsTally::new(Precision::AmpF16, true);
    for (s, n) in &skipping {
        tally.add(n.as_ref().unwrap(), s.scale);
    }
    let advice = tally.advice();
    let flag = keep_f32_flag(&advice);
    assert_eq!(flag.as_deref(), Some("--keep-f32 2"), "{advice:?}");
    assert!(
        advice
            .iter()
            .any(|a| a.layer.name == "2" && a.suggestion == Suggestion::KeepF32)
    );

    let kept = with_keep_f32(spec.clone(), &["2".to_string()]).unwrap();
    let (fixed, _) = run(&ctx, kept, &init, amp, steps);
    let (f32_run, _) = run(&ctx, spec, &init, step(Precision::F32, 1.0), steps);
    for ((a, _), (b, _)) in fixed.iter().zip(&f32_run) {
        assert!(!a.skipped, "step {} still skipped", a.step);
        let rel = (a.loss - b.loss).abs() / b.loss.abs();
        assert!(
            rel <= 0.01,
            "step {}: loss {} vs f32 {} (rel {rel})",
            a.step,
            a.loss,
            b.loss
        );
    }
}

#[test]
fn unknown_keep_f32_names_list_the_valid_ones() {
    let e = with_keep_f32(model(), &["fc".to_string()]).unwrap_err();
    let m = e.to_string();
    assert!(m.contains("`fc`") && m.contains("0, 1, 2"), "{m}");
    // A JSON model's own `keep_f32`.
    let spec = ModelSpec::from_json(
        r#"{"input": [4], "layers": [{"linear": {"out": 3}, "keep_f32": true}, {"relu": {}}]}"#,
    )
    .unwrap();
    assert_eq!(spec.keep_f32, ["0"]);
    let policy = webgpu_amp::nn::keep_f32::policy(&spec, Precision::AmpF16, LossKind::Mse).unwrap();
    assert_eq!(policy.overrides.get(&0), Some(&DType::F32));
    let bad = ModelSpec::from_json(
        r#"{"input": [4], "layers": [{"linear": {"out": 3}, "keep_f32": 1}]}"#,
    );
    common::expect_err(bad, &["layer 0", "keep_f32"]);
}

/// One step of `precision` on `ctx` with numerics on; the network output's counts against
/// a CPU count over the output read back.
fn output_counts_match(ctx: &GpuContext, precision: Precision, storage: Storage) {
    let split = split();
    let spec = model();
    let init = init_scaled(&spec, "2.weight", 1e5);
    let cfg = step(precision, 65536.0)
        .numerics(Some(1))
        .numerics_histograms(true);
    let mut t = Trainer::new(ctx, spec, cfg, 10, &init).unwrap();
    let batch = split.train.gather(&(0..BATCH).collect::<Vec<_>>()).unwrap();
    t.train_batch(ctx, BATCH, batch.input(), batch.targets())
        .unwrap();
    let stats = t.finish(ctx).unwrap();
    let n = t.take_numerics(stats[0].step).expect("step 1 counted");
    let net = t.planned_network(BATCH).unwrap();
    assert_eq!(net.output.storage(), storage);
    let values = net.output.read_f32(ctx).unwrap();
    let record = n.get(2, ProbeTensor::Output).unwrap();
    assert_eq!(record.stored, storage.dtype());
    assert_eq!(record.counts, count_cpu(&values, n.low), "{precision}");
    assert!(
        record.counts.overflow > 0 || precision == Precision::AmpBf16,
        "{precision}: the scaled layer should reach f16's threshold: {:?}",
        record.counts
    );
}

#[test]
fn counters_match_a_cpu_count_on_native_f16() {
    let ctx = common::ctx_owned_native();
    let storage = ctx.storage_for(DType::F16);
    output_counts_match(&ctx, Precision::AmpF16, storage);
}

#[test]
fn counters_match_a_cpu_count_on_packed_f16() {
    let ctx = common::ctx_owned_packed();
    output_counts_match(&ctx, Precision::AmpF16, Storage::F16Packed);
}

#[test]
fn counters_match_a_cpu_count_on_bf16() {
    let ctx = common::ctx_owned();
    output_counts_match(&ctx, Precision::AmpBf16, Storage::BF16);
}

#[test]
fn counting_is_the_same_bits_run_to_run_and_changes_no_step() {
    let ctx = common::ctx_owned();
    let spec = model();
    let init = spec.init_params(0);
    let amp = step(Precision::AmpF16, 65536.0);
    let (a, a_sum) = run(&ctx, spec.clone(), &init, amp.clone().numerics(Some(1)), 8);
    let (b, b_sum) = run(&ctx, spec.clone(), &init, amp.clone().numerics(Some(1)), 8);
    let (off, off_sum) = run(&ctx, spec, &init, amp, 8);
    for (((sa, na), (sb, nb)), (so, no)) in a.iter().zip(&b).zip(&off) {
        assert_eq!(na, nb, "step {}: the counts differ run to run", sa.step);
        assert!(no.is_none());
        // The passes only read: the same losses, scales and skips, bit for bit.
        for (x, y) in [(sa, sb), (sa, so)] {
            assert_eq!(x.loss.to_bits(), y.loss.to_bits(), "step {}", x.step);
            assert_eq!((x.scale, x.skipped), (y.scale, y.skipped));
        }
    }
    // No new wait: counting rides home in the stats slots.
    for s in [&a_sum, &b_sum] {
        assert_eq!(s.host_waits, off_sum.host_waits);
        assert_eq!(s.throttle_waits, off_sum.throttle_waits);
    }
}

#[test]
fn every_n_counts_steps_one_n_plus_one_and_so_on() {
    let ctx = common::ctx_owned();
    let spec = model();
    let init = spec.init_params(0);
    let cfg = step(Precision::AmpF16, 65536.0).numerics(Some(3));
    let (steps, _) = run(&ctx, spec, &init, cfg, 7);
    let counted: Vec<u64> = steps
        .iter()
        .filter(|(_, n)| n.is_some())
        .map(|(s, _)| s.step)
        .collect();
    assert_eq!(counted, [1, 4, 7]);
}

#[test]
fn a_view_counted_once_is_reported_for_both_layers() {
    // mnist-cnn's flatten hands on pool's output and fc's input gradient as views: one pass
    // each, the counts reported under both layers.
    let ctx = common::ctx_owned();
    let split = split();
    let spec = webgpu_amp::nn::preset("mnist-cnn", &[1, 28, 28], 10).unwrap();
    let init = spec.init_params(0);
    let cfg = step(Precision::AmpF16, 65536.0).numerics(Some(1));
    let mut t = Trainer::new(&ctx, spec, cfg, 10, &init).unwrap();
    let batch = split.train.gather(&(0..8).collect::<Vec<_>>()).unwrap();
    t.train_batch(&ctx, 8, batch.input(), batch.targets())
        .unwrap();
    let stats = t.finish(&ctx).unwrap();
    let n = t.take_numerics(stats[0].step).unwrap();
    let row = |name: &str| {
        n.layers
            .iter()
            .rev()
            .find(|l| l.name == name)
            .unwrap()
            .index
    };
    let (pool, flatten, fc) = (row("pool"), row("flatten"), row("fc"));
    let counts = |layer, tensor| &n.get(layer, tensor).unwrap().counts;
    assert_eq!(
        counts(flatten, ProbeTensor::Output),
        counts(pool, ProbeTensor::Output)
    );
    assert_eq!(
        counts(flatten, ProbeTensor::Output).elements,
        8 * 64 * 7 * 7
    );
    assert_eq!(
        counts(flatten, ProbeTensor::InputGrad),
        counts(fc, ProbeTensor::InputGrad)
    );
    // A pass per record, one more per bias (conv1, conv2, fc), none for the two views; fewer
    // grouped (grouped_passes_count_what_a_pass_per_tensor_counts checks their counts).
    let each = cfg_one_each(&ctx, spec_of("mnist-cnn"), 8);
    assert_eq!(each, n.records.len() + 3 - 2);
    let grouped = t.numerics_passes(8).unwrap();
    assert!(
        grouped < each / 2,
        "{grouped} passes grouped, {each} one each"
    );
}

fn spec_of(preset: &str) -> ModelSpec {
    webgpu_amp::nn::preset(preset, &[1, 28, 28], 10).unwrap()
}

/// The counting passes of `spec` at `batch` with a pass per tensor.
fn cfg_one_each(ctx: &GpuContext, spec: ModelSpec, batch: usize) -> usize {
    let init = spec.init_params(0);
    let cfg = step(Precision::AmpF16, 65536.0)
        .numerics(Some(1))
        .numerics_one_pass_each(true);
    let mut t = Trainer::new(ctx, spec, cfg, 10, &init).unwrap();
    let split = split();
    let b = split.train.gather(&(0..batch).collect::<Vec<_>>()).unwrap();
    t.train_batch(ctx, batch, b.input(), b.targets()).unwrap();
    t.finish(ctx).unwrap();
    t.numerics_passes(batch).unwrap()
}

/// One counted step of `cfg` (numerics on, `accum` micro-batches of `batch` samples) of a
/// GPT on token ids; its numerics and the dispatches they took.
fn gpt_counts(ctx: &GpuContext, cfg: StepConfig, accum: usize) -> (StepNumerics, usize, f32) {
    const VOCAB: usize = 11;
    const T: usize = 8;
    let spec = ModelSpec::from_json(&format!(
        r#"{{"gpt": {{"vocab_size": {VOCAB}, "block_size": {T}, "n_layer": 2, "n_head": 2,
             "n_embd": 16, "dropout": 0.0, "bias": true}}}}"#
    ))
    .unwrap();
    let init = spec.init_params(1);
    let batch = 4;
    let mut t = Trainer::new(ctx, spec, cfg.grad_accum(accum), VOCAB, &init).unwrap();
    for m in 0..accum {
        let tokens: Vec<u32> = (0..batch * T)
            .map(|i| ((i * 5 + 3 + m) % VOCAB) as u32)
            .collect();
        let labels: Vec<u32> = (0..batch * T)
            .map(|i| ((i * 3 + 1 + 2 * m) % VOCAB) as u32)
            .collect();
        t.train_batch(ctx, batch, &tokens, BatchTargets::Classes(&labels))
            .unwrap();
    }
    let stats = t.finish(ctx).unwrap();
    let n = t.take_numerics(stats[0].step).expect("step 1 counted");
    (n, t.numerics_passes(batch).unwrap(), stats[0].loss)
}

/// Counting every tensor complete and intact at one point in one pass counts exactly what
/// a pass per tensor right after the kernel that completes it counts: a GPT (activation
/// gradients ping-ponging in an arena, residual sums, the lm_head tied to the embedding,
/// weight gradients over two micro-batches) and mnist-cnn, with the histograms, on native
/// and packed f16.
#[test]
fn grouped_passes_count_what_a_pass_per_tensor_counts() {
    for ctx in [common::ctx_native(), common::ctx_packed()] {
        for accum in [1, 2] {
            let cfg = step(Precision::AmpF16, 1024.0)
                .numerics(Some(1))
                .numerics_histograms(true);
            let (grouped, few, loss) = gpt_counts(ctx, cfg.clone(), accum);
            let (each, many, each_loss) = gpt_counts(ctx, cfg.numerics_one_pass_each(true), accum);
            assert_eq!(grouped.records.len(), each.records.len());
            for (g, e) in grouped.records.iter().zip(&each.records) {
                assert_eq!(g, e, "gpt, {accum} micro-batches");
            }
            assert_eq!(grouped, each);
            assert_eq!(loss.to_bits(), each_loss.to_bits());
            assert!(grouped.records.iter().all(|r| r.counts.counted()));
            assert!(few * 2 < many, "{few} passes grouped, {many} one each");
        }
    }
    let ctx = common::ctx_owned();
    let split = split();
    let b = split.train.gather(&(0..8).collect::<Vec<_>>()).unwrap();
    let counted = |one_each: bool| {
        let spec = spec_of("mnist-cnn");
        let init = spec.init_params(0);
        let cfg = step(Precision::AmpF16, 65536.0)
            .numerics(Some(1))
            .numerics_histograms(true)
            .numerics_one_pass_each(one_each);
        let mut t = Trainer::new(&ctx, spec, cfg, 10, &init).unwrap();
        t.train_batch(&ctx, 8, b.input(), b.targets()).unwrap();
        let stats = t.finish(&ctx).unwrap();
        t.take_numerics(stats[0].step).unwrap()
    };
    assert_eq!(counted(false), counted(true), "mnist-cnn");
}

/// A BatchNorm in the doctor (issue 40): its output counted in the low dtype (the stem's
/// `bn1 → relu` runs as one kernel, which writes both outputs: a BatchNorm output left
/// unwritten would count all zeros), its weight and bias gradients in f32, and
/// `--keep-f32 bn1` moving its output to f32.
#[test]
fn a_batchnorm_is_counted_and_kept_in_f32_by_its_name() {
    let ctx = common::ctx_owned();
    let split = split();
    let counted = |keep: &[&str]| {
        let spec = spec_of("resnet-tiny");
        let keep: Vec<String> = keep.iter().map(|s| s.to_string()).collect();
        let spec = if keep.is_empty() {
            spec
        } else {
            with_keep_f32(spec, &keep).unwrap()
        };
        let init = spec.init_params(0);
        let cfg = step(Precision::AmpF16, 65536.0).numerics(Some(1));
        let mut t = Trainer::new(&ctx, spec, cfg, 10, &init).unwrap();
        let batch = split.train.gather(&(0..4).collect::<Vec<_>>()).unwrap();
        t.train_batch(&ctx, 4, batch.input(), batch.targets())
            .unwrap();
        let stats = t.finish(&ctx).unwrap();
        t.take_numerics(stats[0].step).unwrap()
    };
    let n = counted(&[]);
    let layer = |name: &str| n.layers.iter().find(|l| l.name == name).unwrap().index;
    let (bn1, relu) = (layer("bn1"), layer("relu"));
    let out = n.get(bn1, ProbeTensor::Output).unwrap();
    assert_eq!(out.stored, DType::F16, "{out:?}");
    assert_eq!(out.counts.elements, 4 * 8 * 28 * 28);
    // Normalised values: a few exact zeros at most, where the ReLU after it zeroes about half.
    assert!(out.counts.zero < out.counts.elements / 100, "{out:?}");
    let after = &n.get(relu, ProbeTensor::Output).unwrap().counts;
    assert!(after.zero > after.elements / 4, "{after:?}");
    let grad = n.get(bn1, ProbeTensor::WeightGrad).unwrap();
    assert_eq!(grad.stored, DType::F32, "{grad:?}");
    let n = counted(&["bn1"]);
    let kept = n.get(layer("bn1"), ProbeTensor::Output).unwrap();
    assert_eq!(kept.stored, DType::F32, "{kept:?}");
}
