//! Model descriptions (CPU only): presets' PyTorch names and shapes, JSON Sequential models,
//! shape inference, errors, and PyTorch's default initialisation.

use webgpu_amp::Error;
use webgpu_amp::nn::{ModelSpec, init_bound, preset};

fn params(model: &ModelSpec) -> Vec<(String, Vec<usize>)> {
    model
        .parameters()
        .into_iter()
        .map(|p| (p.name, p.shape))
        .collect()
}

fn expected(list: &[(&str, &[usize])]) -> Vec<(String, Vec<usize>)> {
    list.iter()
        .map(|(n, s)| (n.to_string(), s.to_vec()))
        .collect()
}

fn model_message(result: webgpu_amp::Result<ModelSpec>) -> String {
    match result {
        Err(Error::Model(msg)) => msg,
        other => panic!("expected a model error, got {other:?}"),
    }
}

// ---------------------------------------------------------------- presets

#[test]
fn linear_preset_is_simple_model() {
    // class SimpleModel: self.linear = nn.Linear(10, 1)
    let m = preset("linear", &[10], 1).unwrap();
    assert_eq!(
        params(&m),
        expected(&[("linear.weight", &[1, 10]), ("linear.bias", &[1])])
    );
    assert_eq!(m.layers.len(), 1);
    assert_eq!(m.output_shape(), &[1]);
    assert_eq!(m.num_parameters(), 11);

    // On images it flattens first (a parameterless module named `flatten`).
    let m = preset("linear", &[1, 28, 28], 10).unwrap();
    assert_eq!(
        params(&m),
        expected(&[("linear.weight", &[10, 784]), ("linear.bias", &[10])])
    );
    assert_eq!(m.layers[0].layer.repr(), "Flatten(start_dim=1, end_dim=-1)");
    assert_eq!(m.layers[0].name, "flatten");
}

#[test]
fn mlp_preset_is_a_sequential() {
    // nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    let m = preset("mlp", &[1, 28, 28], 10).unwrap();
    assert_eq!(
        params(&m),
        expected(&[
            ("1.weight", &[256, 784]),
            ("1.bias", &[256]),
            ("3.weight", &[10, 256]),
            ("3.bias", &[10]),
        ])
    );
    let names: Vec<&str> = m.layers.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["0", "1", "2", "3"]);
    assert_eq!(m.num_parameters(), 784 * 256 + 256 + 2560 + 10);
}

#[test]
fn simple_cnn_preset_matches_the_tutorial() {
    let m = preset("simple-cnn", &[3, 32, 32], 10).unwrap();
    assert_eq!(
        params(&m),
        expected(&[
            ("conv1.weight", &[32, 3, 3, 3]),
            ("conv1.bias", &[32]),
            ("conv2.weight", &[64, 32, 3, 3]),
            ("conv2.bias", &[64]),
            ("fc.weight", &[10, 64 * 8 * 8]),
            ("fc.bias", &[10]),
        ])
    );
    let names: Vec<&str> = m.layers.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "conv1", "relu", "pool", "conv2", "relu", "pool", "flatten", "fc"
        ]
    );
    let shapes: Vec<Vec<usize>> = m.layers.iter().map(|l| l.output_shape.clone()).collect();
    assert_eq!(
        shapes,
        vec![
            vec![32, 32, 32],
            vec![32, 32, 32],
            vec![32, 16, 16],
            vec![64, 16, 16],
            vec![64, 16, 16],
            vec![64, 8, 8],
            vec![4096],
            vec![10],
        ]
    );
    assert_eq!(m.layers[0].input_shape, vec![3, 32, 32]);
    assert_eq!(
        m.layers[0].layer.repr(),
        "Conv2d(3, 32, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))"
    );
    assert_eq!(
        m.layers[2].layer.repr(),
        "MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)"
    );
}

