//! WGSL declaration, specialisation and validation.
//!
//! Each WGSL file is declared once, beside its dispatcher, as a [`ShaderDecl`]: its name, its
//! source, the structs it takes from Rust and the grid of variants the dispatcher may compile.
//! Kernels name the declaration itself (`KernelDesc::new(&SHADER, "entry")`), so an op outside
//! the crate declares its own shader the same way, and the list of every built-in shader
//! (`crate::variants`) is a list of these declarations.
//!
//! A file declares its tensors with a directive line
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
//! Three more directives pull in text written once elsewhere:
//!
//! ```text
//! #include workgroup_reduce     // shaders/include/workgroup_reduce.wgsl, pasted in place
//! #struct Params                // the WGSL of a Rust `wgsl_struct!` the declaration lists
//! #consts scaler_state          // `const`s from a Rust `ConstsDecl` the declaration lists
//! ```
//!
//! (an include may declare `#tensor`s too: the convolution bodies share theirs with the
//! helpers of `conv_gemm` that read them)
//! so the fixed-order workgroup reductions, the GradScaler's state layout, every uniform
//! block and every constant Rust also reads exist once, not once per shader and once more in
//! Rust. A constant named `alias NAME` is injected as a type alias (`alias NAME = VALUE;`):
//! the cooperative kernels get their fragment types that way.
//!
//! Two more write straight-line code per variant from its constants (`expand`): the hot
//! loops name one variable per fragment or register instead of indexing an array.
//!
//! ```text
//! #for i in 0..FM                 // lines repeated with `{i}` = 0, 1, ... (bounds: constants)
//! #if ALIGNED ... #else ... #end  // one branch kept by a boolean constant
//! ```
//!
//! A read-only tensor declared `#tensor a 1 read vec4_if ALIGNED` is bound as 16-byte vectors
//! in the variants whose `ALIGNED` is true and read eight elements at a time by `a_x8(q)`
//! (`a_h8(q)` as f16 for native f16); the dispatcher chooses those variants only where the
//! binding starts and ends on 16 bytes.
//!
//! Two others write elementwise entry points (`map.rs`), so the loop over element pairs and
//! its odd end exist once, not once per op:
//!
//! ```text
//! #map add: out = sum(x, y)     // out[i] = sum(x[i], y[i]), two elements per thread
//! #unary relu                   // relu_forward, relu_backward and relu_forward_backward
//!                               // (both at once) from relu(v), relu_grad(v, g)
//! ```
//!
//! Packed storages keep two 16-bit values per `u32`. Two threads may write the two halves of
//! one word, so single-element stores to a packed tensor use `atomicAnd`/`atomicOr` on its
//! own half; kernels that own both halves use `store2`, one plain atomic store.

mod directives;
mod expand;
mod grid;
mod map;
mod tensor;
mod validate;
mod wgsl_consts;
mod wgsl_struct;

pub use directives::{INCLUDES, declared_tensors};
pub use grid::{Assignment, Grid, each_like_or_f32, f32_only};
pub use tensor::TensorDecl;
pub use validate::{
    BindingLayout, binding_layouts, storage_buffers_used, used_bindings, validate,
    writable_bindings,
};
pub use wgsl_consts::ConstsDecl;
pub use wgsl_struct::{StructDecl, WgslScalar, assert_scalar};
// The derive-free `Pod` of `wgsl_struct!` (used from other crates through `$crate`).
#[doc(hidden)]
pub use bytemuck as __bytemuck;

use crate::dtype::Storage;
use crate::error::Result;

/// The variant grid of a shader: every specialisation its dispatcher may compile.
pub type VariantsFn = fn(&'static ShaderDecl) -> Result<Vec<Variant>>;

/// One WGSL file, declared once beside the Rust that dispatches it.
///
/// ```ignore
/// pub static SHADER: ShaderDecl = ShaderDecl {
///     name: "reduce",
///     source: include_str!("../../shaders/reduce.wgsl"),
///     structs: &[Params::WGSL],
///     consts: &[],
///     variants: |shader| Grid::new().each(&["x"]).variants(shader, &[]),
/// };
/// ```
pub struct ShaderDecl {
    /// The name kernels, labels and the pipeline cache know it by (unique).
    pub name: &'static str,
    /// The WGSL source with its directives.
    pub source: &'static str,
    /// The structs the source (or an include) pulls in with `#struct NAME`.
    pub structs: &'static [StructDecl],
    /// The tables of Rust constants it pulls in with `#consts NAME`.
    pub consts: &'static [ConstsDecl],
    /// Every variant the dispatcher may compile; the portability tests check each.
    pub variants: VariantsFn,
}

impl std::fmt::Debug for ShaderDecl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShaderDecl")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Two declarations are the same shader when name and source agree.
impl PartialEq for ShaderDecl {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && self.source == other.source
    }
}

impl Eq for ShaderDecl {}

impl ShaderDecl {
    /// Every variant of the grid, each once (grids joined from parts may repeat one).
    pub fn variants(&'static self) -> Result<Vec<Variant>> {
        let mut seen = std::collections::BTreeSet::new();
        let mut variants = (self.variants)(self)?;
        variants.retain(|v| seen.insert(v.key()));
        Ok(variants)
    }
}

/// One specialisation of a shader: a storage for each declared tensor plus constants
/// ([`Variant::new`] and [`Variant::specialise`], which read the shader's directives, are in
/// `directives.rs`).
#[derive(Clone, Debug)]
pub struct Variant {
    /// The declaration's name.
    pub shader: &'static str,
    pub decl: &'static ShaderDecl,
    /// Every declared tensor with its storage, in declaration order.
    pub storages: Vec<(TensorDecl, Storage)>,
    pub consts: Vec<(&'static str, String)>,
}

impl Variant {
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
}
