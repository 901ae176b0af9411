//! The directives of a shader source that paste text (`#include`, `#struct`, `#consts`,
//! `#workgroup_builtins`; `#map` and `#unary` in `map.rs`), and the text a variant is
//! specialised into.

use super::map;
use super::tensor::{NATIVE_F16_HELPERS, TensorDecl, code, tensor_decls, tensor_wgsl};
use super::{ShaderDecl, Variant};
use crate::dtype::Storage;
use crate::error::{Error, Result};

const PRELUDE: &str = include_str!("../../shaders/prelude.wgsl");

/// WGSL that shaders pull in with `#include NAME` (from `shaders/include/`).
pub const INCLUDES: &[(&str, &str)] = &[
    (
        "workgroup_reduce",
        include_str!("../../shaders/include/workgroup_reduce.wgsl"),
    ),
    (
        "matmul_common",
        include_str!("../../shaders/include/matmul_common.wgsl"),
    ),
    (
        "logit_class",
        include_str!("../../shaders/include/logit_class.wgsl"),
    ),
    (
        "flash_common",
        include_str!("../../shaders/include/flash_common.wgsl"),
    ),
    (
        "flash_tiles",
        include_str!("../../shaders/include/flash_tiles.wgsl"),
    ),
    (
        "flash_coop",
        include_str!("../../shaders/include/flash_coop.wgsl"),
    ),
    (
        "flash_coop_grads",
        include_str!("../../shaders/include/flash_coop_grads.wgsl"),
    ),
    (
        "invocation",
        include_str!("../../shaders/include/invocation.wgsl"),
    ),
    (
        "coop_gemm",
        include_str!("../../shaders/include/coop_gemm.wgsl"),
    ),
    (
        "conv_gemm",
        include_str!("../../shaders/include/conv_gemm.wgsl"),
    ),
    ("relu", include_str!("../../shaders/include/relu.wgsl")),
    ("gelu", include_str!("../../shaders/include/gelu.wgsl")),
];

/// What `#workgroup_builtins` in an entry point's parameter list stands for: the thread's
/// index in its workgroup, the workgroup's id and the grid's size (`workgroup_index(wid, nwg)`
/// in the prelude flattens the last two). Written once here, not in every kernel.
const WORKGROUP_BUILTINS: (&str, &str) = (
    "#workgroup_builtins",
    "@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>, \
     @builtin(num_workgroups) nwg: vec3<u32>",
);

fn shader_error(shader: &str, message: String) -> Error {
    Error::Shader {
        name: shader.into(),
        message,
    }
}

/// The argument of a one-word directive line (`#include NAME`, `#struct NAME`,
/// `#consts NAME`).
fn directive_name<'a>(shader: &str, line: &'a str, directive: &str) -> Result<&'a str> {
    match code(line).split_whitespace().collect::<Vec<_>>()[..] {
        [d, name] if d == directive => Ok(name),
        _ => Err(shader_error(
            shader,
            format!("bad directive `{line}` (want `{directive} NAME`)"),
        )),
    }
}

/// The text of `#include NAME`, once per shader: a second include of the same file would
/// define everything twice.
fn include(shader: &str, line: &str, included: &mut Vec<String>) -> Result<&'static str> {
    let name = directive_name(shader, line, "#include")?;
    let (_, text) = INCLUDES.iter().find(|(n, _)| *n == name).ok_or_else(|| {
        shader_error(
            shader,
            format!("no include `{name}` (shaders/include/{name}.wgsl)"),
        )
    })?;
    if included.iter().any(|n| n == name) {
        return Err(shader_error(shader, format!("`{name}` is included twice")));
    }
    included.push(name.to_string());
    Ok(text)
}

/// The `#tensor` declarations of a shader source: its own and those of the files it
/// includes (`conv_gemm` declares the tensors its helpers use), in the order of the
/// specialised text. A name declared twice is an error.
pub fn declared_tensors(shader: &str, src: &str) -> Result<Vec<TensorDecl>> {
    let mut decls: Vec<TensorDecl> = Vec::new();
    collect_tensors(shader, src, &mut Vec::new(), &mut decls)?;
    for (i, d) in decls.iter().enumerate() {
        if decls[..i].iter().any(|e| e.name == d.name) {
            return Err(shader_error(
                shader,
                format!("`#tensor {}` is declared twice", d.name),
            ));
        }
    }
    Ok(decls)
}

