//! What a checkpoint's numbers must be to load: finite parameters and moments (a diverged
//! run never saves; a file with NaN or inf is damaged or from elsewhere, and would sample
//! or train to NaN), and second moments (Adam's `exp_avg_sq`, a mean of squares) that are
//! not negative. Each refusal names the tensor and the first bad element.

use std::collections::BTreeMap;

use super::NamedTensor;
use crate::error::{Error, Result};

/// Moment name → parameter name → values (`optimizer_state::Moments`, which uses this file).
type Moments = BTreeMap<String, BTreeMap<String, Vec<f32>>>;

/// The first element of `values` that fails `ok`, and its value.
fn first_bad(values: &[f32], ok: impl Fn(f32) -> bool) -> Option<(usize, f32)> {
    values.iter().position(|&v| !ok(v)).map(|i| (i, values[i]))
}

/// Every parameter finite; else an error naming `what`, the tensor and the element.
pub(super) fn check_params(params: &[NamedTensor], what: &str) -> Result<()> {
    for t in params {
        if let Some((i, v)) = first_bad(&t.values, f32::is_finite) {
            return Err(Error::Checkpoint(format!(
                "{what}: tensor `{}` {:?} holds {v} at element {i}; parameters must be finite \
                 (a diverged run saves none)",
                t.name, t.shape
            )));
        }
    }
    Ok(())
}

/// Every moment finite and every second moment at least 0; else why not, naming `what`,
/// the moment and parameter, and the element.
pub(super) fn check_moments(moments: &Moments, what: &str) -> std::result::Result<(), String> {
    for (moment, per) in moments {
        let second = moment == "exp_avg_sq";
        for (name, values) in per {
            let ok = |v: f32| v.is_finite() && (!second || v >= 0.0);
            if let Some((i, v)) = first_bad(values, ok) {
                let must = if second {
                    "finite and >= 0 (a mean of squared gradients)"
                } else {
                    "finite"
                };
                return Err(format!(
                    "{what}: optimizer state `{moment}.{name}` holds {v} at element {i}; it \
                     must be {must}, so the run cannot continue from it (the weights alone \
                     load with --init)"
                ));
            }
        }
    }
    Ok(())
}
