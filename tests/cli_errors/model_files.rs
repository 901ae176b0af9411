//! Broken models and parameter files: JSON models that cannot be built or are too big for
//! the device, `--init` files that do not fit, checkpoints that are truncated or impossible.

use safetensors::tensor::Dtype;

use super::fixtures::{f32_bytes, safetensors_file};
use super::{TempDir, expect_error, expect_file_error, run, run_train, run_train_limited};

#[test]
fn json_model_with_unknown_layer() {
    let tmp = TempDir::new("json-unknown");
    let model = tmp.write(
        "model.json",
        br#"{"input": [10], "layers": [{"linear": {"out": 4}}, {"frobnicate": {"p": 0.5}}]}"#,
    );
    let out = run_train(
        &["--dataset", "synthetic", "--model", model.to_str().unwrap()],
        None,
    );
    expect_error(
        &out,
        &[&model.display().to_string(), "layer 1", "frobnicate"],
    );
}

#[test]
fn json_model_that_is_not_json() {
    let tmp = TempDir::new("json-syntax");
    let model = tmp.write("model.json", b"{\"input\": [10], \"layers\": [");
    let out = run_train(
        &["--dataset", "synthetic", "--model", model.to_str().unwrap()],
        None,
    );
    expect_file_error(&out, &model, "EOF");
}

#[test]
fn json_model_with_a_linear_layer_on_an_image() {
    // No flatten between the conv and the linear layer: the linear layer's input is 3-D.
    let tmp = TempDir::new("json-flatten");
    let model = tmp.write(
        "model.json",
        br#"{"input": [1, 28, 28], "layers": [{"conv2d": {"out": 4, "kernel": 3}}, {"linear": {"out": 10}}]}"#,
    );
    let out = run_train(&["--model", model.to_str().unwrap()], None);
    expect_error(
        &out,
        &[
            &model.display().to_string(),
            "layer 1 (linear)",
            "add {\"flatten\": {}} before it",
        ],
    );
}

#[test]
fn json_model_whose_flattened_size_does_not_match_the_data() {
    // Flatten gives 4·26·26 features but the data's samples are 10 features: the model's
    // input does not fit, and its output (10) does not fit the 1 regression target.
    let tmp = TempDir::new("json-input");
    let model = tmp.write(
        "model.json",
        br#"{"input": [1, 28, 28], "layers": [{"conv2d": {"out": 4, "kernel": 3}}, {"flatten": {}}, {"linear": {"out": 10}}]}"#,
    );
    let out = run_train(
        &["--dataset", "synthetic", "--model", model.to_str().unwrap()],
        None,
    );
    expect_error(
        &out,
        &["takes input [1, 28, 28] per sample but the data's samples are [10]"],
    );
    let model = tmp.write(
        "out.json",
        br#"{"input": [10], "layers": [{"linear": {"out": 16}}, {"relu": {}}, {"linear": {"out": 7}}]}"#,
    );
    let out = run_train(
        &["--dataset", "synthetic", "--model", model.to_str().unwrap()],
        None,
    );
    expect_error(&out, &["output is [7] per sample but the data needs [1]"]);
}

#[test]
fn json_model_with_impossible_shapes() {
    let tmp = TempDir::new("json-shape");
    let model = tmp.write(
        "model.json",
        br#"{"input": [1, 28, 28], "layers": [{"maxpool2d": {"kernel": 2}}, {"conv2d": {"out": 4, "kernel": 15}}]}"#,
    );
    let out = run_train(&["--model", model.to_str().unwrap()], None);
    expect_file_error(
        &out,
        &model,
        "layer 1 (conv2d): kernel 15×15 is larger than the padded input 14×14",
    );
    let model = tmp.write(
        "huge.json",
        br#"{"input": [1, 28, 28], "layers": [{"conv2d": {"out": 4, "kernel": 3, "padding": 9223372036854775807}}]}"#,
    );
    let out = run_train(&["--model", model.to_str().unwrap()], None);
    expect_file_error(&out, &model, "layer 0 (conv2d)");
}

