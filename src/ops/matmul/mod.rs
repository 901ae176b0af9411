//! Matrix multiply (`shaders/matmul.wgsl`, `shaders/matmul_coop.wgsl`): `c (+)= op(a) · op(b)
//! (+ bias)`, f32 accumulation for every storage. Linear layers use it for all three products:
//! forward `y = x · Wᵀ + bias` (`trans_b`), input gradient `dx = dy · W`, and weight
//! gradient `dW += dyᵀ · x` (`trans_a`, `accumulate`, into an f32 gradient).
//!
//! Three kernel bodies share one launch and one epilogue ([`MatmulKernel`]): direct (CPU
//! adapters), tiled SIMT (GPUs) and cooperative matrices (tensor cores, f16 inputs only; bf16
//! has no cooperative type in naga 30 and stays on the SIMT bodies).
//!
//! - `tiling`: launch shapes of each body per input storage
//! - `launch`: shape checks, the uniform block and the grid, shared by every entry point
//! - `layout`: where a batch of matrices lives in a tensor, and its checks
//! - `batched`: strided batched matmul (attention)

mod batched;
mod launch;
mod layout;
mod tiling;

pub use batched::{batched_matmul, batched_matmul_with};
pub use layout::MatrixLayout;
pub(crate) use tiling::coop_consts;

use crate::dtype::Storage;
use crate::error::Result;
use crate::gpu::{Capabilities, GpuContext, Kernel};
use crate::shader::{Grid, ShaderDecl, Variant};
use crate::tensor::Tensor;
use launch::{Operand, check_shapes, launch};
use tiling::Tiling;

/// The SIMT bodies (direct and tiled).
pub static SHADER: ShaderDecl = ShaderDecl {
    name: "matmul",
    source: include_str!("../../../shaders/matmul.wgsl"),
    structs: &[launch::Params::WGSL],
    variants: simt_variants,
};
/// The cooperative-matrix body (tensor cores).
pub static COOP_SHADER: ShaderDecl = ShaderDecl {
    name: "matmul_coop",
    source: include_str!("../../../shaders/matmul_coop.wgsl"),
    structs: &[launch::Params::WGSL],
    variants: coop_variants,
};
const FLAG_ACCUMULATE: u32 = 1;
const FLAG_BIAS: u32 = 2;
const FLAG_PAIRS: u32 = 4;
/// Bits 3-4 of the flags: the product's rounding ([`super::round_code`]).
const ROUND_SHIFT: u32 = 3;

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
    /// computed in the forward's low dtype, landing in f32; see [`super::round_code`]).
    pub round_to: Option<crate::dtype::DType>,
}

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

impl MatmulKernel {
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

    /// [`MatmulKernel::resolve`] from capabilities alone (what `info` reports): native f16
    /// inputs where tensor cores are used run on cooperative matrices (on a CPU adapter only
    /// under `--tensor-cores on`); otherwise barriers cost a context switch on CPU adapters
    /// (lavapipe, llvmpipe), so those run the direct body, and GPUs the tiled SIMT body.
    pub fn resolve_for(self, caps: &Capabilities, a: Storage, b: Storage) -> MatmulKernel {
        match self {
            MatmulKernel::Auto if uses_tensor_cores(caps, &[a, b]) => MatmulKernel::Coop,
            MatmulKernel::Auto if caps.cpu_adapter => MatmulKernel::Direct,
            MatmulKernel::Auto => MatmulKernel::Tiled,
            k => k,
        }
    }
}

/// Whether a product whose inputs have these storages runs on tensor cores here: they are
/// used, and every input is native f16 (the one cooperative input type naga 30 has).
pub fn uses_tensor_cores(caps: &Capabilities, inputs: &[Storage]) -> bool {
    caps.tensor_cores.config().is_some() && inputs.iter().all(|&s| s == Storage::F16)
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
    let (m, n, k) = check_shapes(a, b, c, &opts)?;
    let (mu, nu, ku) = (m as usize, n as usize, k as usize);
    // One contiguous matrix each: the same arithmetic as ever, only the index math is general.
    let stored = |trans: bool, rows: usize, cols: usize| {
        let (r, c) = if trans { (cols, rows) } else { (rows, cols) };
        MatrixLayout::contiguous(r, c)
    };
    launch(
        ctx,
        Operand {
            tensor: a,
            layout: stored(opts.trans_a, mu, ku),
        },
        Operand {
            tensor: b,
            layout: stored(opts.trans_b, ku, nu),
        },
        Operand {
            tensor: c,
            layout: MatrixLayout::contiguous(mu, nu),
        },
        (m, n, k),
        [1, 1],
        &opts,
        kernel,
    )
}

/// Floating-point operations of one `matmul` of these sizes (2·M·N·K), for benchmarks.
pub fn flops(m: usize, n: usize, k: usize) -> f64 {
    2.0 * m as f64 * n as f64 * k as f64
}

/// The SIMT bodies with the four transpose combinations and every storage of a, b, c and
/// bias within one f16 world (native or packed; the two never meet in one call).
fn simt_variants(shader: &'static ShaderDecl) -> Result<Vec<Variant>> {
    let grid = Grid::new()
        .each(&["a"])
        .each(&["b"])
        .each(&["c"])
        .each(&["bias"])
        .one_f16_storage();
    grid.variants_with(shader, |storages| {
        let mut consts = Vec::new();
        for kernel in [MatmulKernel::Tiled, MatmulKernel::Direct] {
            let tiling = Tiling::choose(kernel, storages.storage("a"), storages.storage("b"));
            for trans_a in [false, true] {
                for trans_b in [false, true] {
                    consts.push(tiling.consts(trans_a, trans_b));
                }
            }
        }
        consts
    })
}

/// The cooperative body: native f16 inputs, f16 or f32 output and bias, every tile (16×16
/// fragments on NVIDIA's subgroups of 32, 8×8 on Apple's; other fixed subgroup sizes differ
/// only in the workgroup size), every transpose.
fn coop_variants(shader: &'static ShaderDecl) -> Result<Vec<Variant>> {
    let grid = Grid::new()
        .each_of(&["a", "b"], &[Storage::F16])
        .each_of(&["c"], &[Storage::F16, Storage::F32])
        .each_of(&["bias"], &[Storage::F16, Storage::F32]);
    grid.variants_with(shader, |_| {
        let mut consts = Vec::new();
        for tiling in tiling::coop_tilings() {
            for trans_a in [false, true] {
                for trans_b in [false, true] {
                    consts.push(tiling.consts(trans_a, trans_b));
                }
            }
        }
        consts
    })
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
