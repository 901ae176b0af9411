//! Frozen parameters (`nn::frozen`: `"trainable": false` in JSON, `--freeze`, a preset's):
//! after steps of SGD with Nesterov momentum and weight decay, and of AdamW, under amp-f16
//! with the GradScaler, every frozen tensor is bit-identical to its initial value while every
//! other one moves; the optimizer holds moments for the trainable parameters only; a name
//! that matches nothing, and a model with nothing left to train, are errors. PyTorch parity
//! of a frozen BatchNorm weight is scripts/airbench_compat.py's.

mod common;

use common::{ctx, rand_vec};
use webgpu_amp::amp::policy::Precision;
use webgpu_amp::nn::{LossKind, ModelSpec};
use webgpu_amp::optim::OptimizerConfig;
use webgpu_amp::train::{BatchTargets, StepConfig, Trainer};

/// A conv, a BatchNorm whose weight is frozen in the file, GELU, a linear head.
const MODEL: &str = r#"{"input": [3, 6, 6], "layers": [
  {"conv2d": {"out": 4, "kernel": 3, "padding": 1}},
  {"batchnorm2d": {}, "trainable": {"weight": false}},
  {"gelu": {}}, {"flatten": {}}, {"linear": {"out": 5}}]}"#;

fn run(optimizer: OptimizerConfig, spec: ModelSpec) -> (Trainer, Vec<(String, Vec<f32>)>) {
    let ctx = ctx();
    let init = spec.init_params(3);
    let config = StepConfig::new(Precision::AmpF16, LossKind::CrossEntropy, optimizer);
    let mut t = Trainer::new(ctx, spec, config, 5, &init).unwrap();
    let n = 8;
    for s in 0..4u64 {
        let x = rand_vec(n * 3 * 36, s);
        let labels: Vec<u32> = (0..n as u32).map(|i| (i * 3 + s as u32) % 5).collect();
        t.train_batch(ctx, n, &x, BatchTargets::Classes(&labels))
            .unwrap();
    }
    let stats = t.finish(ctx).unwrap();
    assert!(stats.iter().all(|s| !s.skipped), "no step skipped");
    (t, init)
}

fn check(optimizer: OptimizerConfig) {
    // The JSON's frozen BatchNorm weight, and the conv's weight by --freeze's glob.
    let spec = ModelSpec::from_json(MODEL).unwrap();
    let spec = spec.freeze(&["0.w*".to_string()]).unwrap();
    assert_eq!(spec.frozen, ["1.weight", "0.weight"]);
    assert_eq!(spec.num_frozen(), 4 + 4 * 3 * 9);
    let (t, init) = run(optimizer, spec);
    let after = t.store.download(ctx()).unwrap();
    for ((name, before), (same, now)) in init.iter().zip(&after) {
        assert_eq!(name, same);
        let frozen = name == "1.weight" || name == "0.weight";
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        if frozen {
            assert_eq!(bits(before), bits(now), "{name} is frozen: bit-identical");
        } else {
            assert_ne!(bits(before), bits(now), "{name} trains: it moved");
        }
    }
    // Moments for the trainable parameters only, as PyTorch keeps no state for a parameter
    // without a gradient.
    let layout = &t.store.layout;
    assert!(layout.trainable < layout.total);
    assert_eq!(t.optimizer.len(), layout.trainable);
    let frozen_at: Vec<usize> = (layout.entries.iter())
        .filter(|e| !layout.trains(e))
        .map(|e| e.offset)
        .collect();
    assert!(frozen_at.iter().all(|&o| o >= layout.trainable));
}

#[test]
fn frozen_parameters_stay_bit_identical_under_sgd_nesterov_with_weight_decay() {
    let sgd = OptimizerConfig::Sgd {
        lr: 0.1,
        momentum: 0.85,
        dampening: 0.0,
        nesterov: true,
        weight_decay: 5e-2,
    };
    check(sgd);
}

#[test]
fn frozen_parameters_stay_bit_identical_under_adamw() {
    check(OptimizerConfig::adamw(1e-2));
}

