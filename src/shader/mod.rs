//! WGSL specialisation and validation.
//!
//! Each op family is one WGSL file in `shaders/`. A file declares its tensors with a
//! directive line
//!
//! ```text
//! #tensor x 1 read          // name, binding, access (read | read_write)
//! ```
//!
//! and reads and writes them only through generated helpers, whatever the storage:
//! `x_load(i) -> f32`, `x_load2(i) -> vec2<f32>` (i even), and for `read_write` tensors
//! `x_store(i, v: f32)` and `x_store2(i, v: vec2<f32>)` (i even; writes a whole packed word).
//! Math is always f32; the helpers convert. The Rust side picks a [`Storage`] per tensor and
//! generates the declaration and helpers for it, prepends `enable f16;` when any tensor is
//! native f16, injects compile-time `const`s, and adds `shaders/prelude.wgsl` (the portable
//! rounding helpers every store goes through, and the indices of a folded 1-D launch).
//!
//! WGSL shared by some shaders only lives in `shaders/include/`; a shader pulls a file in with
//!
//! ```text
//! #include workgroup_reduce     // shaders/include/workgroup_reduce.wgsl, pasted in place
//! ```
//!
//! so the fixed-order workgroup reductions and the GradScaler's state layout exist once, not
//! once per shader.
//!
//! Packed storages keep two 16-bit values per `u32`. Two threads may write the two halves of
//! one word, so single-element stores to a packed tensor use `atomicAnd`/`atomicOr` on its
//! own half; kernels that own both halves use `store2`, one plain atomic store.

use crate::dtype::Storage;
use crate::error::{Error, Result};

/// Every shader source, by name. One file per op family.
pub const SHADERS: &[(&str, &str)] = &[
    ("elementwise", include_str!("../shaders/elementwise.wgsl")),
    ("conv", include_str!("../shaders/conv.wgsl")),
    ("pool", include_str!("../shaders/pool.wgsl")),
    ("reduce", include_str!("../shaders/reduce.wgsl")),
    ("loss", include_str!("../shaders/loss.wgsl")),
    ("scaler", include_str!("../shaders/scaler.wgsl")),
    ("clip", include_str!("../shaders/clip.wgsl")),
    ("optim", include_str!("../shaders/optim.wgsl")),
    ("round", include_str!("../shaders/round.wgsl")),
    ("matmul", include_str!("../shaders/matmul.wgsl")),
    ("matmul_coop", include_str!("../shaders/matmul_coop.wgsl")),
    ("histogram", include_str!("../shaders/histogram.wgsl")),
    ("layernorm", include_str!("../shaders/layernorm.wgsl")),
    ("embedding", include_str!("../shaders/embedding.wgsl")),
    ("sample", include_str!("../shaders/sample.wgsl")),
    ("attention", include_str!("../shaders/attention.wgsl")),
    ("dropout", include_str!("../shaders/dropout.wgsl")),
];

const PRELUDE: &str = include_str!("../shaders/prelude.wgsl");

/// WGSL that shaders pull in with `#include NAME` (from `shaders/include/`).
pub const INCLUDES: &[(&str, &str)] = &[
    (
        "workgroup_reduce",
        include_str!("../shaders/include/workgroup_reduce.wgsl"),
    ),
    (
        "scaler_state",
        include_str!("../shaders/include/scaler_state.wgsl"),
    ),
    (
        "matmul_common",
        include_str!("../shaders/include/matmul_common.wgsl"),
    ),
];

/// The text of `#include NAME`, once per shader: a second include of the same file would
/// define everything twice.
fn include(shader: &str, line: &str, included: &mut Vec<String>) -> Result<&'static str> {
    let bad = |message: String| Error::Shader {
        name: shader.into(),
        message,
    };
    let name = match line.split_whitespace().collect::<Vec<_>>()[..] {
        ["#include", name] => name,
        _ => {
            return Err(bad(format!(
                "bad directive `{line}` (want `#include NAME`)"
            )));
        }
    };
    let (_, text) = INCLUDES
        .iter()
        .find(|(n, _)| *n == name)
        .ok_or_else(|| bad(format!("no include `{name}` (shaders/include/{name}.wgsl)")))?;
    if included.iter().any(|n| n == name) {
        return Err(bad(format!("`{name}` is included twice")));
    }
    included.push(name.to_string());
    Ok(text)
}

