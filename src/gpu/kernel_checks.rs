//! What a kernel's entry point is checked for before it is built: what naga says it binds
//! (computed once per variant and entry, device-independent), and the bindings WebGPU forbids
//! in one dispatch.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::GpuBuffer;
use crate::error::{Error, Result};
use crate::shader::{self, Variant};

/// What naga says of one entry point of a variant ([`Analysis`]). Device-independent, so
/// computed once per process (a dry plan and the real one share it).
pub(super) fn analyse(variant: &Variant, entry: &str, source: &str) -> Result<Analysis> {
    static ANALYSES: std::sync::OnceLock<Mutex<HashMap<String, Analysis>>> =
        std::sync::OnceLock::new();
    // The source's address too: two shaders declared under one name must not share.
    let key = format!(
        "{}#{}#{:p}",
        variant.key(),
        entry,
        variant.decl.source.as_ptr()
    );
    let analyses = ANALYSES.get_or_init(Default::default);
    if let Some(found) = analyses.lock().expect("shader analyses").get(&key) {
        return Ok(found.clone());
    }
    let (module, info) = shader::validate(&variant.label(), source)?;
    let used = shader::used_bindings(&module, &info, entry).ok_or_else(|| Error::Shader {
        name: variant.label(),
        message: format!("no entry point `{entry}`"),
    })?;
    let storage_buffers = shader::storage_buffers_used(&module, &info, entry).unwrap_or(0);
    let writable = shader::writable_bindings(&module, &info, entry).unwrap_or_default();
    let found = Analysis {
        used,
        storage_buffers,
        writable,
    };
    analyses
        .lock()
        .expect("shader analyses")
        .insert(key, found.clone());
    Ok(found)
}

/// What naga says of one entry point of a variant.
#[derive(Clone)]
pub(super) struct Analysis {
    /// The bindings it uses: (name, index).
    pub(super) used: Vec<(String, u32)>,
    /// How many storage buffers it binds.
    pub(super) storage_buffers: u32,
    /// The storage buffers it may write, by name.
    pub(super) writable: Vec<String>,
}

/// Bindings of one buffer that WebGPU refuses in one dispatch: a writable binding beside a
/// read-only one (any ranges: a usage conflict), or beside another writable one whose range
/// overlaps it (aliasing). wgpu's native validation reports the first only when the pass
/// is submitted, and lets the second through where Chrome rejects the dispatch; here both
/// are an error when the kernel is made, naming the kernel and the bindings.
pub(super) fn check_aliasing(
    kernel: &str,
    bound: &[(&str, &Arc<GpuBuffer>, u64, u64, bool)],
) -> Result<()> {
    for (i, a) in bound.iter().enumerate() {
        for b in &bound[i + 1..] {
            if !Arc::ptr_eq(a.1, b.1) || !(a.4 || b.4) {
                continue;
            }
            let overlap = a.2 < b.2 + b.3 && b.2 < a.2 + a.3;
            let conflict = if a.4 && b.4 { overlap } else { true };
            if conflict {
                let how = |w: bool| if w { "writable" } else { "read-only" };
                return Err(Error::Gpu(format!(
                    "kernel {kernel} binds buffer `{}` as `{}` ({}, bytes {}..{}) and as `{}` ({}, bytes {}..{}): \
                     WebGPU forbids a writable binding beside another binding of the same buffer in one dispatch",
                    a.1.label(),
                    a.0,
                    how(a.4),
                    a.2,
                    a.2 + a.3,
                    b.0,
                    how(b.4),
                    b.2,
                    b.2 + b.3
                )));
            }
        }
    }
    Ok(())
}