fn collect_tensors(
    shader: &str,
    text: &str,
    included: &mut Vec<String>,
    decls: &mut Vec<TensorDecl>,
) -> Result<()> {
    for line in text.lines() {
        let directive = code(line);
        if directive.starts_with("#tensor") {
            decls.extend(tensor_decls(shader, directive)?);
        } else if directive.starts_with("#include") {
            let text = include(shader, directive, included)?;
            collect_tensors(shader, text, included, decls)?;
        }
    }
    Ok(())
}

/// An `enable ...;` directive line of a shader source.
fn is_enable(line: &str) -> bool {
    line.trim_start().starts_with("enable ")
}

/// The full WGSL text of a variant: enables, constants, the prelude, the tensors' helpers,
/// then the source with its includes and structs pasted in place of their directives.
pub(super) fn specialise(variant: &Variant) -> Result<String> {
    let decl = variant.decl;
    let src = decl.source;
    let mut out = String::new();
    if variant.uses_native_f16() {
        out.push_str("enable f16;\n");
    }
    // A shader's own `enable` directives (cooperative matrices) must precede every
    // declaration: they move to the top and stay as comments in place.
    for line in src.lines().filter(|l| is_enable(l)) {
        out.push_str(line.trim());
        out.push('\n');
    }
    for (name, value) in &variant.consts {
        // `alias NAME` injects a type (the cooperative kernels' fragment types).
        match name.strip_prefix("alias ") {
            Some(alias) => out.push_str(&format!("alias {alias} = {value};\n")),
            None => out.push_str(&format!("const {name} = {value};\n")),
        }
    }
    out.push_str(PRELUDE);
    if variant.uses_native_f16() {
        out.push_str(NATIVE_F16_HELPERS);
    }
    for (tensor, storage) in &variant.storages {
        let vec4 = match &tensor.vec4_if {
            Some(cond) => variant
                .consts
                .iter()
                .any(|(name, value)| name == cond && value == "true"),
            None => false,
        };
        out.push_str(&tensor_wgsl(tensor, *storage, vec4));
    }
    let mut pasted = Pasted::default();
    paste(decl.name, src, variant, &mut pasted, &mut out)?;
    for kind in FromRust::ALL {
        if let Some(name) = kind
            .names(decl)
            .find(|name| !pasted.names.contains(&(kind, *name)))
        {
            let kind = kind.word();
            return Err(shader_error(
                decl.name,
                format!("{kind} `{name}` is declared but no `#{kind}` pulls it in"),
            ));
        }
    }
    Ok(out)
}

