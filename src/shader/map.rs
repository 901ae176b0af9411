//! `#map` and `#unary`: elementwise entry points written once, here, instead of once per op.
//!
//! ```text
//! #map add: out = sum(x, y)     // out[i] = sum(x[i], y[i]) for every i < params.n
//! #map bias_add: out = plus_bias(x, i)   // `i` passes the element's index
//! #map both: a = f(x, y); b = g(x)        // two outputs, x and y loaded once
//! #unary silu                   // silu_forward: y = silu(x); silu_backward: dx = silu_grad(x, dy)
//!                               // silu_forward_backward: both, from one read of x
//! ```
//!
//! A `#map` entry point runs over `params.n` elements, two per thread of a `WG`-thread
//! workgroup (a 1-D launch folded by `gpu::grid_1d` over `n / 2` threads), so a packed f16
//! output is written a whole word at a time (`store2`) and the last odd element alone. The
//! shader supplies `WG`, `params.n` and the scalar function; each argument is a `#tensor`,
//! loaded at the element, or `i`. `#unary NAME` is the entry points of an activation
//! from its scalar pair `NAME(v)` and `NAME_grad(v, g)`, over the tensors every layer
//! shader names the same way: input `x`, output `y`, upstream gradient `dy`, input
//! gradient `dx`. The third, `NAME_forward_backward`, writes `y` and `dx` at once: the
//! backward that recomputes `y` (a Linear reading it, `nn::layers::recompute`) and needs
//! `dx` too gets both from one dispatch, each by the same expression as its own entry point.

use super::tensor::code;
use crate::error::{Error, Result};

/// The directives this file expands.
pub(super) const DIRECTIVES: [&str; 2] = ["#map", "#unary"];