pub fn source(name: &str) -> Result<&'static str> {
    SHADERS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| *s)
        .ok_or_else(|| Error::Shader {
            name: name.into(),
            message: "no such shader".into(),
        })
}

/// A `#tensor` declaration of a shader source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorDecl {
    pub name: String,
    pub binding: u32,
    pub writable: bool,
}

/// Parse the `#tensor` directives of a source.
pub fn tensor_decls(shader: &str, src: &str) -> Result<Vec<TensorDecl>> {
    let mut decls = Vec::new();
    for line in src.lines() {
        let Some(rest) = line.trim().strip_prefix("#tensor") else {
            continue;
        };
        let parts: Vec<&str> = rest.split_whitespace().collect();
        let bad = || Error::Shader {
            name: shader.into(),
            message: format!(
                "bad directive `{}` (want `#tensor NAME BINDING read|read_write`)",
                line.trim()
            ),
        };
        let [name, binding, access] = parts[..] else {
            return Err(bad());
        };
        let binding = binding.parse().map_err(|_| bad())?;
        let writable = match access {
            "read" => false,
            "read_write" => true,
            _ => return Err(bad()),
        };
        decls.push(TensorDecl {
            name: name.into(),
            binding,
            writable,
        });
    }
    Ok(decls)
}

/// One specialisation of a shader: a storage for each declared tensor plus constants.
#[derive(Clone, Debug)]
pub struct Variant {
    pub shader: &'static str,
    /// Every declared tensor with its storage, in declaration order.
    pub storages: Vec<(TensorDecl, Storage)>,
    pub consts: Vec<(&'static str, String)>,
}

impl Variant {
    /// Storages not given default to f32 (those tensors are unused by the entry point).
    pub fn new(
        shader: &str,
        storages: &[(String, Storage)],
        consts: &[(&'static str, String)],
    ) -> Result<Self> {
        let (shader, src) = SHADERS
            .iter()
            .find(|(n, _)| *n == shader)
            .copied()
            .ok_or_else(|| Error::Shader {
                name: shader.into(),
                message: "no such shader".into(),
            })?;
        let decls = tensor_decls(shader, src)?;
        for (name, _) in storages {
            if !decls.iter().any(|d| &d.name == name) {
                return Err(Error::Shader {
                    name: shader.into(),
                    message: format!("`{name}` is not a #tensor of this shader"),
                });
            }
        }
        let storages = decls
            .into_iter()
            .map(|d| {
                let s = storages
                    .iter()
                    .find(|(n, _)| *n == d.name)
                    .map_or(Storage::F32, |(_, s)| *s);
                (d, s)
            })
            .collect();
        Ok(Self {
            shader,
            storages,
            consts: consts.to_vec(),
        })
    }

    /// Cache key: shader, storages and constants.
    pub fn key(&self) -> String {
        let s: Vec<String> = self
            .storages
            .iter()
            .map(|(d, s)| format!("{}={}", d.name, s.name()))
            .collect();
        let c: Vec<String> = self
            .consts
            .iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect();
        format!("{}[{}][{}]", self.shader, s.join(","), c.join(","))
    }

    pub fn label(&self) -> String {
        self.key()
    }

    pub fn uses_native_f16(&self) -> bool {
        self.storages.iter().any(|(_, s)| *s == Storage::F16)
    }

    /// The full WGSL text of this variant.
    pub fn specialise(&self) -> Result<String> {
        let src = source(self.shader)?;
        let mut out = String::new();
        if self.uses_native_f16() {
            out.push_str("enable f16;\n");
        }
        // A shader's own `enable` directives (cooperative matrices) must precede every
        // declaration: they move to the top and stay as comments in place.
        for line in src.lines().filter(|l| is_enable(l)) {
            out.push_str(line.trim());
            out.push('\n');
        }
        for (name, value) in &self.consts {
            out.push_str(&format!("const {name} = {value};\n"));
        }
        out.push_str(PRELUDE);
        if self.uses_native_f16() {
            out.push_str(NATIVE_F16_HELPERS);
        }
        for (decl, storage) in &self.storages {
            out.push_str(&tensor_wgsl(decl, *storage));
        }
        let mut included = Vec::new();
        for line in src.lines() {
            let directive = line.trim();
            if directive.starts_with("#tensor")
                || directive.starts_with("#include")
                || is_enable(line)
            {
                out.push_str("// ");
            }
            out.push_str(line);
            out.push('\n');
            if directive.starts_with("#include") {
                out.push_str(include(self.shader, directive, &mut included)?);
            }
        }
        Ok(out)
    }
}

/// An `enable ...;` directive line of a shader source.
fn is_enable(line: &str) -> bool {
    line.trim_start().starts_with("enable ")
}

const NATIVE_F16_HELPERS: &str = "
// f32 -> f16 through the portable rounding (round to nearest even, overflow to inf); the
// final conversion is exact because the value is already an f16.
fn f16_from_f32(v: f32) -> f16 { return f16(unpack2x16float(f32_to_f16_bits(v)).x); }
";

/// Declaration and load/store helpers of one tensor in one storage.
fn tensor_wgsl(d: &TensorDecl, storage: Storage) -> String {
    let n = &d.name;
    let b = d.binding;
    let access = if d.writable { "read_write" } else { "read" };
    let mut s = String::new();
    match storage {
        Storage::F32 | Storage::U32 | Storage::F16 => {
            // One element per array slot, converted to and from f32 (`()`: no conversion).
            let (elem, to_f32, from_f32) = match storage {
                Storage::F32 => ("f32", "", ""),
                Storage::U32 => ("u32", "f32", "u32"),
                _ => ("f16", "f32", "f16_from_f32"),
            };
            s += &format!("@group(0) @binding({b}) var<storage, {access}> {n}: array<{elem}>;\n");
            s += &format!("fn {n}_load(i: u32) -> f32 {{ return {to_f32}({n}[i]); }}\n");
            s += &format!(
                "fn {n}_load2(i: u32) -> vec2<f32> {{ return vec2<f32>({to_f32}({n}[i]), {to_f32}({n}[i + 1u])); }}\n"
            );
            if d.writable {
                s += &format!("fn {n}_store(i: u32, v: f32) {{ {n}[i] = {from_f32}(v); }}\n");
                s += &format!(
                    "fn {n}_store2(i: u32, v: vec2<f32>) {{ {n}[i] = {from_f32}(v.x); {n}[i + 1u] = {from_f32}(v.y); }}\n"
                );
            }
        }
        Storage::F16Packed | Storage::BF16 => {
            let (unpack, bits) = if storage == Storage::BF16 {
                ("unpack_bf16x2", "f32_to_bf16_bits")
            } else {
                ("unpack2x16float", "f32_to_f16_bits")
            };
            if d.writable {
                s += &format!(
                    "@group(0) @binding({b}) var<storage, read_write> {n}: array<atomic<u32>>;\n"
                );
                s += &format!(
                    "fn {n}_load2(i: u32) -> vec2<f32> {{ return {unpack}(atomicLoad(&{n}[i >> 1u])); }}\n"
                );
                s += &format!(
                    "fn {n}_store(i: u32, v: f32) {{ let sh = (i & 1u) * 16u; atomicAnd(&{n}[i >> 1u], ~(0xffffu << sh)); atomicOr(&{n}[i >> 1u], {bits}(v) << sh); }}\n"
                );
                s += &format!(
                    "fn {n}_store2(i: u32, v: vec2<f32>) {{ atomicStore(&{n}[i >> 1u], {bits}(v.x) | ({bits}(v.y) << 16u)); }}\n"
                );
            } else {
                s += &format!("@group(0) @binding({b}) var<storage, read> {n}: array<u32>;\n");
                s += &format!(
                    "fn {n}_load2(i: u32) -> vec2<f32> {{ return {unpack}({n}[i >> 1u]); }}\n"
                );
            }
            s += &format!("fn {n}_load(i: u32) -> f32 {{ return {n}_load2(i & ~1u)[i & 1u]; }}\n");
        }
    }
    s
}

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
            | naga::valid::Capabilities::COOPERATIVE_MATRIX,
    )
    .validate(&module)
    .map_err(|e| Error::Shader {
        name: name.into(),
        message: e.emit_to_string(src),
    })?;
    Ok((module, info))
}

/// Name and binding of each resource that entry point `entry` uses (None: no such entry).
pub fn used_bindings(
    module: &naga::Module,
    info: &naga::valid::ModuleInfo,
    entry: &str,
) -> Option<Vec<(String, u32)>> {
    let index = module.entry_points.iter().position(|e| e.name == entry)?;
    let fi = info.get_entry_point(index);
    Some(
        module
            .global_variables
            .iter()
            .filter(|(h, _)| !fi[*h].is_empty())
            .filter_map(|(_, g)| Some((g.name.clone()?, g.binding.as_ref()?.binding)))
            .collect(),
    )
}

/// Storage buffers an entry point binds (counted against the adapter's
/// `max_storage_buffers_per_shader_stage`: 8 on WebGPU, as few as 4 on old GLES 3.1 devices).
pub fn storage_buffers_used(
    module: &naga::Module,
    info: &naga::valid::ModuleInfo,
    entry: &str,
) -> Option<u32> {
    let index = module.entry_points.iter().position(|e| e.name == entry)?;
    let fi = info.get_entry_point(index);
    Some(
        module
            .global_variables
            .iter()
            .filter(|(h, g)| {
                !fi[*h].is_empty() && matches!(g.space, naga::AddressSpace::Storage { .. })
            })
            .count() as u32,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reduce_variant() -> Variant {
        Variant::new("reduce", &[("x".into(), Storage::F16Packed)], &[]).unwrap()
    }

    #[test]
    fn include_pastes_the_file_once_in_place_of_the_directive() {
        let src = reduce_variant().specialise().unwrap();
        assert_eq!(src.matches("fn tree_sum(").count(), 1);
        assert!(src.contains("// #include workgroup_reduce\n"));
        let directive = src.find("#include workgroup_reduce").unwrap();
        assert!(src.find("fn tree_sum(").unwrap() > directive);
        validate("reduce", &src).expect("the included text validates");
    }

    #[test]
    fn unknown_malformed_or_repeated_includes_are_errors() {
        let mut seen = Vec::new();
        let err = include("s", "#include nothing_here", &mut seen).unwrap_err();
        assert!(
            err.to_string().contains("no include `nothing_here`"),
            "{err}"
        );
        let err = include("s", "#include", &mut seen).unwrap_err();
        assert!(err.to_string().contains("want `#include NAME`"), "{err}");
        include("s", "#include workgroup_reduce", &mut seen).unwrap();
        let err = include("s", "#include workgroup_reduce", &mut seen).unwrap_err();
        assert!(err.to_string().contains("included twice"), "{err}");
    }

    #[test]
    fn every_include_is_used_by_some_shader() {
        for (name, _) in INCLUDES {
            let directive = format!("#include {name}");
            assert!(
                SHADERS.iter().any(|(_, src)| src.contains(&directive)),
                "shaders/include/{name}.wgsl is included by no shader"
            );
        }
    }
}