#[test]
fn freeze_errors_name_what_is_wrong() {
    let spec = ModelSpec::from_json(MODEL).unwrap();
    let e = spec.clone().freeze(&["4.wieght".into()]).unwrap_err();
    let m = e.to_string();
    assert!(
        m.contains("`4.wieght`") && m.contains("nearest are: 4.weight"),
        "{m}"
    );
    let all = spec.freeze(&["*".into()]).unwrap_err().to_string();
    assert!(all.contains("nothing would train"), "{all}");
    let bad = MODEL.replace(
        r#""trainable": {"weight": false}"#,
        r#""trainable": {"scale": false}"#,
    );
    let m = ModelSpec::from_json(&bad).unwrap_err().to_string();
    assert!(
        m.contains("layer 1") && m.contains("no parameter `scale`"),
        "{m}"
    );
    let relu = MODEL.replace(r#"{"gelu": {}}"#, r#"{"gelu": {}, "trainable": false}"#);
    let m = ModelSpec::from_json(&relu).unwrap_err().to_string();
    assert!(m.contains("layer 2") && m.contains("no parameters"), "{m}");
}

/// A trainer of [`MODEL`] under amp-f16 AdamW with `freeze` frozen.
fn trainer(freeze: &[&str]) -> Trainer {
    let spec = ModelSpec::from_json(MODEL).unwrap();
    let freeze: Vec<String> = freeze.iter().map(|s| s.to_string()).collect();
    let spec = if freeze.is_empty() {
        spec
    } else {
        spec.freeze(&freeze).unwrap()
    };
    let init = spec.init_params(3);
    let config = StepConfig::new(
        Precision::AmpF16,
        LossKind::CrossEntropy,
        OptimizerConfig::adamw(1e-2),
    );
    Trainer::new(ctx(), spec, config, 5, &init).unwrap()
}

/// A frozen conv or Linear weight's gradient kernels are left out of the step (nothing reads
/// them); a frozen head (weight and bias) leaves out its bias's too.
#[test]
fn a_frozen_weight_has_no_gradient_kernel() {
    let kernels = |freeze: &[&str]| trainer(freeze).step_kernels(ctx(), 8).unwrap().len();
    let all = kernels(&[]);
    for freeze in [&["0.weight"][..], &["4.weight"], &["4.*"]] {
        let frozen = kernels(freeze);
        assert!(
            frozen < all,
            "{freeze:?} frozen: {frozen} kernels, all trainable: {all}"
        );
    }
    assert!(kernels(&["4.*"]) < kernels(&["4.weight"]), "the bias's too");
}

/// Leaving a frozen head's gradient out changes nothing else: after a step, every other
/// parameter is bit-identical to a run where the head trains (AdamW updates each tensor from
/// its own gradient; the head's values are the same at step 1), so the input gradient the
/// head hands back, and the GELU backward that no longer shares its kernel, are unchanged.
#[test]
fn a_frozen_head_leaves_the_other_gradients_bit_identical() {
    let after = |freeze: &[&str]| {
        let mut t = trainer(freeze);
        let n = 8;
        let x = rand_vec(n * 3 * 36, 7);
        let labels: Vec<u32> = (0..n as u32).map(|i| (i * 3) % 5).collect();
        t.train_batch(ctx(), n, &x, BatchTargets::Classes(&labels))
            .unwrap();
        let stats = t.finish(ctx()).unwrap();
        assert!(stats.iter().all(|s| !s.skipped), "no step skipped");
        t.store.download(ctx()).unwrap()
    };
    let (trained, frozen) = (after(&[]), after(&["4.*"]));
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let mut compared = 0;
    for (name, values) in &frozen {
        let (_, other) = trained.iter().find(|(n, _)| n == name).unwrap();
        if name.starts_with("4.") {
            assert_ne!(
                bits(values),
                bits(other),
                "{name}: frozen here, trained there"
            );
        } else {
            assert_eq!(bits(values), bits(other), "{name}");
            compared += 1;
        }
    }
    assert!(compared >= 4, "{compared} tensors compared");
}