#[test]
fn mnist_cnn_preset() {
    let m = preset("mnist-cnn", &[1, 28, 28], 10).unwrap();
    assert_eq!(
        params(&m),
        expected(&[
            ("conv1.weight", &[32, 1, 3, 3]),
            ("conv1.bias", &[32]),
            ("conv2.weight", &[64, 32, 3, 3]),
            ("conv2.bias", &[64]),
            ("fc.weight", &[10, 64 * 7 * 7]),
            ("fc.bias", &[10]),
        ])
    );
    m.check_data(&[1, 28, 28], 10).unwrap();
}

#[test]
fn preset_errors() {
    let msg = model_message(preset("resnet", &[3, 32, 32], 10));
    assert!(
        msg.contains("resnet") && msg.contains("simple-cnn"),
        "{msg}"
    );
    let msg = model_message(preset("simple-cnn", &[10], 1));
    assert!(
        msg.contains("simple-cnn") && msg.contains("layer 0 `conv1` (conv2d)"),
        "{msg}"
    );
    let msg = model_message(preset("mlp", &[10], 0));
    assert!(msg.contains("output"), "{msg}");
    // 3×3 input: the second pool has a 0×0... no: 3 -> pool -> 1 -> conv (pad 1) -> 1 -> pool 2 fails.
    let msg = model_message(preset("mnist-cnn", &[1, 3, 3], 10));
    assert!(msg.contains("layer 5 `pool` (maxpool2d)"), "{msg}");
}

#[test]
fn check_data_compares_input_and_output() {
    let m = preset("mlp", &[1, 28, 28], 10).unwrap();
    let msg = model_message(m.check_data(&[784], 10).map(|_| m.clone()));
    assert!(
        msg.contains("[1, 28, 28]") && msg.contains("[784]"),
        "{msg}"
    );
    let msg = model_message(m.check_data(&[1, 28, 28], 5).map(|_| m.clone()));
    assert!(msg.contains("[10]") && msg.contains("[5]"), "{msg}");
}

// ---------------------------------------------------------------- JSON

const EXAMPLE: &str = r#"{"input": [1, 28, 28], "layers": [
    {"conv2d": {"out": 32, "kernel": 3, "padding": 1}}, {"relu": {}},
    {"maxpool2d": {"kernel": 2}}, {"flatten": {}}, {"linear": {"out": 10}}]}"#;

#[test]
fn json_is_a_sequential() {
    let m = ModelSpec::from_json(EXAMPLE).unwrap();
    assert_eq!(
        params(&m),
        expected(&[
            ("0.weight", &[32, 1, 3, 3]),
            ("0.bias", &[32]),
            ("4.weight", &[10, 32 * 14 * 14]),
            ("4.bias", &[10]),
        ])
    );
    let names: Vec<&str> = m.layers.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["0", "1", "2", "3", "4"]);
    assert_eq!(m.layers[3].input_shape, vec![32, 14, 14]);
    assert_eq!(m.layers[3].output_shape, vec![6272]);
    assert_eq!(m.output_shape(), &[10]);
    assert_eq!(m.input_shape, vec![1, 28, 28]);
    let summary = m.summary();
    assert!(
        summary.contains("(0): Conv2d(1, 32, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))"),
        "{summary}"
    );
    assert!(summary.contains("(4): Linear(in_features=6272, out_features=10, bias=True)"));
}

#[test]
fn json_options_and_shape_arithmetic() {
    let m = ModelSpec::from_json(
        r#"{"input": [3, 9, 9], "layers": [
            {"conv2d": {"out": 4, "kernel": 3, "stride": 2, "bias": false}},
            {"gelu": {}},
            {"maxpool2d": {"kernel": 3, "stride": 1}},
            {"flatten": {}},
            {"linear": {"out": 5, "bias": false}},
            {"relu": {}},
            {"linear": {"out": 2}}]}"#,
    )
    .unwrap();
    // conv: (9 - 3) / 2 + 1 = 4; pool 3 stride 1: 4 - 3 + 1 = 2.
    assert_eq!(m.layers[0].output_shape, vec![4, 4, 4]);
    assert_eq!(m.layers[2].output_shape, vec![4, 2, 2]);
    assert_eq!(m.layers[1].layer.repr(), "GELU(approximate='none')");
    assert_eq!(
        params(&m),
        expected(&[
            ("0.weight", &[4, 3, 3, 3]),
            ("4.weight", &[5, 16]),
            ("6.weight", &[2, 5]),
            ("6.bias", &[2]),
        ])
    );
    // A 1-D model: linear straight away.
    let m = ModelSpec::from_json(r#"{"input": [10], "layers": [{"linear": {"out": 1}}]}"#).unwrap();
    assert_eq!(
        params(&m),
        expected(&[("0.weight", &[1, 10]), ("0.bias", &[1])])
    );
}

