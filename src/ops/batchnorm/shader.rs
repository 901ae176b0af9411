//! The BatchNorm shader's declaration, its uniform block and variant constants, and the
//! chunking of its reductions: what the forward and backward (`mod.rs`) and the running
//! statistics (`running.rs`) share.

use crate::shader::{Grid, ShaderDecl};

pub static SHADER: ShaderDecl = ShaderDecl {
    name: "batchnorm",
    source: include_str!("../../../shaders/batchnorm.wgsl"),
    structs: &[Params::WGSL],
    consts: &[],
    // Activations and their gradients in one storage (any), the affine parameters in theirs
    // or f32 (autocast's f32 parameters beside f16 activations); statistics, running buffers
    // and parameter gradients f32. Each with the fused activation off, ReLU or GELU.
    variants: |shader| {
        Grid::new()
            .each(&["x", "y", "pre", "dy", "dx"])
            .like_or_f32(&["weight", "bias"], "x")
            .variants_with(shader, |_| {
                Activation::ALL.iter().map(|a| vec![a.constant()]).collect()
            })
    },
};

pub(super) const WG: u32 = 256;
/// Threads of the per-channel kernel (the backward's sums).
pub(super) const SMALL_WG: u32 = 64;
/// Fewest values of a channel per first-pass workgroup (four per thread).
const MIN_CHUNK: usize = 1024;
/// Most chunks per channel (the final pass adds this many partials per channel).
const MAX_CHUNKS: usize = 128;

/// The activation a BatchNorm's kernels may apply after it (`nn.ReLU()`, `nn.GELU()`): the
/// same bits as the activation's own kernels, one dispatch fewer each way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Activation {
    #[default]
    None,
    Relu,
    /// The exact (erf) form, `nn.GELU()`.
    Gelu,
}

impl Activation {
    pub const ALL: [Activation; 3] = [Activation::None, Activation::Relu, Activation::Gelu];

    pub(super) fn constant(self) -> (&'static str, String) {
        let code = match self {
            Activation::None => 0,
            Activation::Relu => 1,
            Activation::Gelu => 2,
        };
        ("ACT", format!("{code}u"))
    }
}

crate::wgsl_struct! {
    pub(super) struct Params {
        pub(super) channels: u32,
        /// S: values per (sample, channel)
        pub(super) inner: u32,
        /// N
        pub(super) batch: u32,
        /// values of a channel per first-pass workgroup
        pub(super) chunk_len: u32,
        /// ceil(N·S / chunk_len)
        pub(super) chunks: u32,
        pub(super) eps: f32,
        /// the running statistics' factor (unused with `cumulative`)
        pub(super) momentum: f32,
        /// 1: the factor is 1 / num_batches_tracked (PyTorch's momentum=None)
        pub(super) cumulative: u32,
        pub(super) has_weight: u32,
        pub(super) has_bias: u32,
        pub(super) has_dweight: u32,
        pub(super) has_dbias: u32,
        /// 1: the statistics pass updates the pending running statistics
        pub(super) update_running: u32,
        /// 1: normalise with the running statistics (eval)
        pub(super) from_running: u32,
        /// the fused activation's rounding of its input and gradient: y's storage (ROUND_*)
        pub(super) act_round: u32,
        /// the running statistics' first word in their buffer (a model's buffer store)
        pub(super) running_offset: u32,
        pub(super) _pad0: u32,
        /// N·C·S: the elements of the elementwise passes
        pub(super) n: u32,
        pub(super) _pad1: u32,
        pub(super) _pad2: u32,
    }
}

/// Values per chunk and chunks per channel of the deterministic reductions over `m` values.
pub fn chunking(m: usize) -> (usize, usize) {
    let chunk_len = m.div_ceil(MAX_CHUNKS).max(MIN_CHUNK);
    (chunk_len, m.div_ceil(chunk_len).max(1))
}
