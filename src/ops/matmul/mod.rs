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
mod coop;
mod epilogue;
mod launch;
mod layout;
mod tiling;

pub use crate::ops::bodies::{MatmulKernel, uses_tensor_cores};
pub use batched::{batched_matmul, batched_matmul_with};
pub(crate) use coop::{CoopGemm, table_tiles};
pub use layout::MatrixLayout;

use crate::dtype::Storage;
use crate::error::{Error, Result};
use crate::gpu::{AdapterClass, Capabilities, GpuContext, Kernel, KernelTable};
use crate::shader::{Grid, ShaderDecl, Variant};
use crate::tensor::Tensor;
use epilogue::Epilogue;
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
    /// Split the reduction over K into this many parts (tests; `None`: as the adapter's
    /// kernel table says, for the tiled and cooperative bodies of one matrix).
    pub split_k: Option<u32>,
}

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

/// The SIMT bodies with the four transpose combinations and every storage of a, b and c
/// within one f16 world (native or packed; the two never meet in one call), the bias in c's
/// storage or f32; the tiled body in each tile of the class tables, interior and edge
/// variants; each with the bare epilogue and with every epilogue option on.
fn simt_variants(shader: &'static ShaderDecl) -> Result<Vec<Variant>> {
    let grid = Grid::new()
        .each(&["a"])
        .each(&["b"])
        .each(&["c"])
        .like_or_f32(&["bias"], "c")
        .one_f16_storage();
    let tables: Vec<KernelTable> = AdapterClass::ALL.map(KernelTable::defaults).to_vec();
    grid.variants_with(shader, |storages| {
        let (a, b) = (storages.storage("a"), storages.storage("b"));
        let mut shapes = Vec::new();
        for table in &tables {
            let tiled = Tiling::choose(MatmulKernel::Tiled, a, b, table);
            for aligned in [false, true] {
                if !shapes.contains(&(tiled, aligned)) {
                    shapes.push((tiled, aligned));
                }
            }
        }
        shapes.push((
            Tiling::choose(MatmulKernel::Direct, a, b, &tables[0]),
            false,
        ));
        let mut consts = Vec::new();
        for (tiling, aligned) in shapes {
            for trans in [(false, false), (true, false), (false, true), (true, true)] {
                for epilogue in Epilogue::VARIANTS {
                    let mut c = tiling.consts(trans, aligned);
                    c.extend(epilogue.consts(false));
                    consts.push(c);
                }
            }
        }
        // Split-K: the tiled body writing partial sums, and the reduction.
        let tiled = Tiling::choose(MatmulKernel::Tiled, a, b, &tables[0]);
        let mut split = tiled.consts((true, false), false);
        split.extend(Epilogue::VARIANTS[0].consts(true));
        consts.push(split);
        consts
    })
}

/// The cooperative body: native f16 inputs, f16 or f32 output and bias, every tile of the
/// class tables (on subgroups of 32; other fixed subgroup sizes differ only in the workgroup
/// size), every transpose, interior and edge variants, the bare and the full epilogue, the
/// straight-to-memory store of f32 outputs and of split-K partial sums.
fn coop_variants(shader: &'static ShaderDecl) -> Result<Vec<Variant>> {
    use crate::dtype::Storage::{F16, F32};
    let [bare, full] = Epilogue::VARIANTS;
    // (c, bias, epilogue, direct store, split-K partial sums)
    let outputs = [
        (F16, F16, bare, false, false),
        (F32, F32, bare, false, false),
        (F16, F32, full, false, false),
        (F32, F16, full, false, false),
        (F32, F32, bare, true, false),
        (F32, F32, bare, false, true),
        (F32, F32, bare, true, true),
    ];
    let mut variants = Vec::new();
    for (config, tile) in table_tiles() {
        for (a_krows, b_krows) in [(false, true), (true, true), (false, false), (true, false)] {
            for aligned in [false, true] {
                for (c, bias, epilogue, direct, split) in outputs {
                    if direct && !aligned {
                        continue;
                    }
                    let gemm = CoopGemm {
                        config,
                        tile,
                        a_krows,
                        b_krows,
                        sg_barrier: epilogue == full,
                        direct,
                    };
                    let mut consts = vec![
                        ("TRANS_A", a_krows.to_string()),
                        ("TRANS_B", (!b_krows).to_string()),
                        ("ALIGNED", aligned.to_string()),
                    ];
                    consts.extend(gemm.consts());
                    consts.extend(epilogue.consts(split));
                    let storages = [("a", F16), ("b", F16), ("c", c), ("bias", bias)];
                    variants.push(Variant::new(shader, &storages, &consts)?);
                }
            }
        }
    }
    Ok(variants)
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