#[test]
fn json_errors_name_the_layer_and_problem() {
    let cases: &[(&str, &[&str])] = &[
        (
            r#"{"input": [1, 28, 28], "layers": [{"conv2d": {"out": 8, "kernel": 3}}, {"relu": {}}, {"linear": {"out": 10}}]}"#,
            &["layer 2 (linear)", "[8, 26, 26]", "flatten"],
        ),
        (
            r#"{"input": [784], "layers": [{"conv2d": {"out": 8, "kernel": 3}}]}"#,
            &["layer 0 (conv2d)", "[channels, height, width]", "[784]"],
        ),
        (
            r#"{"input": [1, 4, 4], "layers": [{"conv2d": {"out": 8, "kernel": 7, "padding": 1}}]}"#,
            &["layer 0 (conv2d)", "kernel 7×7", "padded input 6×6"],
        ),
        (
            r#"{"input": [1, 4, 4], "layers": [{"relu": {}}, {"maxpool2d": {"kernel": 5}}]}"#,
            &["layer 1 (maxpool2d)", "kernel 5×5", "4×4"],
        ),
        (
            r#"{"input": [10], "layers": [{"linear": {"out": 0}}]}"#,
            &["layer 0 (linear)", "`out` must be at least 1"],
        ),
        (
            r#"{"input": [1, 8, 8], "layers": [{"conv2d": {"out": 2, "kernel": 0}}]}"#,
            &["layer 0 (conv2d)", "`kernel` must be at least 1"],
        ),
        (
            r#"{"input": [1, 8, 8], "layers": [{"conv2d": {"out": 2, "kernel": 3, "stride": 0}}]}"#,
            &["layer 0 (conv2d)", "`stride` must be at least 1"],
        ),
        (
            r#"{"input": [1, 8, 8], "layers": [{"maxpool2d": {"kernel": 2, "stride": 0}}]}"#,
            &["layer 0 (maxpool2d)", "`stride` must be at least 1"],
        ),
        (
            r#"{"input": [10], "layers": [{"relu": {}}, {"conv3d": {"out": 1}}]}"#,
            &["layer 1", "unknown layer kind `conv3d`", "\"maxpool2d\""],
        ),
        (
            r#"{"input": [10], "layers": [{"linear": {"out": 1, "bais": false}}]}"#,
            &["layer 0", "unknown field `bais`"],
        ),
        (
            r#"{"input": [10], "layers": [{"linear": {}}]}"#,
            &["layer 0", "missing field `out`"],
        ),
        (
            r#"{"input": [10], "layers": [{"relu": {"inplace": true}}]}"#,
            &["layer 0", "unknown field `inplace`"],
        ),
        (
            r#"{"input": [10], "layers": [{"linear": {"out": -3}}]}"#,
            &["layer 0", "-3"],
        ),
        (r#"{"input": [10], "layers": ["relu"]}"#, &["layer 0"]),
        (
            r#"{"input": [10], "layers": [{"relu": {}, "gelu": {}}]}"#,
            &["layer 0"],
        ),
        (r#"{"input": [10], "layers": []}"#, &["no layers"]),
        (
            r#"{"input": [0, 28], "layers": [{"relu": {}}]}"#,
            &["input shape [0, 28]"],
        ),
        (
            r#"{"input": [], "layers": [{"relu": {}}]}"#,
            &["input shape []"],
        ),
        (
            r#"{"input": [10], "layers": [{"relu": {}}], "optimizer": "sgd"}"#,
            &["unknown field `optimizer`"],
        ),
        (r#"{"layers": [{"relu": {}}]}"#, &["missing field `input`"]),
        (r#"{"input": [10], "layers": [{"relu": {}}"#, &["json"]),
    ];
    for (json, needles) in cases {
        let msg = model_message(ModelSpec::from_json(json));
        for needle in *needles {
            assert!(
                msg.contains(needle),
                "{json}\n  -> {msg}\n  lacks {needle:?}"
            );
        }
    }
}

// ---------------------------------------------------------------- initialisation

#[test]
fn init_bound_is_one_over_sqrt_fan_in() {
    for fan_in in [1usize, 10, 27, 288, 784, 4096] {
        let want = 1.0 / (fan_in as f64).sqrt();
        assert!((init_bound(fan_in) as f64 - want).abs() < 1e-7 * want.max(1.0));
    }
}

#[test]
fn init_params_follow_pytorch_default() {
    let m = preset("simple-cnn", &[3, 32, 32], 10).unwrap();
    let init = m.init_params(0);
    let specs = m.parameters();
    assert_eq!(init.len(), specs.len());
    let fan_ins = [27usize, 27, 288, 288, 4096, 4096];
    for ((name, values), (spec, fan_in)) in init.iter().zip(specs.iter().zip(fan_ins)) {
        assert_eq!(name, &spec.name);
        assert_eq!(values.len(), spec.numel());
        let bound = 1.0 / (fan_in as f32).sqrt();
        assert!(
            values.iter().all(|v| v.abs() <= bound),
            "{name} exceeds ±{bound}"
        );
        let n = values.len() as f64;
        let mean = values.iter().map(|&v| v as f64).sum::<f64>() / n;
        // U(-b, b): mean 0 with standard error b / sqrt(3n); variance b² / 3.
        let b = bound as f64;
        assert!(
            mean.abs() < 5.0 * b / (3.0 * n).sqrt(),
            "{name}: mean {mean}"
        );
        if n >= 1000.0 {
            let var = values
                .iter()
                .map(|&v| (v as f64 - mean).powi(2))
                .sum::<f64>()
                / n;
            assert!((var / (b * b / 3.0) - 1.0).abs() < 0.1, "{name}: var {var}");
            let max = values.iter().fold(0f32, |a, &v| a.max(v.abs())) as f64;
            assert!(
                max > 0.99 * b,
                "{name}: uses the whole range ({max} of {b})"
            );
        }
    }
    assert_eq!(m.init_params(0), init, "deterministic per seed");
    let other = m.init_params(1);
    for ((_, a), (_, b)) in init.iter().zip(&other) {
        assert_ne!(a, b, "a different seed gives different values");
    }
}

#[test]
fn init_skips_missing_biases() {
    let m = ModelSpec::from_json(
        r#"{"input": [4], "layers": [{"linear": {"out": 3, "bias": false}}, {"relu": {}}, {"linear": {"out": 2}}]}"#,
    )
    .unwrap();
    let names: Vec<String> = m.init_params(5).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["0.weight", "2.weight", "2.bias"]);
}

#[test]
fn rust_builder_matches_the_json_description() {
    use webgpu_amp::nn::ModelSpec;
    let json = ModelSpec::from_json(
        r#"{"input": [1, 28, 28], "layers": [{"conv2d": {"out": 4, "kernel": 3, "padding": 1}}, {"relu": {}}, {"maxpool2d": {"kernel": 2}}, {"flatten": {}}, {"linear": {"out": 10}}]}"#,
    )
    .unwrap();
    let built = ModelSpec::sequential(&[1, 28, 28])
        .conv2d(4, 3, 1, 1)
        .relu()
        .maxpool2d(2, 2)
        .flatten()
        .linear(10)
        .build()
        .unwrap();
    assert_eq!(built.parameters(), json.parameters());
    assert_eq!(built.output_shape(), json.output_shape());
    assert_eq!(built.init_params(3), json.init_params(3));
    let err = ModelSpec::sequential(&[1, 28, 28])
        .linear(10)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("layer 0"), "{err}");
}
