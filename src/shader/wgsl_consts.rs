//! Constants written once, in Rust, for both languages: a [`ConstsDecl`] names Rust constants
//! under the names a shader uses, and `#consts NAME` pastes them as WGSL `const`s, so a
//! buffer's word offsets or a kernel's mode codes cannot differ between the two.

/// A table of `u32` constants a shader pulls in with `#consts NAME`: its
/// [`ShaderDecl::consts`](super::ShaderDecl::consts) lists it, and each entry becomes
/// `const WGSL_NAME: u32 = VALUEu;`. The values are Rust constants (never literals written
/// again), so the table is the one place the two languages meet.
///
/// ```
/// use webgpu_amp::shader::ConstsDecl;
/// const WORD_SCALE: usize = 0;
/// const WORD_FOUND_INF: usize = 2;
/// const STATE: ConstsDecl = ConstsDecl {
///     name: "state",
///     consts: &[("SCALE", WORD_SCALE as u32), ("FOUND_INF", WORD_FOUND_INF as u32)],
/// };
/// assert_eq!(STATE.wgsl(), "const SCALE: u32 = 0u;\nconst FOUND_INF: u32 = 2u;\n");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConstsDecl {
    pub name: &'static str,
    /// (WGSL name, value), in the order they are pasted.
    pub consts: &'static [(&'static str, u32)],
}

impl ConstsDecl {
    /// The WGSL `const` lines `#consts NAME` stands for.
    pub fn wgsl(&self) -> String {
        self.consts
            .iter()
            .map(|(name, value)| format!("const {name}: u32 = {value}u;\n"))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Grid, ShaderDecl, Variant, validate};
    use super::*;

    // A changed Rust constant changes the WGSL: the table holds the constants, not copies.
    const MODE_FAST: u32 = 7;
    const LEN: usize = 12;
    const MODES: ConstsDecl = ConstsDecl {
        name: "modes",
        consts: &[("FAST", MODE_FAST), ("LEN", LEN as u32)],
    };
    static WITH_CONSTS: ShaderDecl = ShaderDecl {
        name: "with_consts",
        source: "#tensor x 1 read_write\n#consts modes // the Rust table\n\
                 @compute @workgroup_size(1)\nfn main() { x_store(0u, f32(FAST + LEN)); }\n",
        structs: &[],
        consts: &[MODES],
        variants: |shader| Grid::new().variants(shader, &[]),
    };
    static MISSING_CONSTS: ShaderDecl = ShaderDecl {
        consts: &[],
        ..WITH_CONSTS
    };
    static UNUSED_CONSTS: ShaderDecl = ShaderDecl {
        source: "#tensor x 1 read_write\n",
        ..WITH_CONSTS
    };
    static TWICE_CONSTS: ShaderDecl = ShaderDecl {
        source: "#tensor x 1 read_write\n#consts modes\n#consts modes\n",
        ..WITH_CONSTS
    };

    fn specialise(decl: &'static ShaderDecl) -> crate::error::Result<String> {
        Variant::new(decl, &[], &[])?.specialise()
    }

    #[test]
    fn consts_paste_the_rust_values_in_place_of_the_directive() {
        let src = specialise(&WITH_CONSTS).unwrap();
        let want = format!(
            "// #consts modes // the Rust table\nconst FAST: u32 = {MODE_FAST}u;\n\
             const LEN: u32 = {LEN}u;\n"
        );
        assert!(src.contains(&want), "{src}");
        validate("with_consts", &src).expect("the pasted text validates");
    }

    #[test]
    fn a_table_the_declaration_lacks_leaves_out_or_repeats_is_an_error() {
        let err = |decl: &'static ShaderDecl| specialise(decl).unwrap_err().to_string();
        let e = err(&MISSING_CONSTS);
        assert!(e.contains("lists no consts `modes`"), "{e}");
        let e = err(&UNUSED_CONSTS);
        assert!(
            e.contains("consts `modes` is declared but no `#consts`"),
            "{e}"
        );
        let e = err(&TWICE_CONSTS);
        assert!(e.contains("`#consts modes` appears twice"), "{e}");
    }
}
