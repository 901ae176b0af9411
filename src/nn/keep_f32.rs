//! Layers kept in f32 whatever the precision mode (`--keep-f32 NAME[,NAME...]`, or
//! `"keep_f32": true` beside a JSON layer's kind): [`ModelSpec::keep_f32`] names them as the
//! precision map does, and [`policy`] turns the names into the policy's per-layer
//! overrides ([`Policy::overrides`]). A layer made of layers keeps the layers inside it in
//! f32 too. How a model is computed, not what it is: checkpoints and model equality do not
//! depend on it.

use super::loss::LossKind;
use super::model::ModelSpec;
use super::network::precision_map;
use crate::amp::policy::{Policy, Precision};
use crate::error::{Error, Result};
use crate::tensor::DType;

/// The policy of `precision` for `spec`, with its [`ModelSpec::keep_f32`] layers (and the
/// layers inside them) computing in f32. An unknown name is an error listing the valid ones.
pub fn policy(spec: &ModelSpec, precision: Precision, loss: LossKind) -> Result<Policy> {
    let mut policy = Policy::new(precision);
    if spec.keep_f32.is_empty() {
        return Ok(policy);
    }
    let rows = precision_map(spec, &policy, loss);
    // The loss row is f32 already; only layers can be named.
    let layers = &rows[..rows.len().saturating_sub(1)];
    for name in &spec.keep_f32 {
        let inside = format!("{name}.");
        let mut found = false;
        for row in layers {
            if row.name == *name || row.name.starts_with(&inside) {
                policy.overrides.insert(row.index, DType::F32);
                found |= row.name == *name;
            }
        }
        if !found {
            return Err(unknown(name, layers.iter().map(|r| r.name.as_str())));
        }
    }
    Ok(policy)
}

/// Check the names against `spec`'s layers (as its precision map names them) and keep them.
pub fn with_keep_f32(mut spec: ModelSpec, names: &[String]) -> Result<ModelSpec> {
    for name in names {
        if !spec.keep_f32.contains(name) {
            spec.keep_f32.push(name.clone());
        }
    }
    policy(&spec, Precision::AmpF16, LossKind::CrossEntropy)?;
    Ok(spec)
}

fn unknown<'a>(name: &str, valid: impl Iterator<Item = &'a str>) -> Error {
    let mut names: Vec<&str> = Vec::new();
    for n in valid {
        if !names.contains(&n) {
            names.push(n);
        }
    }
    Error::InvalidArgument(format!(
        "keep-f32: no layer is named `{name}`; the layers (as the precision map names them) \
         are: {}",
        names.join(", ")
    ))
}
