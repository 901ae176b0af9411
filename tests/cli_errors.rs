//! Bad input to the real `webgpu-amp` binary: broken data files, broken models and parameter
//! files, bad flags, a batch too big for the device, a diverging run. Each must end with a
//! non-zero exit and exactly one `error:` line on stderr that names the file (where there is
//! one) and the problem; never a panic.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

use safetensors::tensor::{Dtype, TensorView};

const BIN: &str = env!("CARGO_BIN_EXE_webgpu-amp");

/// A fresh, empty folder under the system temp dir (removed when dropped).
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "webgpu-amp-cli-errors-{}-{tag}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.path(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&path, bytes).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn run(args: &[&str], data_dir: Option<&Path>) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .env_remove("WEBGPU_AMP_BACKEND")
        .env_remove("WEBGPU_AMP_F16_STORAGE");
    if let Some(dir) = data_dir {
        cmd.env("WEBGPU_AMP_DATA_DIR", dir);
    }
    cmd.output().expect("run webgpu-amp")
}

/// Asserts a failed run with one `error:` line containing every `needles` entry; returns it.
fn expect_error(out: &Output, needles: &[&str]) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        !out.status.success(),
        "expected failure, got success; stderr:\n{stderr}"
    );
    assert!(!stderr.contains("panicked"), "panic:\n{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(
        lines.len(),
        1,
        "stderr must be exactly one line, got:\n{stderr}"
    );
    let line = lines[0];
    assert!(line.starts_with("error: "), "not an error line: {line}");
    for needle in needles {
        assert!(line.contains(needle), "error line lacks `{needle}`: {line}");
    }
    line.to_string()
}

fn train(extra: &[&str]) -> Vec<String> {
    let mut args = vec!["train", "--steps", "1", "--no-validate"];
    args.extend_from_slice(extra);
    args.into_iter().map(String::from).collect()
}

/// One error line that names `file` and says `message`.
fn expect_file_error(out: &Output, file: &Path, message: &str) {
    expect_error(out, &[&file.display().to_string(), message]);
}

/// A fashion-mnist directory whose class 0 file holds `class0` (the others are empty);
/// returns class 0's path.
fn fashion_dir(tmp: &TempDir, class0: &[u8]) -> PathBuf {
    for c in 1..10 {
        tmp.write(&format!("fashion-mnist/{c}.json"), b"{\"data\": []}");
    }
    tmp.write("fashion-mnist/0.json", class0)
}

/// `train` under an address-space limit of 4 GB (`ulimit -v`), for inputs that must fail
/// before allocating much: were a check missing, the allocation fails in the child (a
/// failed test), not the machine.
fn run_train_limited(extra: &[&str]) -> Output {
    let mut args = train(extra);
    args.insert(0, BIN.to_string());
    Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 4000000 && exec \"$@\"")
        .arg("sh")
        .args(&args)
        .env_remove("WEBGPU_AMP_BACKEND")
        .env_remove("WEBGPU_AMP_F16_STORAGE")
        .output()
        .expect("run webgpu-amp under sh")
}

fn run_train(extra: &[&str], data_dir: Option<&Path>) -> Output {
    let args = train(extra);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    run(&refs, data_dir)
}

