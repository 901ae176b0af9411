//! CIFAR-10's binary release, on files generated in its format: file order, labels, the CHW
//! pixels and their per-channel normalisation, the source names, and every damaged file
//! (truncated record, label above 9, empty file, CIFAR-100's records, a missing batch) named
//! with its record.

use std::path::{Path, PathBuf};

use webgpu_amp::data::cifar10::{self, MEAN, PIXELS, RECORD, STD, TEST_FILE, TRAIN_FILES};
use webgpu_amp::data::{DataSource, Labels};

use super::common::cli::fresh_dir;
use super::{data_message, feats};

/// Record `k` of a generated file: label `(file + k) % 10`, pixel `p` = `(7 file + 3 k + p) % 256`.
fn record(file: usize, k: usize) -> Vec<u8> {
    let mut r = vec![((file + k) % 10) as u8];
    r.extend((0..PIXELS).map(|p| ((7 * file + 3 * k + p) % 256) as u8));
    r
}

/// A release folder with `per_file` records in each training batch and 2 in the test batch.
fn release(tag: &str, per_file: usize) -> PathBuf {
    let dir = fresh_dir(tag);
    for (f, name) in TRAIN_FILES.iter().enumerate() {
        let bytes: Vec<u8> = (0..per_file).flat_map(|k| record(f, k)).collect();
        std::fs::write(dir.join(name), bytes).unwrap();
    }
    let test: Vec<u8> = (0..2).flat_map(|k| record(9, k)).collect();
    std::fs::write(dir.join(TEST_FILE), test).unwrap();
    dir
}

fn classes(labels: &Labels) -> &[u32] {
    match labels {
        Labels::Classes {
            labels,
            num_classes: 10,
        } => labels,
        other => panic!("expected 10 classes, got {other:?}"),
    }
}

#[test]
fn cifar10_takes_records_in_file_order_with_chw_pixels() {
    let dir = release("cifar-order", 3);
    let split = cifar10::load_dir(&dir, false).unwrap();
    let train = &split.train;
    assert_eq!((train.n, train.sample_shape.clone()), (15, vec![3, 32, 32]));
    // Batches 1 to 5, each record by record.
    let want: Vec<u32> = (0..5)
        .flat_map(|f| (0..3).map(move |k| ((f + k) % 10) as u32))
        .collect();
    assert_eq!(classes(&train.y), want);
    // Sample 7 is record 1 of data_batch_3.bin; its pixels are the bytes as they are, / 255.
    let x = &feats(train)[7 * PIXELS..8 * PIXELS];
    let bytes = &record(2, 1)[1..];
    for p in [0, 1023, 1024, 2048, PIXELS - 1] {
        assert_eq!(x[p], bytes[p] as f32 / 255.0, "pixel {p}");
    }
    let test = split.test.as_ref().unwrap();
    assert_eq!((test.n, classes(&test.y)), (2, &[9, 0][..]));
    assert!(split.validation.is_none());
}

#[test]
fn cifar10_normalises_each_channel_with_its_own_statistics() {
    let dir = release("cifar-norm", 1);
    let plain = cifar10::load_dir(&dir, false).unwrap();
    let normed = cifar10::load_dir(&dir, true).unwrap();
    let (a, b) = (feats(&plain.train), feats(&normed.train));
    // Red, green and blue planes of the first image: (x/255 − mean_c) / std_c.
    for (c, p) in [(0usize, 5usize), (1, 1024 + 5), (2, 2048 + 5)] {
        assert_eq!(b[p], (a[p] - MEAN[c]) / STD[c], "channel {c}");
    }
    assert_eq!(MEAN, [0.4914, 0.4822, 0.4465]);
    assert_eq!(STD, [0.2470, 0.2435, 0.2616]);
}

#[test]
fn cifar10_source_names() {
    assert_eq!(
        "cifar10:/some/dir".parse::<DataSource>().unwrap(),
        DataSource::Cifar10(Some(PathBuf::from("/some/dir")))
    );
    assert_eq!(
        "cifar10".parse::<DataSource>().unwrap(),
        DataSource::Cifar10(None)
    );
    let msg = data_message("cifar10:".parse::<DataSource>());
    assert!(msg.contains("expected cifar10:DIR"), "{msg}");
    // Through the source, normalised (the default for image sets).
    let dir = release("cifar-source", 2);
    let source = DataSource::Cifar10(Some(dir));
    let split = source.load(true).unwrap();
    assert_eq!(split.train.n, 10);
}

/// The error of loading a release whose `file` holds `bytes`.
fn damaged(tag: &str, file: &str, bytes: Vec<u8>) -> String {
    let dir = release(tag, 2);
    std::fs::write(dir.join(file), bytes).unwrap();
    data_message(cifar10::load_dir(&dir, true))
}

fn expect(msg: &str, needles: &[&str]) {
    for n in needles {
        assert!(msg.contains(n), "`{n}` missing from: {msg}");
    }
}

#[test]
fn cifar10_damaged_files_name_the_file_and_the_record() {
    // A truncated last record.
    let mut bytes: Vec<u8> = (0..3).flat_map(|k| record(0, k)).collect();
    bytes.truncate(2 * RECORD + 100);
    let msg = damaged("cifar-trunc", "data_batch_4.bin", bytes);
    expect(
        &msg,
        &[
            "data_batch_4.bin",
            "record 2 is truncated: 100 of its 3073 bytes",
        ],
    );
    // A label above 9.
    let mut bytes: Vec<u8> = (0..3).flat_map(|k| record(0, k)).collect();
    bytes[RECORD] = 10;
    let msg = damaged("cifar-label", "test_batch.bin", bytes);
    expect(
        &msg,
        &[
            "test_batch.bin",
            "record 1 (byte 3073) has label 10",
            "0 to 9",
        ],
    );
    // An empty file.
    let msg = damaged("cifar-empty", "data_batch_1.bin", Vec::new());
    expect(&msg, &["data_batch_1.bin", "empty file"]);
    // CIFAR-100's binary records (two label bytes) are told apart.
    let msg = damaged("cifar-100", "data_batch_2.bin", vec![0; 2 * (RECORD + 1)]);
    expect(&msg, &["data_batch_2.bin", "CIFAR-100's format"]);
}

#[test]
fn cifar10_missing_batch_says_where_to_get_the_data() {
    let dir = release("cifar-missing", 1);
    std::fs::remove_file(dir.join("data_batch_5.bin")).unwrap();
    let msg = data_message(cifar10::load_dir(&dir, true));
    expect(
        &msg,
        &[
            "data_batch_5.bin",
            "no package registry ships it",
            "docs/guide/data.md",
            "cifar10:DIR",
        ],
    );
    let none = data_message(cifar10::load_dir(Path::new("/nonexistent/cifar"), true));
    expect(&none, &["/nonexistent/cifar", "data_batch_1.bin"]);
}
