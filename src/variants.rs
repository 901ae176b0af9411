//! Every shader the library declares, and every variant of each: the portability tests
//! validate each variant with naga and translate it to SPIR-V, MSL and HLSL. The list sits
//! above the dispatchers (ops, amp, optim), each of which declares its own shaders.

use crate::error::Result;
use crate::shader::{ShaderDecl, Variant};
use crate::{amp, ops, optim};

/// Every built-in shader declaration.
pub fn shaders() -> impl Iterator<Item = &'static ShaderDecl> {
    [ops::SHADERS, amp::SHADERS, optim::SHADERS]
        .into_iter()
        .flatten()
        .copied()
}

/// Every variant of every shader file.
pub fn all() -> Result<Vec<Variant>> {
    let mut v = Vec::new();
    for shader in shaders() {
        v.extend(shader.variants()?);
    }
    Ok(v)
}