#[test]
fn init_file_with_missing_and_misshaped_parameters() {
    let tmp = TempDir::new("init");
    // The linear preset on synthetic data has linear.weight [1, 10] and linear.bias [1].
    let bytes = safetensors_file(&[(
        "linear.weight",
        Dtype::F32,
        vec![10, 1],
        f32_bytes(&[0.0; 10]),
    )]);
    let init = tmp.write("init.safetensors", &bytes);
    let out = run_train(
        &["--dataset", "synthetic", "--init", init.to_str().unwrap()],
        None,
    );
    expect_error(
        &out,
        &[
            &init.display().to_string(),
            "`linear.weight` has shape [10, 1], the model needs [1, 10]",
            "missing `linear.bias`",
        ],
    );
}

#[test]
fn init_file_with_integer_parameters() {
    let tmp = TempDir::new("init-dtype");
    let bytes = safetensors_file(&[
        ("linear.weight", Dtype::I32, vec![1, 10], vec![0; 40]),
        ("linear.bias", Dtype::F32, vec![1], f32_bytes(&[0.0])),
    ]);
    let init = tmp.write("init.safetensors", &bytes);
    let out = run_train(
        &["--dataset", "synthetic", "--init", init.to_str().unwrap()],
        None,
    );
    expect_file_error(&out, &init, "`linear.weight` has dtype I32");
}

#[test]
fn resume_from_a_truncated_checkpoint() {
    let tmp = TempDir::new("resume");
    let bytes = safetensors_file(&[
        (
            "linear.weight",
            Dtype::F32,
            vec![1, 10],
            f32_bytes(&[0.0; 10]),
        ),
        ("linear.bias", Dtype::F32, vec![1], f32_bytes(&[0.0])),
    ]);
    let ck = tmp.write("run.safetensors", &bytes[..bytes.len() - 7]);
    let out = run_train(
        &["--dataset", "synthetic", "--resume", ck.to_str().unwrap()],
        None,
    );
    expect_file_error(&out, &ck, "not a safetensors file");
    let missing = tmp.path("nope.safetensors");
    let out = run_train(
        &[
            "--dataset",
            "synthetic",
            "--resume",
            missing.to_str().unwrap(),
        ],
        None,
    );
    expect_file_error(&out, &missing, "No such file");
}

#[test]
fn a_json_layer_just_under_u32_max_is_refused_before_any_allocation() {
    // 10 inputs → 429,496,729 outputs: each weight tensor is under u32::MAX elements, but
    // the flat buffers would be gigabytes. The size check against the device's limits runs
    // before the host makes initial values (which used to allocate 17 GB first).
    let tmp = TempDir::new("json-huge");
    let model = tmp.write(
        "model.json",
        br#"{"input": [10], "layers": [{"linear": {"out": 429496729}}, {"linear": {"out": 1}}]}"#,
    );
    let out = run_train_limited(&["--dataset", "synthetic", "--model", model.to_str().unwrap()]);
    expect_error(
        &out,
        &[
            &model.display().to_string(),
            "parameters",
            "use a smaller model",
        ],
    );
    // Under the u32 index limit but over the binding limit: the message has both sizes.
    let model = tmp.write(
        "wide.json",
        br#"{"input": [10], "layers": [{"linear": {"out": 100000000}}, {"linear": {"out": 1}}]}"#,
    );
    let out = run_train_limited(&[
        "--dataset",
        "synthetic",
        "--model",
        model.to_str().unwrap(),
        "--optimizer",
        "sgd",
        "--precision",
        "f32",
    ]);
    expect_error(
        &out,
        &[
            &model.display().to_string(),
            "1200000016 parameters need 4.8 GB per f32 buffer (master weights, gradients)",
            "max_",
        ],
    );
}

#[test]
fn a_checkpoint_with_an_impossible_step_count_is_refused() {
    let tmp = TempDir::new("resume-step");
    let ck = tmp.path("run.safetensors");
    let out = run_train(
        &["--dataset", "synthetic", "--save", ck.to_str().unwrap()],
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut saved = webgpu_amp::train::checkpoint::Checkpoint::load(&ck).unwrap();
    saved.progress.step = u64::MAX - 1;
    let bad = tmp.path("bad.safetensors");
    std::fs::write(&bad, saved.to_bytes().unwrap()).unwrap();
    let out = run(
        &[
            "train",
            "--dataset",
            "synthetic",
            "--epochs",
            "3",
            "--no-validate",
            "--resume",
            bad.to_str().unwrap(),
        ],
        None,
    );
    expect_file_error(&out, &bad, "step 18446744073709551614 is out of range");
}
