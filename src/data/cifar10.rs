//! CIFAR-10 from its binary release (`cifar-10-binary.tar.gz`, unpacked: the folder
//! `cifar-10-batches-bin/`), `--dataset cifar10:DIR` (or `cifar10`: `DIR` is then
//! `cifar-10-batches-bin/` in the data directory).
//!
//! The folder holds `data_batch_1.bin` ... `data_batch_5.bin` (training, 10,000 images each)
//! and `test_batch.bin` (10,000): records of one label byte (0 to 9) and 3,072 pixel bytes,
//! the 32 × 32 red plane, then green, then blue, each row by row — CHW, the layout PyTorch's
//! tensors have, so the bytes are the sample as they are. Training records come in file order
//! (batch 1 to 5, record by record) when shuffling is off. Pixels become `x / 255`, and, when
//! normalising (the default for image sets), `(x / 255 − mean) / std` per channel with the
//! usual CIFAR-10 statistics [`MEAN`] and [`STD`] (torchvision's `Normalize(mean, std)`).
//!
//! No package registry ships the images (the CIFAR packages on PyPI and npm are loaders that
//! download them): docs/guide/data.md says where to get them. A damaged file is an error that
//! names the file and the record: a truncated record, a label above 9, an empty file.

use std::path::{Path, PathBuf};

use super::{Dataset, Labels, Split, read_file};
use crate::{Error, Result};

/// The classes by label.
#[rustfmt::skip]
pub const CLASS_NAMES: [&str; 10] = [
    "airplane", "automobile", "bird", "cat", "deer",
    "dog", "frog", "horse", "ship", "truck",
];
/// Per-channel mean of the training images (red, green, blue), after `x / 255`.
pub const MEAN: [f32; 3] = [0.4914, 0.4822, 0.4465];
/// Per-channel standard deviation, after `x / 255`.
pub const STD: [f32; 3] = [0.2470, 0.2435, 0.2616];
/// Bytes of one image: 3 × 32 × 32.
pub const PIXELS: usize = 3 * 32 * 32;
/// Bytes of one record: the label, then the image.
pub const RECORD: usize = 1 + PIXELS;
/// The training files, in the order their records are taken.
pub const TRAIN_FILES: [&str; 5] = [
    "data_batch_1.bin",
    "data_batch_2.bin",
    "data_batch_3.bin",
    "data_batch_4.bin",
    "data_batch_5.bin",
];
pub const TEST_FILE: &str = "test_batch.bin";
/// The folder the release unpacks to; `cifar10` alone looks for it in the data directory.
pub const RELEASE_DIR: &str = "cifar-10-batches-bin";

/// The labels and pixel bytes of one file's records, checked record by record; `what` names
/// the file in errors.
pub fn parse_records(bytes: &[u8], what: &str) -> Result<(Vec<u32>, Vec<u8>)> {
    if bytes.is_empty() {
        return Err(Error::data(format!(
            "{what}: empty file (a CIFAR-10 batch holds records of {RECORD} bytes: a label \
             byte and 3,072 pixel bytes)"
        )));
    }
    let whole = bytes.len() / RECORD;
    let rest = bytes.len() % RECORD;
    if rest != 0 {
        // CIFAR-100's binary records have two label bytes.
        let hint = if bytes.len().is_multiple_of(RECORD + 1) {
            format!(
                "; its {} bytes are a whole number of {}-byte records: CIFAR-100's format, not \
                 CIFAR-10's",
                bytes.len(),
                RECORD + 1
            )
        } else {
            String::new()
        };
        return Err(Error::data(format!(
            "{what}: record {whole} is truncated: {rest} of its {RECORD} bytes (the file's {} \
             bytes are not a whole number of records){hint}",
            bytes.len()
        )));
    }
    let mut labels = Vec::with_capacity(whole);
    let mut pixels = Vec::with_capacity(whole * PIXELS);
    for (i, record) in bytes.chunks_exact(RECORD).enumerate() {
        let label = record[0];
        if label as usize >= CLASS_NAMES.len() {
            return Err(Error::data(format!(
                "{what}: record {i} (byte {}) has label {label}; CIFAR-10's labels are 0 to 9",
                i * RECORD
            )));
        }
        labels.push(label as u32);
        pixels.extend_from_slice(&record[1..]);
    }
    Ok((labels, pixels))
}

/// Pixel bytes (CHW images, one after another) to f32: `x / 255`, then per channel
/// `(x − MEAN[c]) / STD[c]` when normalising.
pub fn pixels_to_f32(bytes: &[u8], normalize: bool) -> Vec<f32> {
    let table: Vec<[f32; 256]> = (0..3)
        .map(|c| {
            std::array::from_fn(|b| {
                let x = b as f32 / 255.0;
                if normalize { (x - MEAN[c]) / STD[c] } else { x }
            })
        })
        .collect();
    let plane = PIXELS / 3;
    bytes
        .iter()
        .enumerate()
        .map(|(i, &b)| table[(i % PIXELS) / plane][b as usize])
        .collect()
}

/// A data set of the records of `files` (in order).
fn load_files(name: &str, files: &[PathBuf], normalize: bool) -> Result<Dataset> {
    let mut labels = Vec::new();
    let mut pixels = Vec::new();
    for path in files {
        let (l, p) = parse_records(&read_file(path)?, &path.display().to_string())?;
        labels.extend(l);
        pixels.extend(p);
    }
    Dataset::new(
        name,
        pixels_to_f32(&pixels, normalize),
        vec![3, 32, 32],
        Labels::Classes {
            labels,
            num_classes: CLASS_NAMES.len(),
        },
    )
}

/// CIFAR-10 from the release's folder: the five training batches in order (50,000 images in
/// the release) and the test batch (10,000). Every file is located before any is read, so a
/// partial download names what is missing first.
pub fn load_dir(dir: &Path, normalize: bool) -> Result<Split> {
    let path = |f: &str| dir.join(f);
    let train: Vec<PathBuf> = TRAIN_FILES.iter().map(|f| path(f)).collect();
    if let Some(missing) = train
        .iter()
        .chain(std::iter::once(&path(TEST_FILE)))
        .find(|p| !p.is_file())
    {
        return Err(Error::data(format!(
            "CIFAR-10 not found in {} (no {}): no package registry ships it, so \
             scripts/fetch-data.sh cannot fetch it; unpack the binary release \
             (cifar-10-binary.tar.gz, docs/guide/data.md says where) and pass its folder as \
             `cifar10:DIR`, or put it in {} in the data directory for `cifar10`",
            dir.display(),
            missing.display(),
            RELEASE_DIR
        )));
    }
    Ok(Split {
        train: load_files("cifar10/train", &train, normalize)?,
        validation: None,
        test: Some(load_files("cifar10/test", &[path(TEST_FILE)], normalize)?),
    })
}