fn safetensors_file(tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)]) -> Vec<u8> {
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|(name, dtype, shape, bytes)| {
            (
                name.to_string(),
                TensorView::new(*dtype, shape.clone(), bytes).unwrap(),
            )
        })
        .collect();
    safetensors::serialize(views, None).unwrap()
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn i64_bytes(values: &[i64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Four samples of 3 features with the given integer labels.
fn class_data(labels: &[i64]) -> Vec<u8> {
    let n = labels.len();
    safetensors_file(&[
        ("x", Dtype::F32, vec![n, 3], f32_bytes(&vec![0.5; n * 3])),
        ("y", Dtype::I64, vec![n], i64_bytes(labels)),
    ])
}

/// An uncompressed IDX file of unsigned bytes.
fn idx(dims: &[u32], data: &[u8]) -> Vec<u8> {
    let mut out = vec![0, 0, 8, dims.len() as u8];
    for d in dims {
        out.extend_from_slice(&d.to_be_bytes());
    }
    out.extend_from_slice(data);
    out
}

/// A data folder with the four MNIST files; `broken` replaces one of them.
fn mnist_dir(tmp: &TempDir, broken: (&str, Vec<u8>)) -> PathBuf {
    let good_images = idx(&[2, 28, 28], &[7; 2 * 28 * 28]);
    let good_labels = idx(&[2], &[1, 2]);
    for (name, bytes) in [
        ("train-images-idx3-ubyte", &good_images),
        ("train-labels-idx1-ubyte", &good_labels),
        ("t10k-images-idx3-ubyte", &good_images),
        ("t10k-labels-idx1-ubyte", &good_labels),
    ] {
        if name != broken.0.trim_end_matches(".gz") {
            tmp.write(&format!("mnist/{name}"), bytes);
        }
    }
    tmp.write(&format!("mnist/{}", broken.0), &broken.1)
}

// ---------------------------------------------------------------- bad data files

#[test]
fn truncated_gzip_idx() {
    let tmp = TempDir::new("gz");
    let gz = webgpu_amp::data::embedded::MNIST_TEST_IMAGES_GZ;
    let path = mnist_dir(
        &tmp,
        ("train-images-idx3-ubyte.gz", gz[..gz.len() / 2].to_vec()),
    );
    let out = run_train(&["--dataset", "mnist"], Some(&tmp.0));
    expect_file_error(&out, &path, "gzip data is corrupt");
}

#[test]
fn truncated_idx_data() {
    let tmp = TempDir::new("idx-short");
    let mut images = idx(&[2, 28, 28], &[7; 2 * 28 * 28]);
    images.truncate(images.len() - 100);
    let path = mnist_dir(&tmp, ("train-images-idx3-ubyte", images));
    let out = run_train(&["--dataset", "mnist"], Some(&tmp.0));
    expect_file_error(&out, &path, "truncated");
}

#[test]
fn idx_with_bad_magic() {
    let tmp = TempDir::new("idx-magic");
    let mut labels = idx(&[2], &[1, 2]);
    labels[2] = 0x0d; // f32 data: not what MNIST labels are
    let path = mnist_dir(&tmp, ("t10k-labels-idx1-ubyte", labels));
    let out = run_train(&["--dataset", "mnist"], Some(&tmp.0));
    expect_file_error(&out, &path, "bad IDX magic");
}

#[test]
fn idx_labels_out_of_range() {
    let tmp = TempDir::new("idx-label");
    let path = mnist_dir(&tmp, ("train-labels-idx1-ubyte", idx(&[2], &[1, 12])));
    let out = run_train(&["--dataset", "mnist"], Some(&tmp.0));
    expect_file_error(&out, &path, "label 12 of sample 1");
}

#[test]
fn corrupt_fashion_json() {
    let tmp = TempDir::new("fashion");
    let path = fashion_dir(&tmp, b"{\"data\": [[1, 2, 3], [4, ");
    let out = run_train(&["--dataset", "fashion-mnist"], Some(&tmp.0));
    expect_file_error(&out, &path, "not a fashion-mnist class file");
}

#[test]
fn fashion_json_with_a_short_image() {
    let tmp = TempDir::new("fashion-short");
    let path = fashion_dir(&tmp, b"{\"data\": [[1, 2, 3]]}");
    let out = run_train(&["--dataset", "fashion-mnist"], Some(&tmp.0));
    expect_file_error(&out, &path, "entry 0 has 3 values, expected 784");
}

#[test]
fn safetensors_data_that_is_not_safetensors() {
    let tmp = TempDir::new("st-garbage");
    let path = tmp.write(
        "data.safetensors",
        b"\xff\xff\xff\xff\xff\xff\xff\x7fgarbage",
    );
    let out = run_train(&["--dataset", path.to_str().unwrap()], None);
    expect_file_error(&out, &path, "not a valid safetensors file");
}

#[test]
fn safetensors_data_missing_x() {
    let tmp = TempDir::new("st-no-x");
    let bytes = safetensors_file(&[("y", Dtype::I64, vec![2], i64_bytes(&[0, 1]))]);
    let path = tmp.write("data.safetensors", &bytes);
    let out = run_train(&["--dataset", path.to_str().unwrap()], None);
    expect_file_error(&out, &path, "no tensor named `x`");
}

#[test]
fn safetensors_data_missing_y() {
    let tmp = TempDir::new("st-no-y");
    let bytes = safetensors_file(&[("x", Dtype::F32, vec![2, 3], f32_bytes(&[0.0; 6]))]);
    let path = tmp.write("data.safetensors", &bytes);
    let out = run_train(&["--dataset", path.to_str().unwrap()], None);
    expect_file_error(&out, &path, "no tensor named `y`");
}

#[test]
fn safetensors_data_with_wrong_dtype() {
    let tmp = TempDir::new("st-dtype");
    let bytes = safetensors_file(&[
        ("x", Dtype::I32, vec![2, 3], vec![0; 24]),
        ("y", Dtype::I64, vec![2], i64_bytes(&[0, 1])),
    ]);
    let path = tmp.write("data.safetensors", &bytes);
    let out = run_train(&["--dataset", path.to_str().unwrap()], None);
    expect_file_error(&out, &path, "`x` is I32 [2, 3] and `y` is I64 [2]");
}

#[test]
fn safetensors_data_with_wrong_shapes() {
    let tmp = TempDir::new("st-shape");
    // 2 samples of x, 3 labels.
    let bytes = safetensors_file(&[
        ("x", Dtype::F32, vec![2, 3], f32_bytes(&[0.0; 6])),
        ("y", Dtype::I64, vec![3], i64_bytes(&[0, 1, 2])),
    ]);
    let path = tmp.write("data.safetensors", &bytes);
    let out = run_train(&["--dataset", path.to_str().unwrap()], None);
    expect_file_error(&out, &path, "`x` has 2 samples but `y` has shape [3]");
    // f32 targets must be [N, k].
    let bytes = safetensors_file(&[
        ("x", Dtype::F32, vec![2, 3], f32_bytes(&[0.0; 6])),
        ("y", Dtype::F32, vec![2], f32_bytes(&[0.0; 2])),
    ]);
    let path = tmp.write("targets.safetensors", &bytes);
    let out = run_train(&["--dataset", path.to_str().unwrap()], None);
    expect_file_error(&out, &path, "f32 `y` has shape [2]");
}

#[test]
fn negative_label_in_safetensors_data() {
    let tmp = TempDir::new("st-neg");
    let path = tmp.write("data.safetensors", &class_data(&[0, -3, 1, 2]));
    let out = run_train(&["--dataset", path.to_str().unwrap()], None);
    expect_file_error(&out, &path, "label -3 of sample 1 is negative");
}

#[test]
fn labels_out_of_range_for_the_models_outputs() {
    let tmp = TempDir::new("labels");
    let data = tmp.write("data.safetensors", &class_data(&[0, 1, 5, 2]));
    let model = tmp.write(
        "model.json",
        br#"{"input": [3], "layers": [{"linear": {"out": 3}}]}"#,
    );
    let out = run_train(
        &[
            "--dataset",
            data.to_str().unwrap(),
            "--model",
            model.to_str().unwrap(),
            "--loss",
            "cross-entropy",
        ],
        None,
    );
    let line = expect_error(
        &out,
        &[
            &data.display().to_string(),
            "label 5 of sample 2 is out of bounds for 3 classes",
        ],
    );
    assert!(line.contains(&model.display().to_string()), "{line}");
    // --num-classes cannot disagree with the model's own output width.
    let out = run_train(
        &[
            "--dataset",
            data.to_str().unwrap(),
            "--model",
            model.to_str().unwrap(),
            "--num-classes",
            "6",
        ],
        None,
    );
    expect_error(&out, &["--num-classes 6", "has 3 outputs"]);
}

/// Ten samples of 1×8×8 images (simple-cnn's input) with the given labels.
fn image_class_data(labels: &[i64]) -> Vec<u8> {
    let n = labels.len();
    let x: Vec<f32> = (0..n * 64).map(|i| (i % 13) as f32 / 13.0).collect();
    safetensors_file(&[
        ("x", Dtype::F32, vec![n, 1, 8, 8], f32_bytes(&x)),
        ("y", Dtype::I64, vec![n], i64_bytes(labels)),
    ])
}

#[test]
fn a_corrupt_label_is_an_error_not_a_bigger_model() {
    // One corrupt label (42 among 0–9) used to make simple-cnn a 43-class model; PyTorch's
    // cross_entropy says "Target 42 is out of bounds". A preset keeps its 10 classes.
    let tmp = TempDir::new("label42");
    let data = tmp.write(
        "data.safetensors",
        &image_class_data(&[0, 1, 2, 3, 4, 5, 6, 42, 8, 9]),
    );
    let out = run_train(
        &["--dataset", data.to_str().unwrap(), "--model", "simple-cnn"],
        None,
    );
    expect_error(
        &out,
        &[
            &data.display().to_string(),
            "label 42 of sample 7 is out of bounds for 10 classes",
            "--num-classes",
        ],
    );
    // A label near 10^7 is the same error, before anything is allocated for it.
    let data = tmp.write("far.safetensors", &class_data(&[0, 9_999_999, 1, 2]));
    let out = run_train(&["--dataset", data.to_str().unwrap()], None);
    expect_file_error(
        &out,
        &data,
        "label 9999999 of sample 1 is out of bounds for 10 classes",
    );
    // Asking for that many classes is a model too big for the device, said before the
    // host allocates its parameters (mlp: 256 × 10^7 weights).
    let out = run_train_limited(&[
        "--dataset",
        data.to_str().unwrap(),
        "--num-classes",
        "10000000",
    ]);
    expect_error(
        &out,
        &[
            "model mlp",
            "parameters need",
            "max_",
            "use a smaller model",
        ],
    );
    let out = run_train(
        &["--dataset", data.to_str().unwrap(), "--num-classes", "0"],
        None,
    );
    expect_error(&out, &["--num-classes must be at least 1"]);
    let out = run_train(&["--dataset", "synthetic", "--num-classes", "4"], None);
    expect_error(
        &out,
        &["--num-classes 4 is for class labels", "float targets"],
    );
}

#[test]
fn presets_keep_ten_classes_unless_told_otherwise() {
    // Labels 0–4 only: the preset still has 10 outputs (as SimpleCNN(num_classes=10)), and
    // --num-classes 5 makes it 5.
    let tmp = TempDir::new("classes");
    let data = tmp.write(
        "data.safetensors",
        &image_class_data(&[0, 1, 2, 3, 4, 0, 1, 2, 3, 4]),
    );
    for (flags, classes) in [(&[][..], 10usize), (&["--num-classes", "5"][..], 5)] {
        let ck = tmp.path(&format!("c{classes}.safetensors"));
        let mut args = vec![
            "--dataset",
            data.to_str().unwrap(),
            "--model",
            "simple-cnn",
            "--save",
            ck.to_str().unwrap(),
        ];
        args.extend_from_slice(flags);
        let out = run_train(&args, None);
        assert!(
            out.status.success(),
            "{flags:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let saved = webgpu_amp::train::checkpoint::Checkpoint::load(&ck).unwrap();
        let fc = saved.params.iter().find(|t| t.name == "fc.weight").unwrap();
        assert_eq!(fc.shape, vec![classes, 64 * 2 * 2], "{flags:?}");
    }
}

#[test]
fn loss_that_does_not_fit_the_labels() {
    let tmp = TempDir::new("loss");
    let data = tmp.write("data.safetensors", &class_data(&[0, 1, 1, 0]));
    let out = run_train(
        &["--dataset", data.to_str().unwrap(), "--loss", "mse"],
        None,
    );
    expect_file_error(&out, &data, "--loss mse needs float targets");
    let out = run_train(&["--dataset", "synthetic", "--loss", "cross-entropy"], None);
    expect_error(&out, &["synthetic", "needs integer class labels"]);
}

// ---------------------------------------------------------------- bad models and parameters

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

// ---------------------------------------------------------------- bad arguments

#[test]
fn bad_arguments() {
    let cases: &[(&[&str], &str)] = &[
        (&["--batch-size", "0"], "--batch-size must be at least 1"),
        (&["--lr", "-0.1"], "Invalid learning rate: -0.1"),
        (&["--lr", "NaN"], "Invalid learning rate: NaN"),
        (
            &["--optimizer", "sgd", "--lr", "inf"],
            "Invalid learning rate: inf",
        ),
        (
            &["--growth-factor", "1"],
            "growth_factor must be finite and > 1",
        ),
        (
            &["--growth-factor", "0.5"],
            "growth_factor must be finite and > 1",
        ),
        (
            &["--backoff-factor", "1"],
            "backoff_factor must be in (0, 1)",
        ),
        (
            &["--backoff-factor", "1.5"],
            "backoff_factor must be in (0, 1)",
        ),
        (&["--init-scale", "-2"], "init_scale must be finite and > 0"),
        (&["--steps", "0"], "--steps must be at least 1"),
        (&["--epochs", "0"], "--epochs must be at least 1"),
        (&["--grad-accum", "0"], "--grad-accum must be at least 1"),
        (
            &["--clip-grad-norm", "-1"],
            "--clip-grad-norm must be finite and > 0",
        ),
        (&["--precision", "fp8"], "unknown precision `fp8`"),
        (&["--backend", "cuda"], "unknown backend `cuda`"),
        (&["--f16-storage", "bits"], "unknown f16 storage `bits`"),
        (&["--optimizer", "lion"], "unknown optimizer `lion`"),
        (&["--loss", "hinge"], "unknown loss `hinge`"),
        (&["--model", "resnet"], "unknown preset `resnet`"),
        (&["--dataset", "cifar"], "unknown data set `cifar`"),
        (
            &["--dataset", "synthetic:0"],
            "synthetic:N with N a positive integer",
        ),
        (
            &["--save-every", "0", "--save", "x.safetensors"],
            "--save-every must be at least 1",
        ),
        (&["--save-every", "5"], "--save-every needs --save FILE"),
        (
            &["--grad-accum", "4611686018427387904"],
            "--grad-accum 4611686018427387904 is over the limit of 65536",
        ),
        (
            &["--grad-accum", "65537"],
            "--grad-accum 65537 is over the limit of 65536",
        ),
        (
            &["--batch-size", "4611686018427387904", "--grad-accum", "8"],
            "--batch-size 4611686018427387904 × --grad-accum 8 overflows",
        ),
        (
            &["--dataset", "synthetic:4611686018427387904"],
            "over the limit of 10000000 synthetic samples",
        ),
        (
            &["--dataset", "synthetic:100000000000000000000000000000"],
            "over the limit of 10000000 synthetic samples",
        ),
        (
            &["--dataset", "synthetic:10000001"],
            "over the limit of 10000000 synthetic samples",
        ),
        (&["--batch-size", "-3"], "--batch-size"),
        (
            &["--batch-size", "many"],
            "invalid value 'many' for '--batch-size",
        ),
        (
            &["--momentum", "-1", "--optimizer", "sgd"],
            "Invalid momentum value: -1",
        ),
    ];
    for (flags, needle) in cases {
        let mut args = vec!["train", "--no-validate"];
        if !flags.contains(&"--dataset") {
            args.extend_from_slice(&["--dataset", "synthetic"]);
        }
        if !flags.contains(&"--steps") && !flags.contains(&"--epochs") {
            args.extend_from_slice(&["--steps", "1"]);
        }
        args.extend_from_slice(flags);
        let out = run(&args, None);
        expect_error(&out, &[needle]);
    }
    // Arguments are checked before any data is read or GPU touched.
    let out = run(
        &["compare", "--dataset", "synthetic", "--batch-size", "0"],
        None,
    );
    expect_error(&out, &["--batch-size must be at least 1"]);
    let out = run(&["train", "--no-such-flag"], None);
    expect_error(&out, &["--no-such-flag"]);
    assert_eq!(out.status.code(), Some(2));
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

/// `webgpu-amp … | head`: the reader goes away. The command ends quietly (exit 0, nothing
/// on stderr, no panic), and what it writes to files is still written.
#[test]
fn a_closed_stdout_ends_the_command_quietly() {
    let tmp = TempDir::new("pipe");
    let ck = tmp.path("run.safetensors");
    let report = tmp.path("report.json");
    let png = tmp.path("report.png");
    let cases: Vec<Vec<&str>> = vec![
        vec!["info"],
        vec!["info", "--json"],
        vec![
            "bench",
            "matmul",
            "--json",
            "--sizes",
            "16",
            "--repeats",
            "1",
        ],
        vec!["bench", "matmul", "--sizes", "16,32", "--repeats", "1"],
        vec![
            "train",
            "--dataset",
            "synthetic",
            "--steps",
            "2",
            "--save",
            ck.to_str().unwrap(),
        ],
        vec![
            "compare",
            "--dataset",
            "synthetic",
            "--steps",
            "2",
            "--report",
            report.to_str().unwrap(),
            "--png",
            png.to_str().unwrap(),
        ],
    ];
    for args in cases {
        let mut child = Command::new(BIN)
            .args(&args)
            .env_remove("WEBGPU_AMP_BACKEND")
            .env_remove("WEBGPU_AMP_F16_STORAGE")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn webgpu-amp");
        // Close the read end before the child writes a byte: its first write is EPIPE.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "{args:?}: exit {:?} on a closed stdout; stderr:\n{stderr}",
            out.status
        );
        // (Mesa's loader complains on stderr when XDG_RUNTIME_DIR is unset; not ours.)
        let ours: Vec<&str> = stderr
            .lines()
            .filter(|l| !l.contains("XDG_RUNTIME_DIR"))
            .collect();
        assert!(
            !ours
                .iter()
                .any(|l| l.contains("panicked") || l.contains("error")),
            "{args:?}: not quiet on a closed stdout:\n{stderr}"
        );
    }
    assert!(ck.is_file(), "train wrote no checkpoint with stdout closed");
    assert!(report.is_file() && png.is_file(), "compare lost its report");
}

/// These tests run on a debug build, as CI's `cargo test` does: there integer overflow
/// panics, so a missed overflow fails a test here instead of wrapping silently.
#[test]
fn built_with_overflow_checks() {
    #[allow(arithmetic_overflow, clippy::no_effect)]
    let overflowed = std::panic::catch_unwind(|| {
        let x = std::hint::black_box(u64::MAX);
        x + std::hint::black_box(1)
    })
    .is_err();
    assert!(
        overflowed,
        "this test binary was built without overflow checks (a release build?): the CLI \
         error tests must run on a debug build, where an overflow panics"
    );
}

// ---------------------------------------------------------------- resource faults

#[test]
fn batch_too_big_for_the_device() {
    // mnist-cnn on the embedded set's 8,000 training images in one batch: the first conv's
    // output alone is 8000·32·28·28 halves (401 MB), over lavapipe's 128 MiB per binding
    // (and over the 128 MiB WebGPU default), so planning fails with the limit and a hint.
    let out = run_train(&["--model", "mnist-cnn", "--batch-size", "100000"], None);
    let line = expect_error(
        &out,
        &[
            "batch 8000",
            "max_storage_buffer_binding_size",
            "use a smaller --batch-size",
        ],
    );
    assert!(line.contains("MB"), "sizes in bytes for people: {line}");
}

// ---------------------------------------------------------------- divergence

#[test]
fn f32_divergence_stops_without_saving_nan() {
    let tmp = TempDir::new("diverge");
    let ck = tmp.path("run.safetensors");
    let out = run(
        &[
            "train",
            "--dataset",
            "synthetic",
            "--precision",
            "f32",
            "--optimizer",
            "sgd",
            "--lr",
            "1e6",
            "--batch-size",
            "4",
            "--steps",
            "100",
            "--save",
            ck.to_str().unwrap(),
            "--save-every",
            "1",
            "--no-validate",
        ],
        None,
    );
    expect_error(&out, &["training diverged", "under f32", "lower --lr"]);
    // Periodic checkpoints before the divergence are kept; none holds inf/NaN.
    let saved = webgpu_amp::train::checkpoint::Checkpoint::load(&ck).expect("last good checkpoint");
    assert!(saved.progress.step >= 1);
    for t in &saved.params {
        assert!(
            t.values.iter().all(|v| v.is_finite()),
            "`{}` in the checkpoint is not finite",
            t.name
        );
    }
    // Without periodic saves nothing is written at all.
    let ck2 = tmp.path("final.safetensors");
    let out = run(
        &[
            "train",
            "--dataset",
            "synthetic",
            "--precision",
            "f32",
            "--optimizer",
            "sgd",
            "--lr",
            "1e6",
            "--batch-size",
            "4",
            "--steps",
            "100",
            "--save",
            ck2.to_str().unwrap(),
            "--no-validate",
        ],
        None,
    );
    expect_error(&out, &["training diverged"]);
    assert!(
        !ck2.exists(),
        "a diverged run must not write its final checkpoint"
    );
}

// ---------------------------------------------------------------- property: numeric flags

/// Property: whatever numbers the numeric flags get (boundaries of every integer width,
/// overflowing and negative values, floats from subnormal to inf and NaN, garbage), `train`
/// either trains or ends with exactly one `error:` line and exit code 1 or 2: never a panic
/// or a signal. Cases are drawn from a fixed seed (reproducible; the case is in the message),
/// two or three flags at a time; every run is bounded to at most one epoch of 20 samples or
/// two steps, so a valid case finishes in a fraction of a second.
#[test]
fn numeric_flags_never_panic() {
    const INTS: &[&str] = &[
        "0",
        "1",
        "2",
        "3",
        "-1",
        "255",
        "65535",
        "65536",
        "65537",
        "4294967295",
        "4294967296",
        "9007199254740993",
        "9223372036854775807",
        "9223372036854775808",
        "18446744073709551615",
        "18446744073709551616",
        "1e3",
        "0x10",
        "",
        "ten",
    ];
    const FLOATS: &[&str] = &[
        "0", "-0", "1", "0.5", "2", "-1", "1e-45", "1e-300", "65504", "65520", "1e38", "3.4e38",
        "1e39", "inf", "-inf", "NaN", "", "one",
    ];
    const SYNTHETIC: &[&str] = &[
        "synthetic:0",
        "synthetic:1",
        "synthetic:2",
        "synthetic:-1",
        "synthetic:",
        "synthetic:x",
        "synthetic:10000001",
        "synthetic:4611686018427387904",
        "synthetic:18446744073709551616",
    ];
    // Flags that bound a run's length are handled apart (see below).
    const INT_FLAGS: &[&str] = &[
        "--batch-size",
        "--grad-accum",
        "--steps",
        "--seed",
        "--growth-interval",
        "--save-every",
        "--num-classes",
    ];
    const FLOAT_FLAGS: &[&str] = &[
        "--lr",
        "--init-scale",
        "--growth-factor",
        "--backoff-factor",
        "--momentum",
        "--dampening",
        "--weight-decay",
        "--clip-grad-norm",
    ];
    let tmp = TempDir::new("prop");
    let save = tmp.path("prop.safetensors");
    let save = save.to_str().unwrap();
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
    let mut pick = |n: usize| -> usize {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng % n as u64) as usize
    };
    let (mut trained, mut refused) = (0, 0);
    for case in 0..90 {
        let mut args: Vec<String> = vec!["train".into(), "--no-validate".into()];
        let mut flags: Vec<(&str, &str)> = Vec::new();
        for _ in 0..2 + pick(2) {
            let (flag, value) = if pick(3) == 0 {
                let f = FLOAT_FLAGS[pick(FLOAT_FLAGS.len())];
                (f, FLOATS[pick(FLOATS.len())])
            } else {
                let f = INT_FLAGS[pick(INT_FLAGS.len())];
                (f, INTS[pick(INTS.len())])
            };
            if !flags.iter().any(|(g, _)| *g == flag) {
                flags.push((flag, value));
            }
        }
        let epochs_case = pick(5) == 0;
        if epochs_case {
            // Any epoch count, bounded by two steps of at most one micro-batch each.
            flags.retain(|(f, _)| !["--steps", "--grad-accum"].contains(f));
            flags.push(("--epochs", INTS[pick(INTS.len())]));
            flags.push(("--steps", "2"));
        } else {
            // Any steps, micro-batches and batch size, bounded by one epoch of 20 samples.
            flags.push(("--epochs", "1"));
        }
        let dataset = if pick(4) == 0 {
            SYNTHETIC[pick(SYNTHETIC.len())]
        } else {
            "synthetic"
        };
        if flags
            .iter()
            .any(|(f, _)| *f == "--momentum" || *f == "--dampening")
        {
            flags.push(("--optimizer", "sgd"));
        }
        if flags.iter().any(|(f, _)| *f == "--save-every") {
            flags.push(("--save", save));
        }
        args.extend(["--dataset".into(), dataset.into()]);
        for (f, v) in &flags {
            // `--flag=value`, so an empty or negative value stays this flag's value.
            args.push(format!("{f}={v}"));
        }
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = run(&refs, None);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let what = format!("case {case}: webgpu-amp {}", args.join(" "));
        assert!(!stderr.contains("panicked"), "{what}: panicked:\n{stderr}");
        match out.status.code() {
            Some(0) => trained += 1,
            Some(1 | 2) => {
                let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
                assert!(
                    lines.len() == 1 && lines[0].starts_with("error: "),
                    "{what}: not one error line:\n{stderr}"
                );
                refused += 1;
            }
            other => panic!("{what}: exit {other:?} (a signal or a panic):\n{stderr}"),
        }
    }
    eprintln!("numeric flags: 90 cases, {trained} trained, {refused} refused with one error line");
    assert!(
        trained > 0 && refused > 0,
        "the cases should cover both outcomes"
    );
}
