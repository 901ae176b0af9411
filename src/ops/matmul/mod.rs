//! Matrix multiply (`shaders/matmul.wgsl`, `shaders/matmul_coop.wgsl`): `c (+)= op(a) · op(b)
//! (+ bias)`, f32 accumulation for every storage. Linear layers use it for all three products:
//! forward `y = x · Wᵀ + bias` (`trans_b`), input gradient `dx = dy · W`, and weight
//! gradient `dW += dyᵀ · x` (`trans_a`, `accumulate`, into an f32 gradient).
//!
//! Three kernel bodies share one launch and one epilogue ([`MatmulKernel`]): direct (CPU
//! adapters), tiled SIMT (GPUs) and cooperative matrices (tensor cores, f16 inputs only; bf16
//! has no cooperative type in naga 30 and stays on the SIMT bodies).
//!
//! - `tiling`: launch shapes of each body per input storage, and the SIMT bodies' shader
//! - `coop`: the tensor-core body's plan, and its shader
//! - `launch`: shape checks and the grid, shared by every entry point; `params`: the uniform
//!   block; `opts`: [`MatmulOpts`]
//! - `layout`: where a batch of matrices lives in a tensor, and its checks
//! - `batched`: strided batched matmul (attention)

mod batched;
mod coop;
mod epilogue;
mod launch;
mod layout;
mod opts;
mod params;
mod tiling;

pub use crate::ops::bodies::{MatmulKernel, uses_tensor_cores};
pub use batched::{batched_matmul, batched_matmul_with};
pub use coop::COOP_SHADER;
pub(crate) use coop::{CoopGemm, table_tiles};
pub use layout::MatrixLayout;
pub use opts::MatmulOpts;
pub use tiling::SHADER;

use crate::dtype::Storage;
use crate::error::{Error, Result};
use crate::gpu::{Capabilities, GpuContext, Kernel};
use crate::ops::table_check::{self, TableUse};
use crate::tensor::Tensor;
pub(crate) use launch::matmul_unchecked;

impl MatmulKernel {
    /// Every body, as `bench matmul --kernel` names them.
    pub const ALL: [MatmulKernel; 4] = [
        MatmulKernel::Auto,
        MatmulKernel::Tiled,
        MatmulKernel::Direct,
        MatmulKernel::Coop,
    ];

    /// The body named `name` ([`MatmulKernel::name`]).
    pub fn parse(name: &str) -> Result<MatmulKernel> {
        Self::ALL
            .into_iter()
            .find(|k| k.name() == name)
            .ok_or_else(|| {
                let names: Vec<_> = Self::ALL.iter().map(|k| k.name()).collect();
                Error::InvalidArgument(format!(
                    "unknown matmul body `{name}` (expected one of {})",
                    names.join(", ")
                ))
            })
    }

    pub fn name(self) -> &'static str {
        match self {
            MatmulKernel::Auto => "auto",
            MatmulKernel::Tiled => "tiled",
            MatmulKernel::Direct => "direct",
            MatmulKernel::Coop => "coop",
        }
    }

    /// The body `Auto` resolves to on this context for inputs of storages `a` and `b`.
    pub fn resolve(self, ctx: &GpuContext, a: Storage, b: Storage) -> MatmulKernel {
        self.resolve_for(&ctx.caps, a, b)
    }

    /// [`MatmulKernel::resolve`] from capabilities alone (what `info` reports): `Auto` is
    /// the resolver's choice ([`crate::ops::bodies::matmul`]).
    pub fn resolve_for(self, caps: &Capabilities, a: Storage, b: Storage) -> MatmulKernel {
        match self {
            MatmulKernel::Auto => crate::ops::bodies::matmul(caps, a, b),
            k => k,
        }
    }
}

/// `c[M,N] (+)= op(a) · op(b) (+ bias[N])`, accumulated in f32. `a` is [M,K] ([K,M] with
/// `trans_a`), `b` is [K,N] ([N,K] with `trans_b`). Storages of a, b, c and bias may all
/// differ (f16 inputs with an f32 output for weight gradients). K = 0 gives `c = bias` (or 0),
/// or leaves `c` unchanged plus bias when accumulating.
pub fn matmul(
    ctx: &GpuContext,
    a: &Tensor,
    b: &Tensor,
    c: &Tensor,
    opts: MatmulOpts,
) -> Result<Kernel> {
    matmul_with(ctx, a, b, c, opts, MatmulKernel::Auto)
}

/// [`matmul`] with a chosen kernel body (tests run both on any adapter; the bench compares).
pub fn matmul_with(
    ctx: &GpuContext,
    a: &Tensor,
    b: &Tensor,
    c: &Tensor,
    opts: MatmulOpts,
    kernel: MatmulKernel,
) -> Result<Kernel> {
    check_table(ctx, kernel, a.storage(), b.storage())?;
    matmul_unchecked(ctx, a, b, c, opts, kernel)
}

/// A product's body takes its tiles from the kernel table: a table loaded from a file is run
/// against the CPU reference first ([`crate::ops::table_check`], once per family). The
/// entry points check here; the launch below them does not, so the check's own products
/// ([`matmul_unchecked`]) do not ask again.
pub(super) fn check_table(
    ctx: &GpuContext,
    kernel: MatmulKernel,
    sa: Storage,
    sb: Storage,
) -> Result<()> {
    let used = match (
        kernel.resolve(ctx, sa, sb),
        tiling::Tiling::sixteen_bit(sa, sb),
    ) {
        (MatmulKernel::Direct, _) => return Ok(()),
        (MatmulKernel::Coop, _) => TableUse::Coop,
        (_, true) => TableUse::Simt16,
        (_, false) => TableUse::SimtF32,
    };
    table_check::ensure_checked(ctx, &[used])
}

/// Floating-point operations of one `matmul` of these sizes (2·M·N·K), for benchmarks.
pub fn flops(m: usize, n: usize, k: usize) -> f64 {
    2.0 * m as f64 * n as f64 * k as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variant_lists_have_no_duplicates() {
        for shader in [&SHADER, &COOP_SHADER] {
            let v = (shader.variants)(shader).unwrap();
            let keys: std::collections::BTreeSet<_> = v.iter().map(|v| v.key()).collect();
            assert_eq!(keys.len(), v.len(), "{}", shader.name);
        }
    }
}
