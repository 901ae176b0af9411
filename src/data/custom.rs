//! Custom data sets: a safetensors file with two tensors.
//!
//! - `x`: f32, shape `[N, ...]` (one sample per row; images as `[N, C, H, W]`).
//! - `y`: either f32 `[N, k]` regression targets, or integer class labels `[N]` of any integer
//!   dtype PyTorch writes (I64, I32, I16, I8, U8, and U16/U32/U64), converted to u32 with range
//!   checks. `num_classes` is the largest label + 1.
//!
//! - or token sequences: integer `x` and `y`, both `[N, T]` ([`super::tokens`]).
//!
//! Written from PyTorch with
//! `safetensors.torch.save_file({"x": x.float().contiguous(), "y": y}, "data.safetensors")`.
//! Values are used as stored: no normalisation, no shuffling of the file order.

use std::path::Path;

use safetensors::{Dtype, SafeTensors, tensor::TensorView};

use super::integers::{is_integer, to_u32};
use super::{Dataset, Labels, read_file};
use crate::{Error, Result};

/// Loads a custom data set from a safetensors file.
pub fn load(path: &Path) -> Result<Dataset> {
    let bytes = read_file(path)?;
    from_bytes(&path.display().to_string(), &bytes)
}

/// Parses a custom data set from safetensors bytes; `name` (the file name) is used in errors
/// and becomes the data set's name.
pub fn from_bytes(name: &str, bytes: &[u8]) -> Result<Dataset> {
    let err = |msg: String| Error::data(format!("{name}: {msg}"));
    let file = SafeTensors::deserialize(bytes)
        .map_err(|e| err(format!("not a valid safetensors file: {e}")))?;
    let get = |tensor: &str, role: &str| {
        file.tensor(tensor).map_err(|_| {
            let mut names = file.names();
            names.sort();
            err(format!(
                "no tensor named `{tensor}` ({role}); the file holds {names:?}"
            ))
        })
    };
    let x = get("x", "the inputs, f32 [N, ...]")?;
    let y = get("y", "f32 targets [N, k] or integer labels [N]")?;

    // Integer `x` and `y` of one shape [N, T]: token sequences.
    if is_integer(x.dtype())
        && is_integer(y.dtype())
        && x.shape().len() == 2
        && y.shape() == x.shape()
    {
        return super::token_dataset::from_views(name, &x, &y);
    }
    if is_integer(x.dtype()) {
        // Integer inputs are token ids: name both tensors, since their shapes or dtypes
        // disagree.
        return Err(err(format!(
            "`x` is {:?} {:?} and `y` is {:?} {:?}: token ids are integer `x` and `y` of one \
             shape [N, T]; features are f32 `x` [N, ...] (save `x.float()`)",
            x.dtype(),
            x.shape(),
            y.dtype(),
            y.shape()
        )));
    }
    if x.dtype() != Dtype::F32 {
        return Err(err(format!(
            "`x` has dtype {:?}, expected F32 (save `x.float()`), or integer token ids [N, T] \
             with integer targets `y` [N, T]",
            x.dtype()
        )));
    }
    let x_shape = x.shape();
    if x_shape.len() < 2 {
        return Err(err(format!(
            "`x` has shape {x_shape:?}, expected [N, ...] with at least two dimensions \
             (one feature per sample: reshape to [N, 1])"
        )));
    }
    let n = x_shape[0];
    if n == 0 {
        return Err(err("`x` holds no samples (N = 0)".into()));
    }
    if x_shape[1..].contains(&0) {
        return Err(err(format!(
            "`x` has shape {x_shape:?}: a sample dimension is zero"
        )));
    }
    let y_n = y.shape().first().copied();
    if y_n != Some(n) {
        return Err(err(format!(
            "`x` has {n} samples but `y` has shape {:?} ({} samples)",
            y.shape(),
            y_n.map_or("no".to_string(), |v| v.to_string())
        )));
    }

    let labels = if y.dtype() == Dtype::F32 {
        if y.shape().len() != 2 || y.shape()[1] == 0 {
            return Err(err(format!(
                "f32 `y` has shape {:?}, expected regression targets [N, k] with k ≥ 1 \
                 (reshape [N] to [N, 1]; for classes save integer labels [N])",
                y.shape()
            )));
        }
        let dim = y.shape()[1];
        let values = f32_values(&y);
        first_non_finite(&values, dim, "y").map_err(err)?;
        Labels::Targets { values, dim }
    } else {
        if !is_integer(y.dtype()) {
            return Err(err(format!(
                "`y` has dtype {:?}: expected F32 targets [N, k] or integer labels [N] \
                 (I64, I32, I16, I8, U8, U16, U32, U64)",
                y.dtype()
            )));
        }
        if y.shape().len() != 1 {
            return Err(err(format!(
                "integer `y` has shape {:?}, expected class labels [N]",
                y.shape()
            )));
        }
        let labels = integer_labels(&y).map_err(err)?;
        let num_classes = labels.iter().max().map_or(0, |&m| m as usize + 1);
        Labels::Classes {
            labels,
            num_classes,
        }
    };

    let x_values = f32_values(&x);
    first_non_finite(&x_values, x_shape[1..].iter().product(), "x").map_err(err)?;
    Dataset::new(name, x_values, x_shape[1..].to_vec(), labels)
}

/// The first inf or NaN of `values` (samples of `per_sample` values each, tensor `field`),
/// named by sample and position: a non-finite input or target makes every step it is drawn
/// into non-finite, which the GradScaler skips forever (or f32 training diverges on), so it is
/// refused here, where the user can find it.
fn first_non_finite(
    values: &[f32],
    per_sample: usize,
    field: &str,
) -> std::result::Result<(), String> {
    match values.iter().position(|v| !v.is_finite()) {
        None => Ok(()),
        Some(i) => {
            let bad = values.iter().filter(|v| !v.is_finite()).count();
            let per_sample = per_sample.max(1);
            Err(format!(
                "`{field}` holds {bad} non-finite value{} (inf/NaN); the first is {} at sample \
                 {}, element {} of the sample: training on it would make every step it is \
                 drawn into inf/NaN (replace or drop those samples)",
                if bad == 1 { "" } else { "s" },
                values[i],
                i / per_sample,
                i % per_sample
            ))
        }
    }
}

fn f32_values(view: &TensorView<'_>) -> Vec<f32> {
    view.data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// Integer labels of any width and signedness to u32, rejecting negatives and values above
/// u32::MAX.
fn integer_labels(view: &TensorView<'_>) -> std::result::Result<Vec<u32>, String> {
    to_u32(
        view,
        "y",
        |i, v| format!("label {v} of sample {i} is negative"),
        |i, v| format!("label {v} of sample {i} does not fit in u32"),
    )
}
