//! The options of one product ([`MatmulOpts`]), apart from `mod.rs` so that the parts that
//! read them (the epilogue, the launch) do not reach themselves through it.

use crate::tensor::Tensor;

/// Options of [`matmul`]. `Default` is a plain `c = a · b`.
#[derive(Clone, Copy, Debug, Default)]
pub struct MatmulOpts<'a> {
    /// `a` is stored [K, M] and used transposed.
    pub trans_a: bool,
    /// `b` is stored [N, K] and used transposed.
    pub trans_b: bool,
    /// Add the product to `c`'s existing values (gradient accumulation).
    pub accumulate: bool,
    /// A [N] vector added to every row of the result.
    pub bias: Option<&'a Tensor>,
    /// Round the result to this dtype before storing or accumulating it (a weight gradient
    /// computed in the forward's low dtype, landing in f32; see [`crate::ops::round_code`]).
    pub round_to: Option<crate::dtype::DType>,
    /// Split the reduction over K into this many parts (tests; `None`: as the adapter's
    /// kernel table says, for the tiled and cooperative bodies of one matrix).
    pub split_k: Option<u32>,
}
