//! Every shader variant the library may compile, from each dispatcher's own list: the
//! portability tests validate each with naga and translate it to SPIR-V, MSL and HLSL. It
//! sits above the dispatchers (ops, amp, optim), which know their variants.

use crate::error::Result;
use crate::shader::Variant;
use crate::{amp, ops, optim};

/// Every variant of every shader file.
pub fn all() -> Result<Vec<Variant>> {
    let mut v = Vec::new();
    v.extend(ops::elementwise::variants()?);
    v.extend(ops::conv::variants()?);
    v.extend(ops::pool::variants()?);
    v.extend(ops::reduce::variants()?);
    v.extend(ops::loss::variants()?);
    v.extend(amp::scaler::variants()?);
    v.extend(amp::clip::variants()?);
    v.extend(optim::variants()?);
    v.extend(amp::round::variants()?);
    v.extend(ops::matmul::variants()?);
    v.extend(ops::histogram::variants()?);
    v.extend(ops::layernorm::variants()?);
    v.extend(ops::embedding::variants()?);
    v.extend(ops::sample::variants()?);
    v.extend(ops::attention::variants()?);
    v.extend(ops::dropout::variants()?);
    Ok(v)
}
