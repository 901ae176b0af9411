//! naga: validation of a specialised source, and the resources an entry point binds.

use crate::error::{Error, Result};

/// Parse and validate WGSL with naga (all capabilities this project may use).
pub fn validate(name: &str, src: &str) -> Result<(naga::Module, naga::valid::ModuleInfo)> {
    let module = naga::front::wgsl::parse_str(src).map_err(|e| Error::Shader {
        name: name.into(),
        message: e.emit_to_string(src),
    })?;
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::SHADER_FLOAT16
            | naga::valid::Capabilities::SHADER_FLOAT16_IN_FLOAT32
            | naga::valid::Capabilities::SUBGROUP
            | naga::valid::Capabilities::SUBGROUP_BARRIER
            | naga::valid::Capabilities::COOPERATIVE_MATRIX,
    )
    .validate(&module)
    .map_err(|e| Error::Shader {
        name: name.into(),
        message: e.emit_to_string(src),
    })?;
    Ok((module, info))
}

/// The globals entry point `entry` uses (None: no such entry point).
fn used_globals<'m>(
    module: &'m naga::Module,
    info: &naga::valid::ModuleInfo,
    entry: &str,
) -> Option<Vec<&'m naga::GlobalVariable>> {
    let index = module.entry_points.iter().position(|e| e.name == entry)?;
    let fi = info.get_entry_point(index);
    Some(
        module
            .global_variables
            .iter()
            .filter(|(h, _)| !fi[*h].is_empty())
            .map(|(_, g)| g)
            .collect(),
    )
}

/// Name and binding of each resource that entry point `entry` uses (None: no such entry).
pub fn used_bindings(
    module: &naga::Module,
    info: &naga::valid::ModuleInfo,
    entry: &str,
) -> Option<Vec<(String, u32)>> {
    let globals = used_globals(module, info, entry)?;
    Some(
        globals
            .into_iter()
            .filter_map(|g| Some((g.name.clone()?, g.binding.as_ref()?.binding)))
            .collect(),
    )
}

/// The storage buffers an entry point may write (`var<storage, read_write>`), by name.
pub fn writable_bindings(
    module: &naga::Module,
    info: &naga::valid::ModuleInfo,
    entry: &str,
) -> Option<Vec<String>> {
    let globals = used_globals(module, info, entry)?;
    let writable = globals.into_iter().filter(|g| {
        matches!(g.space, naga::AddressSpace::Storage { access }
            if access.contains(naga::StorageAccess::STORE))
    });
    Some(writable.filter_map(|g| g.name.clone()).collect())
}

/// Storage buffers an entry point binds (counted against the adapter's
/// `max_storage_buffers_per_shader_stage`: 8 on WebGPU, as few as 4 on old GLES 3.1 devices).
pub fn storage_buffers_used(
    module: &naga::Module,
    info: &naga::valid::ModuleInfo,
    entry: &str,
) -> Option<u32> {
    let globals = used_globals(module, info, entry)?;
    let storage = globals
        .iter()
        .filter(|g| matches!(g.space, naga::AddressSpace::Storage { .. }));
    Some(storage.count() as u32)
}

/// How an entry point binds one resource, as a WebGPU bind-group layout entry states it (what
/// `layout: "auto"` derives from the shader, which is how every kernel is built).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct BindingLayout {
    /// The WGSL global's name (the name a kernel binds it by).
    pub name: String,
    pub binding: u32,
    /// `uniform`, `storage` (read-write) or `read-only-storage`: WebGPU's buffer binding types.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The smallest buffer the binding accepts, in bytes (a runtime-sized array counts one
    /// element).
    pub min_size: u64,
}

/// The bind-group layout entries of entry point `entry` (None: no such entry point).
pub fn binding_layouts(
    module: &naga::Module,
    info: &naga::valid::ModuleInfo,
    entry: &str,
) -> Option<Vec<BindingLayout>> {
    let globals = used_globals(module, info, entry)?;
    let mut layouter = naga::proc::Layouter::default();
    layouter.update(module.to_ctx()).ok()?;
    let mut layouts: Vec<BindingLayout> = globals
        .into_iter()
        .filter_map(|g| {
            let kind = match g.space {
                naga::AddressSpace::Uniform => "uniform",
                naga::AddressSpace::Storage { access }
                    if access.contains(naga::StorageAccess::STORE) =>
                {
                    "storage"
                }
                naga::AddressSpace::Storage { .. } => "read-only-storage",
                _ => return None,
            };
            Some(BindingLayout {
                name: g.name.clone()?,
                binding: g.binding.as_ref()?.binding,
                kind,
                min_size: u64::from(layouter[g.ty].size),
            })
        })
        .collect();
    layouts.sort_by_key(|l| l.binding);
    Some(layouts)
}