/// What of a variant reads its shader's directives: its tensors (when it is made) and its
/// text; the rest of [`Variant`] is in `mod.rs`.
impl Variant {
    /// Storages not given default to f32 (those tensors are unused by the entry point).
    pub fn new(
        decl: &'static ShaderDecl,
        storages: &[(&str, Storage)],
        consts: &[(&'static str, String)],
    ) -> Result<Self> {
        let decls = declared_tensors(decl.name, decl.source)?;
        for (name, _) in storages {
            if !decls.iter().any(|d| d.name == *name) {
                return Err(Error::Shader {
                    name: decl.name.into(),
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
            shader: decl.name,
            decl,
            storages,
            consts: consts.to_vec(),
        })
    }

    /// The full WGSL text of this variant.
    pub fn specialise(&self) -> Result<String> {
        specialise(self)
    }
}

/// Includes, and the structs and constant tables, already pasted into one variant.
#[derive(Default)]
struct Pasted {
    includes: Vec<String>,
    names: Vec<(FromRust, &'static str)>,
}

/// What a declaration brings from Rust by name: a `wgsl_struct!` (`#struct NAME`) or a
/// table of constants (`#consts NAME`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FromRust {
    Struct,
    Consts,
}

impl FromRust {
    const ALL: [FromRust; 2] = [FromRust::Struct, FromRust::Consts];

    /// The directive's word after `#`.
    fn word(self) -> &'static str {
        match self {
            FromRust::Struct => "struct",
            FromRust::Consts => "consts",
        }
    }

    /// The names of this kind the declaration lists.
    fn names(self, decl: &ShaderDecl) -> Box<dyn Iterator<Item = &'static str> + '_> {
        match self {
            FromRust::Struct => Box::new(decl.structs.iter().map(|s| s.name)),
            FromRust::Consts => Box::new(decl.consts.iter().map(|c| c.name)),
        }
    }

    /// The WGSL of the listed one named `name`.
    fn wgsl(self, decl: &ShaderDecl, name: &str) -> Option<(&'static str, String)> {
        match self {
            FromRust::Struct => decl
                .structs
                .iter()
                .find(|s| s.name == name)
                .map(|s| (s.name, s.wgsl.to_string())),
            FromRust::Consts => decl
                .consts
                .iter()
                .find(|c| c.name == name)
                .map(|c| (c.name, c.wgsl())),
        }
    }

    /// The text of the directive line `directive` (`#struct NAME` or `#consts NAME`): the
    /// declaration's Rust-written WGSL of that name, once per variant.
    fn paste(
        self,
        shader: &str,
        directive: &str,
        decl: &ShaderDecl,
        pasted: &mut Pasted,
    ) -> Result<String> {
        let kind = self.word();
        let name = directive_name(shader, directive, &format!("#{kind}"))?;
        let (name, wgsl) = self.wgsl(decl, name).ok_or_else(|| {
            shader_error(
                shader,
                format!("`#{kind} {name}`: the shader's declaration lists no {kind} `{name}`"),
            )
        })?;
        if pasted.names.contains(&(self, name)) {
            return Err(shader_error(
                shader,
                format!("`#{kind} {name}` appears twice"),
            ));
        }
        pasted.names.push((self, name));
        Ok(wgsl)
    }
}

/// `text` into `out`, directives commented out and followed by what they stand for.
fn paste(
    shader: &str,
    text: &str,
    variant: &Variant,
    pasted: &mut Pasted,
    out: &mut String,
) -> Result<()> {
    let text = super::expand::expand(shader, text, &variant.consts)?;
    for line in text.lines() {
        let directive = code(line);
        let is_directive = ["#tensor", "#include", "#struct", "#consts"]
            .iter()
            .chain(&map::DIRECTIVES)
            .any(|d| directive.starts_with(d));
        if is_directive || is_enable(line) {
            out.push_str("// ");
        }
        let (token, builtins) = WORKGROUP_BUILTINS;
        out.push_str(&line.replace(token, builtins));
        out.push('\n');
        if let Some(entry_points) = map::expand(shader, directive)? {
            out.push_str(&entry_points);
        } else if directive.starts_with("#include") {
            let included = include(shader, directive, &mut pasted.includes)?;
            paste(shader, included, variant, pasted, out)?;
        } else if let Some(kind) = FromRust::ALL
            .into_iter()
            .find(|kind| directive.starts_with(&format!("#{}", kind.word())))
        {
            out.push_str(&kind.paste(shader, directive, variant.decl, pasted)?);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::{Grid, ShaderDecl, StructDecl};
    use super::*;
    use crate::dtype::Storage;

    crate::wgsl_struct! {
        struct Sizes {
            n: u32,
            scale: f32,
        }
    }

    static REDUCE_LIKE: ShaderDecl = ShaderDecl {
        name: "reduce_like",
        source: "#tensor x 1 read\n#tensor out 2 read_write\nconst WG: u32 = 64u;\n\
                 @group(0) @binding(3) var<storage, read_write> partials: array<f32>;\n\
                 #struct Sizes\n@group(0) @binding(0) var<uniform> sizes: Sizes;\n\
                 #include workgroup_reduce\n\
                 @compute @workgroup_size(WG)\nfn main(#workgroup_builtins) {\n\
                 let total = workgroup_sum(lid, x_load(lid) * sizes.scale);\n\
                 if (lid == 0u) { out_store(workgroup_index(wid, nwg), total); }\n}\n",
        structs: &[Sizes::WGSL],
        consts: &[],
        variants: |shader| Grid::new().each(&["x"]).variants(shader, &[]),
    };

    fn variant(decl: &'static ShaderDecl) -> Variant {
        Variant::new(decl, &[("x", Storage::F16Packed)], &[]).unwrap()
    }

    #[test]
    fn include_and_struct_paste_their_text_once_in_place_of_the_directive() {
        let src = variant(&REDUCE_LIKE).specialise().unwrap();
        assert_eq!(src.matches("fn tree_sum(").count(), 1);
        assert!(src.contains("// #include workgroup_reduce\n"));
        let directive = src.find("#include workgroup_reduce").unwrap();
        assert!(src.find("fn tree_sum(").unwrap() > directive);
        assert!(
            src.contains("// #struct Sizes\nstruct Sizes {\n    n: u32,\n    scale: f32,\n}\n"),
            "{src}"
        );
        validate_ok(&src);
    }

    #[test]
    fn workgroup_builtins_stand_for_the_three_entry_point_builtins() {
        let src = variant(&REDUCE_LIKE).specialise().unwrap();
        assert!(!src.contains("#workgroup_builtins"), "{src}");
        let main = format!("fn main({}) {{", WORKGROUP_BUILTINS.1);
        assert!(src.contains(&main), "{src}");
        validate_ok(&src);
    }

    fn validate_ok(src: &str) {
        super::super::validate("test", src).expect("the pasted text validates");
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
    fn tensors_declared_in_an_include_are_the_shaders_and_only_once() {
        let names = |src| -> Vec<String> {
            let decls = declared_tensors("s", src).unwrap();
            decls.into_iter().map(|d| d.name).collect()
        };
        let conv = ["src", "w", "bias", "dst", "x", "dy", "dw", "partials"];
        assert_eq!(names("#include conv_gemm\n"), conv);
        assert_eq!(names("#tensor y 9 read\n#include conv_gemm\n")[1..], conv);
        let err = declared_tensors("s", "#tensor dw 1 read\n#include conv_gemm\n").unwrap_err();
        assert!(
            err.to_string().contains("`#tensor dw` is declared twice"),
            "{err}"
        );
    }

    static MISSING_STRUCT: ShaderDecl = ShaderDecl {
        name: "missing_struct",
        source: "#tensor x 1 read\n#struct Params\n",
        structs: &[],
        consts: &[],
        variants: |shader| Grid::new().variants(shader, &[]),
    };
    static UNUSED_STRUCT: ShaderDecl = ShaderDecl {
        name: "unused_struct",
        source: "#tensor x 1 read\n",
        structs: &[Sizes::WGSL],
        consts: &[],
        variants: |shader| Grid::new().variants(shader, &[]),
    };
    static TWICE_STRUCT: ShaderDecl = ShaderDecl {
        name: "twice_struct",
        source: "#tensor x 1 read\n#struct Sizes\n#struct Sizes\n",
        structs: &[Sizes::WGSL],
        consts: &[],
        variants: |shader| Grid::new().variants(shader, &[]),
    };

    #[test]
    fn a_struct_the_declaration_lacks_leaves_out_or_repeats_is_an_error() {
        let err = |decl: &'static ShaderDecl| variant(decl).specialise().unwrap_err().to_string();
        let e = err(&MISSING_STRUCT);
        assert!(e.contains("lists no struct `Params`"), "{e}");
        let e = err(&UNUSED_STRUCT);
        assert!(e.contains("`Sizes` is declared but no `#struct`"), "{e}");
        let e = err(&TWICE_STRUCT);
        assert!(e.contains("appears twice"), "{e}");
    }

    #[test]
    fn the_struct_text_is_the_rust_fields_in_order() {
        let decl: StructDecl = Sizes::WGSL;
        assert_eq!(decl.name, "Sizes");
        assert_eq!(decl.size, std::mem::size_of::<Sizes>());
        assert_eq!(
            decl.wgsl,
            "struct Sizes {\n    n: u32,\n    scale: f32,\n}\n"
        );
    }
}
