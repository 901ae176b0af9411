//! The one resolver of kernel bodies: which body each heavy op runs on an adapter, from its
//! capabilities (CPU adapter or GPU, tensor cores used or not, subgroup barriers) and the
//! tensors' storages. Every op's `Auto` asks here; `info` prints the answers, and
//! `bench matmul --kernel` forces the bodies this file names. The bodies' shapes (tiles,
//! subgroups, split-K) come from the adapter's kernel table (`gpu::kernel_table`).
//!
//! | op | CPU adapter | GPU | tensor cores used, native f16 |
//! |---|---|---|---|
//! | matmul | direct | tiled SIMT | coop |
//! | convolution | SIMT | SIMT | coop |
//! | fused attention (`FlashBody::resolve`, in `ops::flash_attention`: it asks this file whether tensor cores are used) | rowwise | tiled | coop (head sizes the coop layouts take) |
//! | unfused causal softmax | rowwise | workgroup | (same as GPU/CPU) |

//!
//! The body enums of the ops that import this file live here (`MatmulKernel`, `SoftmaxBody`,
//! `ConvBody`; each op re-exports its own), so no op and this resolver import each other.

use crate::dtype::Storage;
use crate::gpu::Capabilities;

/// Which kernel body runs. [`MatmulKernel::Auto`] picks by adapter and input storages; tests
/// and the benchmark force the others so each is checked where it can run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MatmulKernel {
    #[default]
    Auto,
    /// Workgroup-memory tiles with register blocking (real GPUs).
    Tiled,
    /// Register blocking straight from the buffers, no barriers (CPU adapters).
    Direct,
    /// Cooperative matrices (tensor cores): native f16 inputs on adapters whose
    /// [`Capabilities::tensor_cores`] are used.
    Coop,
}

/// Which kernel body runs. Both give the same bits; tests force each.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SoftmaxBody {
    /// By adapter: [`SoftmaxBody::Rowwise`] on CPU adapters, else [`SoftmaxBody::Workgroup`].
    #[default]
    Auto,
    /// One workgroup per row, tree reductions through workgroup memory (GPUs).
    Workgroup,
    /// One invocation per row, no barriers: on a CPU adapter (lavapipe, llvmpipe,
    /// SwiftShader) each barrier is a context switch between invocations.
    Rowwise,
}

/// Whether a product whose inputs have these storages runs on tensor cores here: they are
/// used, and every input is native f16 (the one cooperative input type naga 30 has).
pub fn uses_tensor_cores(caps: &Capabilities, inputs: &[Storage]) -> bool {
    caps.tensor_cores.config().is_some() && inputs.iter().all(|&s| s == Storage::F16)
}

/// The matmul body for inputs of storages `a` and `b`: native f16 inputs where tensor cores
/// are used run on cooperative matrices (on a CPU adapter only under `--tensor-cores on`);
/// otherwise barriers cost a context switch on CPU adapters (lavapipe, llvmpipe), so those
/// run the direct body, and GPUs the tiled SIMT body.
pub fn matmul(caps: &Capabilities, a: Storage, b: Storage) -> MatmulKernel {
    if uses_tensor_cores(caps, &[a, b]) {
        MatmulKernel::Coop
    } else if caps.cpu_adapter {
        MatmulKernel::Direct
    } else {
        MatmulKernel::Tiled
    }
}

/// Which body runs a convolution.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ConvBody {
    #[default]
    Auto,
    /// The implicit GEMMs of `shaders/conv.wgsl` (every adapter).
    Simt,
    /// The tensor-core GEMMs of `shaders/conv_coop.wgsl`.
    Coop,
}

impl ConvBody {
    pub fn name(self) -> &'static str {
        match self {
            ConvBody::Auto => "auto",
            ConvBody::Simt => "simt",
            ConvBody::Coop => "coop",
        }
    }
}

/// The convolution body for inputs of these storages: tensor cores exactly where the
/// matmul's products go there, else the SIMT GEMMs (one kernel for CPU adapters and GPUs).
pub fn conv(caps: &Capabilities, inputs: &[Storage]) -> ConvBody {
    if uses_tensor_cores(caps, inputs) {
        ConvBody::Coop
    } else {
        ConvBody::Simt
    }
}

/// The unfused attention's causal softmax: one invocation per row on CPU adapters (each
/// barrier is a context switch there), one workgroup per row on GPUs.
pub fn softmax(caps: &Capabilities) -> SoftmaxBody {
    if caps.cpu_adapter {
        SoftmaxBody::Rowwise
    } else {
        SoftmaxBody::Workgroup
    }
}
