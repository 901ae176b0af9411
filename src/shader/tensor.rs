//! `#tensor` directives: their parsing, and the declaration and load/store helpers of a
//! tensor in each storage.

use crate::dtype::Storage;
use crate::error::{Error, Result};

/// A line without its `//` comment, trimmed: what a directive says.
pub(super) fn code(line: &str) -> &str {
    line.split("//").next().unwrap_or_default().trim()
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
        let Some(rest) = code(line).strip_prefix("#tensor") else {
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

pub(super) const NATIVE_F16_HELPERS: &str = "
// f32 -> f16 through the portable rounding (round to nearest even, overflow to inf); the
// final conversion is exact because the value is already an f16.
fn f16_from_f32(v: f32) -> f16 { return f16(unpack2x16float(f32_to_f16_bits(v)).x); }
";

/// Declaration and load/store helpers of one tensor in one storage.
pub(super) fn tensor_wgsl(d: &TensorDecl, storage: Storage) -> String {
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
    if d.writable {
        // One slot of a row (`row_slot` in the prelude): an aligned pair, or a lone element.
        s += &format!(
            "fn {n}_store_slot(s: vec2<u32>, v: vec2<f32>) {{ if (s.y == 2u) {{ {n}_store2(s.x, v); }} else {{ {n}_store(s.x, v.x); }} }}\n"
        );
    }
    s
}
