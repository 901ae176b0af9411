//! A ResNet basic block as JSON (issue 40 builds the family on it): two 3×3 convolutions
//! with a ReLU between, around a projection shortcut (a 1×1 convolution with stride 2, as
//! torchvision's `downsample` and kuangliu's `shortcut`), the sum, a ReLU. (BatchNorm is
//! issue 40's leaf op: the convolutions here keep their biases instead.) Checked: the shapes
//! and `state_dict` names, and that the planned step trains it (the loss of a fixed batch
//! falls over a few SGD steps, the shortcut's and the branch's weights both move).

mod common;

use common::{ctx, rand_vec};
use webgpu_amp::amp::policy::Precision;
use webgpu_amp::nn::{LossKind, ModelSpec};
use webgpu_amp::optim::OptimizerConfig;
use webgpu_amp::train::{BatchTargets, StepConfig, Trainer};

const BLOCK: &str = r#"{"input": [4, 8, 8], "layers": [
    {"residual": {
        "layers": [{"conv2d": {"out": 8, "kernel": 3, "stride": 2, "padding": 1}}, {"relu": {}},
                   {"conv2d": {"out": 8, "kernel": 3, "padding": 1}}],
        "shortcut": [{"conv2d": {"out": 8, "kernel": 1, "stride": 2}}]}},
    {"relu": {}}, {"flatten": {}}, {"linear": {"out": 3}}]}"#;

#[test]
fn a_resnet_basic_block_with_a_projection_shortcut_trains() {
    let spec = ModelSpec::from_json(BLOCK).unwrap();
    assert_eq!(spec.layers[0].output_shape, [8, 4, 4]);
    let names: Vec<String> = spec.parameters().into_iter().map(|p| p.name).collect();
    assert_eq!(
        names,
        [
            "0.0.weight",
            "0.0.bias",
            "0.2.weight",
            "0.2.bias",
            "0.shortcut.0.weight",
            "0.shortcut.0.bias",
            "3.weight",
            "3.bias"
        ]
    );
    let init = spec.init_params(2);
    let config = StepConfig::new(
        Precision::AmpF16,
        LossKind::CrossEntropy,
        OptimizerConfig::sgd(0.05),
    );
    let mut trainer = Trainer::new(ctx(), spec, config, 3, &init).unwrap();
    let x = rand_vec(8 * 4 * 8 * 8, 11);
    let labels: Vec<u32> = (0..8).map(|i| i % 3).collect();
    let mut losses = Vec::new();
    for _ in 0..6 {
        trainer
            .train_batch(ctx(), 8, &x, BatchTargets::Classes(&labels))
            .unwrap();
        losses.extend(trainer.finish(ctx()).unwrap().iter().map(|s| s.loss));
    }
    assert!(losses.iter().all(|l| l.is_finite()), "{losses:?}");
    assert!(losses[5] < losses[0], "the loss did not fall: {losses:?}");
    let trained = trainer.store.download(ctx()).unwrap();
    for name in ["0.0.weight", "0.shortcut.0.weight"] {
        let before = &init.iter().find(|(n, _)| n == name).unwrap().1;
        let after = &trained.iter().find(|(n, _)| n == name).unwrap().1;
        assert!(before != after, "{name} did not move");
    }
}
