//! Broken data files: IDX, fashion-mnist JSON, CIFAR-10 batches and safetensors data, labels
//! that do not fit the model, a loss that does not fit the labels.

use std::path::PathBuf;

use safetensors::tensor::Dtype;

use super::fixtures::{f32_bytes, i64_bytes, safetensors_file};
use super::{TempDir, expect_error, expect_file_error, run_train, run_train_limited};

/// A fashion-mnist directory whose class 0 file holds `class0` (the others are empty);
/// returns class 0's path.
fn fashion_dir(tmp: &TempDir, class0: &[u8]) -> PathBuf {
    for c in 1..10 {
        tmp.write(&format!("fashion-mnist/{c}.json"), b"{\"data\": []}");
    }
    tmp.write("fashion-mnist/0.json", class0)
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

/// A CIFAR-10 release folder with one record per file; `broken` replaces one file.
fn cifar_dir(tmp: &TempDir, broken: (&str, Vec<u8>)) -> PathBuf {
    use webgpu_amp::data::cifar10::{RECORD, TEST_FILE, TRAIN_FILES};
    for name in TRAIN_FILES.iter().chain([&TEST_FILE]) {
        tmp.write(&format!("cifar/{name}"), &[3; RECORD]);
    }
    tmp.write(&format!("cifar/{}", broken.0), &broken.1)
}

#[test]
fn cifar10_damaged_batches_name_the_file_and_the_record() {
    let tmp = TempDir::new("cifar");
    let record = webgpu_amp::data::cifar10::RECORD;
    let mut bad_label = vec![1u8; 3 * record];
    bad_label[2 * record] = 11;
    let path = cifar_dir(&tmp, ("data_batch_3.bin", bad_label));
    let dataset = format!("cifar10:{}", tmp.0.join("cifar").display());
    let out = run_train(&["--dataset", &dataset], None);
    expect_file_error(&out, &path, "record 2 (byte 6146) has label 11");
    let path = cifar_dir(&tmp, ("test_batch.bin", vec![1u8; record + 7]));
    let out = run_train(&["--dataset", &dataset], None);
    expect_file_error(&out, &path, "record 1 is truncated: 7 of its 3073 bytes");
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
    expect_error(&out, &["--num-classes must be 1 to 16777216, got 0"]);
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
