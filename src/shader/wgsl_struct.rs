//! Structs written once, in Rust, for both languages: [`wgsl_struct!`](crate::wgsl_struct)
//! makes the `#[repr(C)]` plain-old-data struct the dispatcher fills and the WGSL text its
//! shader pulls in with `#struct NAME`, from one list of fields.

/// The WGSL of a Rust struct made by [`wgsl_struct!`](crate::wgsl_struct): a shader's
/// [`ShaderDecl::structs`](super::ShaderDecl::structs) lists it and `#struct NAME` pastes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StructDecl {
    pub name: &'static str,
    /// `struct NAME { field: type, ... }`, fields in the Rust order.
    pub wgsl: &'static str,
    /// Bytes of the Rust struct (4 per field: no padding anywhere).
    pub size: usize,
}

/// The field types a [`wgsl_struct!`](crate::wgsl_struct) may hold: 4-byte scalars spelled
/// the same in Rust and WGSL, so the two layouts agree field for field with no padding.
///
/// # Safety
/// Implemented only for types of size and alignment 4 for which every bit pattern is valid.
pub unsafe trait WgslScalar: Copy + 'static {}
// SAFETY: 4-byte scalars, every bit pattern valid.
unsafe impl WgslScalar for u32 {}
// SAFETY: as above.
unsafe impl WgslScalar for i32 {}
// SAFETY: as above.
unsafe impl WgslScalar for f32 {}

/// Compile-time check of a [`wgsl_struct!`](crate::wgsl_struct) field's type.
pub const fn assert_scalar<T: WgslScalar>() {}

/// A `#[repr(C)]` plain-old-data struct and its WGSL twin, from one list of fields.
///
/// ```
/// webgpu_amp::wgsl_struct! {
///     /// Uniform block of `shaders/scale.wgsl`.
///     pub struct Params {
///         n: u32,
///         alpha: f32,
///     }
/// }
/// assert_eq!(Params::WGSL.wgsl, "struct Params {\n    n: u32,\n    alpha: f32,\n}\n");
/// let bytes = webgpu_amp::shader::__bytemuck::bytes_of(&Params { n: 3, alpha: 0.5 });
/// assert_eq!(bytes.len(), 8);
/// ```
///
/// Fields are `u32`, `i32` or `f32` (any other type fails to compile), so the struct has no
/// padding and every bit pattern is valid: it is `bytemuck::Pod` (`bytes_of` uploads it).
/// Uniform blocks keep WGSL's 16-byte rule by holding a multiple of four fields (`_pad`s).
#[macro_export]
macro_rules! wgsl_struct {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $($(#[$field_meta:meta])* $field_vis:vis $field:ident : $ty:ident),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default)]
        $vis struct $name {
            $($(#[$field_meta])* $field_vis $field: $ty),*
        }

        // SAFETY: `repr(C)` over `WgslScalar` fields only (checked below): every field is 4
        // bytes with alignment 4, so there is no padding and every bit pattern is valid.
        unsafe impl $crate::shader::__bytemuck::Zeroable for $name {}
        // SAFETY: as above; the struct is `Copy + 'static`.
        unsafe impl $crate::shader::__bytemuck::Pod for $name {}

        impl $name {
            /// The WGSL twin of this struct, for `#struct` (written from the same fields).
            #[allow(dead_code)]
            $vis const WGSL: $crate::shader::StructDecl = {
                $($crate::shader::assert_scalar::<$ty>();)*
                $crate::shader::StructDecl {
                    name: stringify!($name),
                    wgsl: concat!(
                        "struct ", stringify!($name), " {\n",
                        $("    ", stringify!($field), ": ", stringify!($ty), ",\n",)*
                        "}\n"
                    ),
                    size: ::core::mem::size_of::<$name>(),
                }
            };
        }
    };
}
