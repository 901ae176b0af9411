//! Every shader the library declares, and every variant of each: the portability tests
//! validate each variant with naga and translate it to SPIR-V, MSL and HLSL, and
//! [`export_browser`] hands the ones a browser can select, with their bind-group layouts, to
//! Tint (`scripts/tint-check.sh`: Chrome's WebGPU engine, Dawn). The list sits above the
//! dispatchers (ops, amp, optim), each of which declares its own shaders.

use crate::error::Result;
use crate::gpu::CompiledEntry;
use crate::shader::{self, BindingLayout, ShaderDecl, Variant};
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

/// The entry points of `compiled` that no declared variant covers, as `label::entry`
/// lines: covered means a declared variant of the same shader with the same constants gives
/// every `#tensor` the entry point uses the same storage (the ones it does not use do not
/// reach its code). The portability tests and the Tint check see declared variants only,
/// so an uncovered kernel has never been through the browser's shader compiler.
pub fn undeclared(compiled: &[CompiledEntry]) -> Result<Vec<String>> {
    let declared = all()?;
    // The matmul epilogue's constants only switch lines of `store_pair` on and off; the
    // grids list every variant with all of them off and all on (`Epilogue::VARIANTS`),
    // which compiles every line, so a mix of them is covered by its other constants.
    let shape = |v: &Variant| -> Vec<(&'static str, String)> {
        v.consts
            .iter()
            .filter(|(n, _)| !n.starts_with("EPI_"))
            .cloned()
            .collect()
    };
    let covers = |d: &Variant, c: &CompiledEntry| {
        d.shader == c.variant.shader
            && shape(d) == shape(&c.variant)
            && c.variant.storages.iter().all(|(t, s)| {
                !c.used.contains(&t.name)
                    || d.storages.iter().any(|(u, v)| u.name == t.name && v == s)
            })
    };
    Ok(compiled
        .iter()
        .filter(|c| !declared.iter().any(|d| covers(d, c)))
        .map(|c| format!("{}::{}", c.variant.label(), c.entry))
        .collect())
}

/// Whether the browser build can select this variant: every one but the tensor-core kernels
/// (cooperative matrices are a native wgpu extension; no browser offers them).
pub fn browser_selectable(variant: &Variant) -> bool {
    !variant
        .decl
        .source
        .contains("enable wgpu_cooperative_matrix;")
}

/// One compute entry point of a variant with the bind-group layout its kernels get.
#[derive(Debug, serde::Serialize)]
pub struct EntryLayout {
    pub name: String,
    pub bindings: Vec<BindingLayout>,
}

/// One variant as WGSL a browser compiles: its text, whether it needs `shader-f16`, and every
/// entry point with its bindings.
#[derive(Debug, serde::Serialize)]
pub struct ExportedVariant {
    pub label: String,
    pub native_f16: bool,
    /// The storage of each declared tensor (`x=f16`, `w=f32`, ...), as the label lists them.
    pub storages: Vec<String>,
    pub wgsl: String,
    pub entries: Vec<EntryLayout>,
}

/// Every variant the browser build can select, specialised, with each entry point's layout
/// (naga's view of the bindings: what `layout: "auto"` gives and what [`crate::gpu::Kernel`]
/// binds by name).
pub fn export_browser() -> Result<Vec<ExportedVariant>> {
    all()?
        .into_iter()
        .filter(browser_selectable)
        .map(|v| export(&v))
        .collect()
}

/// One variant, specialised and described.
pub fn export(v: &Variant) -> Result<ExportedVariant> {
    let wgsl = v.specialise()?;
    let (module, info) = shader::validate(&v.label(), &wgsl)?;
    let entries = module
        .entry_points
        .iter()
        .filter(|e| e.stage == naga::ShaderStage::Compute)
        .map(|e| EntryLayout {
            name: e.name.clone(),
            bindings: shader::binding_layouts(&module, &info, &e.name).unwrap_or_default(),
        })
        .collect();
    Ok(ExportedVariant {
        label: v.label(),
        native_f16: v.uses_native_f16(),
        storages: v
            .storages
            .iter()
            .map(|(d, s)| format!("{}={}", d.name, s.name()))
            .collect(),
        wgsl,
        entries,
    })
}