fn bad(shader: &str, line: &str, want: &str) -> Error {
    Error::Shader {
        name: shader.into(),
        message: format!("bad directive `{line}` (want `{want}`)"),
    }
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The WGSL a `#map` or `#unary` line stands for, or `None` for any other line.
pub(super) fn expand(shader: &str, line: &str) -> Result<Option<String>> {
    let directive = code(line);
    let (head, rest) = directive
        .split_once(char::is_whitespace)
        .unwrap_or((directive, ""));
    if head == "#map" {
        return map(shader, directive, rest).map(Some);
    }
    if head == "#unary" {
        let name = rest.trim();
        if !is_identifier(name) {
            return Err(bad(shader, directive, "#unary NAME"));
        }
        let grad = format!("{name}_grad");
        let forward = ("y", name, &["x"][..]);
        let backward = ("dx", grad.as_str(), &["x", "dy"][..]);
        let entries = [
            entry_point(&format!("{name}_forward"), &[forward]),
            entry_point(&format!("{name}_backward"), &[backward]),
            entry_point(&format!("{name}_forward_backward"), &[forward, backward]),
        ];
        return Ok(Some(entries.concat()));
    }
    Ok(None)
}

/// `#map ENTRY: OUT = FN(ARG, ...)`, or several outputs from one read of their inputs:
/// `#map ENTRY: OUT = FN(ARG, ...); OUT2 = FN2(ARG, ...)`.
fn map(shader: &str, line: &str, rest: &str) -> Result<String> {
    let want = "#map ENTRY: OUT = FN(ARG, ...); ...";
    let Some((entry, outputs)) = rest.split_once(':') else {
        return Err(bad(shader, line, want));
    };
    let Some(outputs) = outputs
        .split(';')
        .map(parse_output)
        .collect::<Option<Vec<_>>>()
    else {
        return Err(bad(shader, line, want));
    };
    let entry = entry.trim();
    let names = outputs
        .iter()
        .flat_map(|(out, function, args)| [*out, *function].into_iter().chain(args.clone()));
    if !std::iter::once(entry).chain(names).all(is_identifier) {
        return Err(bad(shader, line, want));
    }
    let outputs: Vec<(&str, &str, &[&str])> = outputs
        .iter()
        .map(|(out, function, args)| (*out, *function, args.as_slice()))
        .collect();
    Ok(entry_point(entry, &outputs))
}

/// `OUT = FN(ARG, ...)`: (out, function, args).
fn parse_output(output: &str) -> Option<(&str, &str, Vec<&str>)> {
    let (out, call) = output.split_once('=')?;
    let (function, args) = call.trim().strip_suffix(')')?.split_once('(')?;
    let args: Vec<&str> = args.split(',').map(str::trim).collect();
    Some((out.trim(), function.trim(), args))
}

/// One entry point writing each `(out, function, args)`: `out[k] = function(args at k)` for
/// the pair of elements `i`, `i + 1`, or for `i` alone at the odd end. Outputs of one entry
/// point share the loads of their tensors (`#unary`'s fused forward and backward).
fn entry_point(entry: &str, outputs: &[(&str, &str, &[&str])]) -> String {
    let mut tensors: Vec<&str> = Vec::new();
    for (_, _, args) in outputs {
        for a in args.iter().copied().filter(|a| *a != "i") {
            if !tensors.contains(&a) {
                tensors.push(a);
            }
        }
    }
    let mut pair_loads = String::new();
    for t in &tensors {
        pair_loads.push_str(&format!("        let {t}_pair = {t}_load2(i);\n"));
    }
    let (mut pair_stores, mut single_stores) = (String::new(), String::new());
    for (out, function, args) in outputs {
        let call = |arg: &dyn Fn(&str) -> String| {
            let args: Vec<String> = args.iter().map(|a| arg(a)).collect();
            format!("{function}({})", args.join(", "))
        };
        let first = call(&|a| match a {
            "i" => "i".into(),
            t => format!("{t}_pair.x"),
        });
        let second = call(&|a| match a {
            "i" => "i + 1u".into(),
            t => format!("{t}_pair.y"),
        });
        let single = call(&|a| match a {
            "i" => "i".into(),
            t => format!("{t}_load(i)"),
        });
        pair_stores.push_str(&format!(
            "        {out}_store2(i, vec2<f32>({first}, {second}));\n"
        ));
        single_stores.push_str(&format!("        {out}_store(i, {single});\n"));
    }
    format!(
        "@compute @workgroup_size(WG)\n\
         fn {entry}(@builtin(global_invocation_id) gid: vec3<u32>, \
         @builtin(num_workgroups) nwg: vec3<u32>) {{\n\
         \x20   let i = 2u * thread_index(gid, nwg, WG);\n\
         \x20   if (i + 1u < params.n) {{\n\
         {pair_loads}\
         {pair_stores}\
         \x20   }} else if (i < params.n) {{\n\
         {single_stores}\
         \x20   }}\n\
         }}\n"
    )
}

#[cfg(test)]
mod tests {
    use super::super::{Grid, ShaderDecl, Variant};
    use super::*;
    use crate::dtype::Storage;

    crate::wgsl_struct! {
        struct Sizes {
            n: u32,
            shift: f32,
            _pad0: u32,
            _pad1: u32,
        }
    }

    static MAPPED: ShaderDecl = ShaderDecl {
        name: "mapped",
        source: "#tensor x 1 read\n#tensor dy 2 read\n#tensor y 3 read_write\n\
                 #tensor dx 4 read_write\n#struct Sizes\n\
                 @group(0) @binding(0) var<uniform> params: Sizes;\nconst WG: u32 = 64u;\n\
                 fn shifted(v: f32, i: u32) -> f32 { return v + params.shift * f32(i); }\n\
                 fn square(v: f32) -> f32 { return v * v; }\n\
                 fn square_grad(v: f32, g: f32) -> f32 { return 2.0 * v * g; }\n\
                 #map shift: y = shifted(x, i) // y[i] = x[i] + shift i\n\
                 #map both: y = square(x); dx = square_grad(x, dy)\n\
                 #unary square\n",
        structs: &[Sizes::WGSL],
        consts: &[],
        variants: |shader| Grid::new().each(&["x", "y"]).variants(shader, &[]),
    };

    #[test]
    fn map_and_unary_write_pair_and_single_element_entry_points_that_validate() {
        for storage in [Storage::F32, Storage::F16Packed, Storage::BF16] {
            let variant = Variant::new(&MAPPED, &[("x", storage), ("y", storage)], &[]).unwrap();
            let src = variant.specialise().unwrap();
            super::super::validate("mapped", &src).expect("the expanded text validates");
            assert!(src.contains("// #map shift: y = shifted(x, i)"), "{src}");
            assert!(
                src.contains(
                    "y_store2(i, vec2<f32>(shifted(x_pair.x, i), shifted(x_pair.y, i + 1u)));"
                ),
                "{src}"
            );
            assert!(src.contains("y_store(i, shifted(x_load(i), i));"), "{src}");
            assert!(src.contains("fn square_forward("), "{src}");
            assert!(
                src.contains("dx_store(i, square_grad(x_load(i), dy_load(i)));"),
                "{src}"
            );
            // The fused pair: both outputs from one load of each input.
            let fused = src
                .split("fn square_forward_backward(")
                .nth(1)
                .expect("a fused entry point");
            let fused = &fused[..fused.find("\n}\n").unwrap()];
            assert_eq!(fused.matches("x_load2(i)").count(), 1, "{fused}");
            for line in [
                "y_store2(i, vec2<f32>(square(x_pair.x), square(x_pair.y)));",
                "dx_store2(i, vec2<f32>(square_grad(x_pair.x, dy_pair.x), \
                 square_grad(x_pair.y, dy_pair.y)));",
                "y_store(i, square(x_load(i)));",
                "dx_store(i, square_grad(x_load(i), dy_load(i)));",
            ] {
                assert!(fused.contains(line), "{line} in {fused}");
            }
            // A `#map` of two outputs is the same entry point.
            let both = src.split("fn both(").nth(1).expect("a two-output #map");
            let both = &both[..both.find("\n}\n").unwrap()];
            assert_eq!(both, fused, "the two-output #map and #unary's fused entry");
        }
    }

    #[test]
    fn malformed_map_and_unary_lines_are_errors() {
        for line in [
            "#map",
            "#map add out = sum(x, y)",
            "#map add: out sum(x, y)",
            "#map add: out = sum(x, y",
            "#map add: out = sum(x, 2.0)",
            "#map add: out[0] = sum(x)",
            "#map add: out = sum(x, y);",
            "#unary",
            "#unary a b",
        ] {
            let err = expand("s", line).unwrap_err().to_string();
            assert!(err.contains("bad directive"), "{line}: {err}");
        }
        assert_eq!(expand("s", "fn map() {}").unwrap(), None);
    }
}
