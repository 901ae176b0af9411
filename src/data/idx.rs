//! IDX files (the MNIST format), parsed here with full validation.
//!
//! An IDX file is: two zero bytes, a type code (0x08 = unsigned byte, the only one MNIST uses),
//! the number of dimensions, one big-endian u32 per dimension, then the data. Images are
//! magic 0x00000803 (`n × rows × cols`), labels 0x00000801 (`n`). gzip-compressed input
//! (first bytes 1f 8b, as distributed) is decompressed transparently.
//!
//! Images become samples of shape `[1, rows, cols]` (one channel, like torchvision's
//! `ToTensor`), scaled to [0, 1], then normalised if asked ([`Normalization`]).

use std::io::Read;
use std::path::Path;

use super::{Dataset, Labels, Normalization, Split, missing_data_error, pixels_to_f32, read_file};
use crate::{Error, Result};

/// Magic number of an IDX file of unsigned bytes with 3 dimensions (images).
pub const IMAGES_MAGIC: u32 = 0x0000_0803;
/// Magic number of an IDX file of unsigned bytes with 1 dimension (labels).
pub const LABELS_MAGIC: u32 = 0x0000_0801;

/// Decompressed sizes above this are refused (a corrupt or hostile gzip stream): the cap of
/// a data file.
const MAX_DECOMPRESSED: u64 = super::file_caps::DATA_FILE.bytes;

/// Returns `bytes` decompressed if they are gzip (magic 1f 8b), else unchanged.
pub fn maybe_gunzip<'a>(bytes: &'a [u8], what: &str) -> Result<std::borrow::Cow<'a, [u8]>> {
    if bytes.len() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b {
        let mut out = Vec::new();
        flate2::read::MultiGzDecoder::new(bytes)
            .take(MAX_DECOMPRESSED + 1)
            .read_to_end(&mut out)
            .map_err(|e| Error::data(format!("{what}: gzip data is corrupt: {e}")))?;
        if out.len() as u64 > MAX_DECOMPRESSED {
            return Err(Error::data(format!(
                "{what}: decompresses to more than {MAX_DECOMPRESSED} bytes"
            )));
        }
        Ok(std::borrow::Cow::Owned(out))
    } else {
        Ok(std::borrow::Cow::Borrowed(bytes))
    }
}

/// Parses an IDX header with the expected magic; returns the dimensions and the data bytes.
fn parse<'a>(bytes: &'a [u8], magic: u32, what: &str) -> Result<(Vec<usize>, &'a [u8])> {
    if bytes.len() < 4 {
        return Err(Error::data(format!(
            "{what}: {} bytes is too short for an IDX header",
            bytes.len()
        )));
    }
    let found = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    if found != magic {
        return Err(Error::data(format!(
            "{what}: bad IDX magic number 0x{found:08x} (expected 0x{magic:08x}: unsigned bytes, {} dimension(s))",
            magic & 0xff
        )));
    }
    let ndim = (magic & 0xff) as usize;
    let header = 4 + 4 * ndim;
    if bytes.len() < header {
        return Err(Error::data(format!(
            "{what}: truncated IDX header ({} bytes, need {header})",
            bytes.len()
        )));
    }
    let dims: Vec<usize> = (0..ndim)
        .map(|d| {
            let o = 4 + 4 * d;
            u32::from_be_bytes([bytes[o], bytes[o + 1], bytes[o + 2], bytes[o + 3]]) as usize
        })
        .collect();
    let expected = dims
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| Error::data(format!("{what}: IDX dimensions {dims:?} overflow")))?;
    let data = &bytes[header..];
    if data.len() != expected {
        let kind = if data.len() < expected {
            "truncated"
        } else {
            "has trailing bytes"
        };
        return Err(Error::data(format!(
            "{what}: IDX data {kind}: dimensions {dims:?} need {expected} bytes, found {}",
            data.len()
        )));
    }
    Ok((dims, data))
}

/// Images from IDX bytes (optionally gzip): `(n, rows, cols, pixels)`.
pub fn parse_images(bytes: &[u8], what: &str) -> Result<(usize, usize, usize, Vec<u8>)> {
    let raw = maybe_gunzip(bytes, what)?;
    let (dims, data) = parse(&raw, IMAGES_MAGIC, what)?;
    if dims.contains(&0) {
        return Err(Error::data(format!(
            "{what}: IDX image dimensions {dims:?} contain a zero"
        )));
    }
    Ok((dims[0], dims[1], dims[2], data.to_vec()))
}

