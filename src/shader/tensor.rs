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
    /// `#tensor a 1 read vec4_if ALIGNED`: where the variant's constant `ALIGNED` is true the
    /// tensor is bound as 16-byte vectors and `a_x8(q)` reads elements 8q .. 8q + 8 besides
    /// the usual helpers (`a_h8(q)` too, as f16, for native f16). The dispatcher binds such a
    /// tensor only at 16-byte offsets and sizes.
    pub vec4_if: Option<String>,
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
                "bad directive `{}` (want `#tensor NAME BINDING read|read_write`, or \
                 `#tensor NAME BINDING read vec4_if CONST`)",
                line.trim()
            ),
        };
        let (name, binding, access, vec4_if) = match parts[..] {
            [name, binding, access] => (name, binding, access, None),
            [name, binding, "read", "vec4_if", cond] => (name, binding, "read", Some(cond.into())),
            _ => return Err(bad()),
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
            vec4_if,
        });
    }
    Ok(decls)
}

pub(super) const NATIVE_F16_HELPERS: &str = "
// f32 -> f16 through the portable rounding (round to nearest even, overflow to inf); the
// final conversion is exact because the value is already an f16.
fn f16_from_f32(v: f32) -> f16 { return f16(unpack2x16float(f32_to_f16_bits(v)).x); }
";

/// Declaration and load helpers of a read-only tensor bound as 16-byte vectors, read eight
/// elements at a time by `x_x8(q)` (elements 8q .. 8q + 8 as the two columns of a
/// `mat2x4<f32>`): f32 as `array<vec4<f32>>` (two loads), native f16 as
/// `array<mat2x4<f16>>` (also `x_h8(q)`, the same eight as f16, no conversion), packed f16
/// and bf16 as `array<vec4<u32>>` of four words, low half first.
fn vec4_wgsl(n: &str, b: u32, storage: Storage) -> String {
    let decl = |ty: &str| format!("@group(0) @binding({b}) var<storage, read> {n}: array<{ty}>;\n");
    let mut s = String::new();
    match storage {
        Storage::F32 | Storage::U32 => {
            let elem = if storage == Storage::F32 {
                "f32"
            } else {
                "u32"
            };
            s += &decl(&format!("vec4<{elem}>"));
            s += &format!(
                "fn {n}_x8(q: u32) -> mat2x4<f32> {{ return mat2x4<f32>(vec4<f32>({n}[2u * q]), vec4<f32>({n}[2u * q + 1u])); }}\n"
            );
            s += &format!("fn {n}_load(i: u32) -> f32 {{ return f32({n}[i >> 2u][i & 3u]); }}\n");
        }
        Storage::F16 => {
            s += &decl("mat2x4<f16>");
            s += &format!("fn {n}_h8(q: u32) -> mat2x4<f16> {{ return {n}[q]; }}\n");
            s += &format!("fn {n}_x8(q: u32) -> mat2x4<f32> {{ return mat2x4<f32>({n}[q]); }}\n");
            s += &format!(
                "fn {n}_load(i: u32) -> f32 {{ return f32({n}[i >> 3u][(i >> 2u) & 1u][i & 3u]); }}\n"
            );
        }
        Storage::F16Packed | Storage::BF16 => {
            let unpack = if storage == Storage::BF16 {
                "unpack_bf16x2"
            } else {
                "unpack2x16float"
            };
            s += &decl("vec4<u32>");
            s += &format!(
                "fn {n}_x8(q: u32) -> mat2x4<f32> {{ let w = {n}[q]; return mat2x4<f32>(vec4<f32>({unpack}(w.x), {unpack}(w.y)), vec4<f32>({unpack}(w.z), {unpack}(w.w))); }}\n"
            );
            s += &format!(
                "fn {n}_load(i: u32) -> f32 {{ return {unpack}({n}[i >> 3u][(i >> 1u) & 3u])[i & 1u]; }}\n"
            );
        }
    }
    s += &format!(
        "fn {n}_load2(i: u32) -> vec2<f32> {{ return vec2<f32>({n}_load(i), {n}_load(i + 1u)); }}\n"
    );
    s
}

/// Declaration and load/store helpers of one tensor in one storage (`vec4`: bound as 16-byte
/// vectors, [`TensorDecl::vec4_if`]).
pub(super) fn tensor_wgsl(d: &TensorDecl, storage: Storage, vec4: bool) -> String {
    let n = &d.name;
    let b = d.binding;
    if vec4 && !d.writable {
        return vec4_wgsl(n, b, storage);
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vec4_if_binds_16_byte_vectors_only_where_its_constant_is_true() {
        let d = tensor_decls("t", "#tensor a 1 read vec4_if ALIGNED")
            .unwrap()
            .remove(0);
        assert_eq!(d.vec4_if.as_deref(), Some("ALIGNED"));
        for (storage, ty) in [
            (Storage::F32, "array<vec4<f32>>"),
            (Storage::F16, "array<mat2x4<f16>>"),
            (Storage::F16Packed, "array<vec4<u32>>"),
            (Storage::BF16, "array<vec4<u32>>"),
        ] {
            let wide = tensor_wgsl(&d, storage, true);
            assert!(wide.contains(ty) && wide.contains("fn a_x8("), "{wide}");
            assert!(wide.contains("fn a_load(") && wide.contains("fn a_load2("));
            assert!(!tensor_wgsl(&d, storage, false).contains("a_x8"));
        }
        assert!(tensor_wgsl(&d, Storage::F16, true).contains("fn a_h8("));
        assert!(tensor_decls("t", "#tensor a 1 read_write vec4_if ALIGNED").is_err());
    }
}