/// Labels from IDX bytes (optionally gzip).
pub fn parse_labels(bytes: &[u8], what: &str) -> Result<Vec<u8>> {
    let raw = maybe_gunzip(bytes, what)?;
    let (_, data) = parse(&raw, LABELS_MAGIC, what)?;
    Ok(data.to_vec())
}

/// A classification data set from an IDX image file and an IDX label file (bytes, either may
/// be gzip). Labels must be below `num_classes`; the counts must agree.
pub fn dataset_from_idx(
    name: &str,
    images: &[u8],
    labels: &[u8],
    num_classes: usize,
    normalization: Option<Normalization>,
) -> Result<Dataset> {
    let images_what = format!("{name} images");
    let labels_what = format!("{name} labels");
    build(
        name,
        (&images_what, images),
        (&labels_what, labels),
        num_classes,
        normalization,
    )
}

/// [`dataset_from_idx`] with a name for each file, used in its errors.
fn build(
    name: &str,
    (images_what, images): (&str, &[u8]),
    (labels_what, labels): (&str, &[u8]),
    num_classes: usize,
    normalization: Option<Normalization>,
) -> Result<Dataset> {
    let (n, rows, cols, pixels) = parse_images(images, images_what)?;
    let labels = parse_labels(labels, labels_what)?;
    if labels.len() != n {
        return Err(Error::data(format!(
            "{name}: {n} images in {images_what} but {} labels in {labels_what}",
            labels.len()
        )));
    }
    if let Some((i, &bad)) = labels
        .iter()
        .enumerate()
        .find(|&(_, &l)| l as usize >= num_classes)
    {
        return Err(Error::data(format!(
            "{labels_what}: label {bad} of sample {i} is not below {num_classes}"
        )));
    }
    Dataset::new(
        name,
        pixels_to_f32(&pixels, normalization),
        vec![1, rows, cols],
        Labels::Classes {
            labels: labels.into_iter().map(u32::from).collect(),
            num_classes,
        },
    )
}

/// Finds `stem` or `stem.gz` in `dir`.
fn find_idx(dir: &Path, stem: &str) -> Result<std::path::PathBuf> {
    for candidate in [stem.to_string(), format!("{stem}.gz")] {
        let path = dir.join(candidate);
        if path.is_file() {
            return Ok(path);
        }
    }
    Err(missing_data_error(
        "MNIST",
        dir,
        &format!("no {stem} or {stem}.gz"),
    ))
}

/// Full MNIST from a folder holding `train-images-idx3-ubyte`, `train-labels-idx1-ubyte`,
/// `t10k-images-idx3-ubyte` and `t10k-labels-idx1-ubyte` (each optionally `.gz`):
/// 60,000 training images and the 10,000-image test set.
pub fn load_mnist_dir(dir: &Path, normalization: Option<Normalization>) -> Result<Split> {
    let load = |images: &str, labels: &str, name: &str| -> Result<Dataset> {
        let images_path = find_idx(dir, images)?;
        let labels_path = find_idx(dir, labels)?;
        build(
            name,
            (
                &images_path.display().to_string(),
                &read_file(&images_path)?,
            ),
            (
                &labels_path.display().to_string(),
                &read_file(&labels_path)?,
            ),
            10,
            normalization,
        )
    };
    // Locate every file first so a partial download names what is missing before any parsing.
    for stem in [
        "train-images-idx3-ubyte",
        "train-labels-idx1-ubyte",
        "t10k-images-idx3-ubyte",
        "t10k-labels-idx1-ubyte",
    ] {
        find_idx(dir, stem)?;
    }
    let train = load(
        "train-images-idx3-ubyte",
        "train-labels-idx1-ubyte",
        "mnist/train",
    )?;
    let test = load(
        "t10k-images-idx3-ubyte",
        "t10k-labels-idx1-ubyte",
        "mnist/test",
    )?;
    Ok(Split {
        train,
        validation: None,
        test: Some(test),
    })
}
