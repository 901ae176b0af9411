//! LayerNorm (`shaders/layernorm.wgsl`): `torch.nn.LayerNorm(C, bias=...)` over the last dim
//! of a 2-D view `x [rows, C]` (the caller reshapes `[B, T, C]` to `[B·T, C]`), forward and
//! backward; and, the same kernels with the variant constant `RMS`, Llama's RMSNorm
//! ([`rmsnorm_forward`], [`rmsnorm_backward_into`]) with the same fusions.
//!
//! RMSNorm is transformers' `LlamaRMSNorm` step by step: `h = x.float()`, `rstd =
//! rsqrt(mean(h²) + eps)` in f32, `y = weight · (h · rstd).to(x.dtype)`. The cast back to x's
//! dtype comes before the weight (it matters in pure f16 or bf16; under autocast the residual
//! stream is f32 and it is exact); the backward is autograd's through those ops: `g = dy ·
//! weight` in x's dtype, `dx = rstd · (g − x̂ · mean(g · x̂))` with `x̂ = x · rstd`, and
//! `dweight = Σ dy · x̂.to(x.dtype)`.
//!
//! Numerics follow PyTorch: biased variance, `rstd = 1 / sqrt(var + eps)`, statistics computed
//! in f32 in two passes (the mean, then the centred sum of squares). LayerNorm is on autocast's
//! fp32 list, so under AMP its input arrives as f32 and its output is f32, but every kernel is
//! storage-generic: `x`, `y`, `dy`, `dx`, `weight` and `bias` may each have any storage; the
//! statistics `mean`/`rstd` and the parameter gradients are f32.
//!
//! Algorithms (rows R, columns C):
//! - forward: one workgroup of 64 threads per row; two fixed-order tree reductions (sum, then
//!   centred sum of squares), then `y = (x − mean)·rstd·weight + bias`. O(R·C) work. Fused
//!   with a residual's add ([`layernorm_forward_add`]), it first writes `x = a + b`.
//! - backward, two kernels, deterministic without float atomics: the rows are cut into
//!   `chunks` fixed chunks of `chunk_rows` rows (a function of R only). The first kernel runs
//!   one workgroup per chunk, row after row: one tree reduction of `(Σ g, Σ g·x̂)` with
//!   `g = dy·weight`, then `dx = rstd·(g − mean(g) − x̂·mean(g·x̂))`; on the way, the thread
//!   owning column c sums `dy·x̂` and `dy` over the chunk's rows in row order into a scratch
//!   buffer (x and dy are read once for both gradients). The second adds, per column, the
//!   chunk sums in chunk order to `dweight[c]` / `dbias[c]`. `chunk_rows =
//!   max(32, ⌈R/1024⌉)`, so at most 1024 chunks: O(R·C) work, span O(R/1024 + 1024); scratch
//!   `chunks·C` f32 (twice that with a bias), allocated when the backward is planned.

mod backward;

pub use backward::{InputGrad, layernorm_backward, layernorm_backward_into, rmsnorm_backward_into};

use super::check_f32;
use crate::dtype::Storage;
use crate::error::{Error, Result};
use crate::gpu::{Arg, KernelDesc, grid_1d};
use crate::gpu::{GpuContext, Kernel};
use crate::shader::{Grid, ShaderDecl};
use crate::tensor::Tensor;

pub static SHADER: ShaderDecl = ShaderDecl {
    name: "layernorm",
    source: include_str!("../../../shaders/layernorm.wgsl"),
    structs: &[Params::WGSL],
    consts: &[],
    // Every storage combination these kernels may run with. The input side (`x`, its
    // gradient `dx`, the residual sum's `a` and `sum_out`) in any storage; the output side
    // (`y`, `dy`, the branch's `b`, `dx_low`) in the same or, beside an f32 input, in a low
    // one (a LayerNorm writes the dtype of the Linear after it and takes its gradient in
    // it); parameters (`weight`, `bias`) in the input's storage or f32; statistics and
    // parameter gradients f32. Each with the fusions off, the add on, or the low copy on, for
    // LayerNorm and for RMSNorm.
    variants: |shader| {
        let inputs = ["x", "dx", "a", "sum_out"];
        let outputs = ["y", "dy", "b", "dx_low"];
        let same = Grid::new().each(&inputs).like_or_f32(&outputs, "x");
        let low = Grid::new()
            .each_of(&inputs, &[Storage::F32])
            .each_of(&outputs, &Storage::ALL[1..]);
        same.or(low)
            .like_or_f32(&["weight", "bias"], "x")
            .variants_with(shader, |_| {
                [Norm::Layer, Norm::Rms]
                    .into_iter()
                    .flat_map(|norm| {
                        [(false, false), (true, false), (false, true)]
                            .map(|(add, low)| fusions(norm, add, low))
                    })
                    .collect()
            })
    },
};

/// Which normalisation the kernels compute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Norm {
    /// `torch.nn.LayerNorm`.
    Layer,
    /// transformers' `LlamaRMSNorm` (the constant `RMS`).
    Rms,
}

/// The variant constants: the normalisation, and the two fusions (the forward's residual
/// add, the backward's low-dtype copy of the input gradient).
fn fusions(norm: Norm, add_input: bool, low_copy: bool) -> Vec<(&'static str, String)> {
    vec![
        ("ADD_INPUT", add_input.to_string()),
        ("LOW_COPY", low_copy.to_string()),
        ("RMS", (norm == Norm::Rms).to_string()),
    ]
}

fn desc(entry: &'static str, norm: Norm, add_input: bool, low_copy: bool) -> KernelDesc {
    let mut desc = KernelDesc::new(&SHADER, entry);
    desc.consts = fusions(norm, add_input, low_copy);
    desc
}
const ROW_WG: u32 = 64;
const WG: u32 = 256;
/// Fewest rows per chunk of the parameter-gradient first pass.
const MIN_CHUNK_ROWS: usize = 32;
/// Most chunks (the second pass sums this many partials per column).
/// Most chunks: the input gradient's kernel runs one workgroup per chunk, so this many
/// keep a large GPU busy (16384 rows: 512 chunks of 32), and the second pass sums this many
/// partials per column.
const MAX_CHUNKS: usize = 1024;

/// `[rows, C]` of a 2-D tensor, with C > 0 and rows·C < 2^32.
fn rows_cols(op: &'static str, x: &Tensor) -> Result<(usize, usize)> {
    let &[rows, cols] = x.shape() else {
        return Err(Error::shape(
            op,
            format!(
                "x must be a 2-D view [rows, C], not {:?} (reshape [B, T, C] to [B·T, C])",
                x.shape()
            ),
        ));
    };
    if cols == 0 {
        return Err(Error::shape(op, "x has no columns (C = 0)"));
    }
    if u32::try_from(rows * cols).is_err() {
        return Err(Error::shape(op, format!("{rows}×{cols} is over 2^32")));
    }
    Ok((rows, cols))
}

fn check_len(op: &'static str, what: &str, t: &Tensor, n: usize) -> Result<()> {
    if t.numel() != n {
        return Err(Error::shape(
            op,
            format!("{what} {:?} must hold {n} elements", t.shape()),
        ));
    }
    Ok(())
}

fn check_same(op: &'static str, what: &str, t: &Tensor, x: &Tensor) -> Result<()> {
    if t.shape() != x.shape() {
        return Err(Error::shape(
            op,
            format!("{what} {:?} differs from x {:?}", t.shape(), x.shape()),
        ));
    }
    Ok(())
}

/// Rows per chunk and number of chunks of the parameter-gradient reduction (depends on the
/// number of rows only, so the summation order, hence the bits, are fixed for a shape).
fn chunking(rows: usize) -> (usize, usize) {
    let chunk_rows = rows.div_ceil(MAX_CHUNKS).max(MIN_CHUNK_ROWS);
    (chunk_rows, rows.div_ceil(chunk_rows))
}

fn row_grid(rows: usize) -> [u32; 3] {
    if rows == 0 {
        [0, 0, 0]
    } else {
        grid_1d(rows * ROW_WG as usize, ROW_WG)
    }
}

crate::wgsl_struct! {
    struct Params {
        rows: u32,
        cols: u32,
        eps: f32,
        has_bias: u32,
        /// rows per chunk of the parameter-gradient first pass
        chunk_rows: u32,
        /// ceil(rows / chunk_rows)
        chunks: u32,
        /// 1: the input gradient is added onto what `dx` holds (f32 `dx` only)
        accumulate: u32,
        /// RMSNorm: x's dtype, which x̂ is cast to (round_grad's code: 0 f32, 1 f16, 2 bf16)
        x_round: u32,
    }
}

/// `y[r, :] = (x[r, :] − mean_r) · rstd_r · weight + bias` over the rows `r` of `x [rows, C]`;
/// also writes `mean [rows]` and `rstd [rows]` (f32) for the backward. `weight`, `bias`: `[C]`
/// (any storage); `y`: the shape of `x` (any storage). One kernel.
#[allow(clippy::too_many_arguments)]
pub fn layernorm_forward(
    ctx: &GpuContext,
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    y: &Tensor,
    mean: &Tensor,
    rstd: &Tensor,
    eps: f32,
) -> Result<Kernel> {
    let stats = (Some(mean), rstd);
    forward(ctx, Norm::Layer, (x, None), (weight, bias), y, stats, eps)
}

/// [`layernorm_forward`] of `x = a + b`, which the kernel writes first, in `x`'s storage and
/// with the rounding of [`super::elementwise::add`] (the same bits): a residual's add and
/// the LayerNorm after it in one kernel. `a`, `b`: the shape of `x` (any storage).
#[allow(clippy::too_many_arguments)]
pub fn layernorm_forward_add(
    ctx: &GpuContext,
    (a, b): (&Tensor, &Tensor),
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    y: &Tensor,
    (mean, rstd): (&Tensor, &Tensor),
    eps: f32,
) -> Result<Kernel> {
    let stats = (Some(mean), rstd);
    forward(
        ctx,
        Norm::Layer,
        (x, Some((a, b))),
        (weight, bias),
        y,
        stats,
        eps,
    )
}

/// RMSNorm (transformers' `LlamaRMSNorm`): `y[r, :] = weight · (x[r, :] · rstd_r)` with the
/// product cast to x's dtype before the weight, `rstd_r = 1 / sqrt(mean(x[r, :]²) + eps)`
/// (f32 `[rows]`, kept for the backward). `weight`: `[C]` (any storage); `y`: the shape of
/// `x` (any storage: a low one fuses the cast to the Linear after it). One kernel.
pub fn rmsnorm_forward(
    ctx: &GpuContext,
    x: &Tensor,
    weight: &Tensor,
    y: &Tensor,
    rstd: &Tensor,
    eps: f32,
) -> Result<Kernel> {
    forward(
        ctx,
        Norm::Rms,
        (x, None),
        (weight, None),
        y,
        (None, rstd),
        eps,
    )
}

/// [`rmsnorm_forward`] of `x = a + b`, which the kernel writes first (the bits of
/// [`super::elementwise::add`]): a residual's add and the RMSNorm after it in one kernel.
pub fn rmsnorm_forward_add(
    ctx: &GpuContext,
    (a, b): (&Tensor, &Tensor),
    x: &Tensor,
    weight: &Tensor,
    (y, rstd): (&Tensor, &Tensor),
    eps: f32,
) -> Result<Kernel> {
    let op = "rmsnorm_forward_add";
    check_len(op, "a", a, x.numel())?;
    check_len(op, "b", b, x.numel())?;
    let add = Some((a, b));
    forward(
        ctx,
        Norm::Rms,
        (x, add),
        (weight, None),
        y,
        (None, rstd),
        eps,
    )
}

fn forward(
    ctx: &GpuContext,
    norm: Norm,
    (x, add): (&Tensor, Option<(&Tensor, &Tensor)>),
    (weight, bias): (&Tensor, Option<&Tensor>),
    y: &Tensor,
    (mean, rstd): (Option<&Tensor>, &Tensor),
    eps: f32,
) -> Result<Kernel> {
    let op = norm.op("forward");
    let (rows, cols) = rows_cols(op, x)?;
    check_len(op, "weight", weight, cols)?;
    if let Some(b) = bias {
        check_len(op, "bias", b, cols)?;
    }
    check_same(op, "y", y, x)?;
    check_stats(op, (mean, rstd), rows)?;
    if !(eps >= 0.0 && eps.is_finite()) {
        return Err(Error::InvalidArgument(format!(
            "{op}: eps must be finite and >= 0, not {eps}"
        )));
    }
    let params = Params {
        rows: rows as u32,
        cols: cols as u32,
        eps,
        has_bias: bias.is_some() as u32,
        x_round: norm.x_round(x),
        ..Default::default()
    };
    let mut args = vec![
        ("params", Arg::Uniform(bytemuck::bytes_of(&params))),
        ("weight", weight.arg()),
        // Without a bias the shader never reads this binding; `weight` fills it.
        ("bias", bias.unwrap_or(weight).arg()),
        ("y", y.arg()),
        ("rstd_out", rstd.arg()),
    ];
    args.extend(mean.map(|m| ("mean_out", m.arg())));
    match add {
        None => args.push(("x", x.arg())),
        Some((a, b)) => args.extend([("a", a.arg()), ("b", b.arg()), ("sum_out", x.arg())]),
    }
    ctx.kernel(
        &desc("layernorm_forward", norm, add.is_some(), false),
        &args,
        row_grid(rows),
    )
}

impl Norm {
    /// The op's name in errors.
    fn op(self, pass: &str) -> &'static str {
        match (self, pass) {
            (Norm::Layer, "forward") => "layernorm_forward",
            (Norm::Layer, _) => "layernorm_backward",
            (Norm::Rms, "forward") => "rmsnorm_forward",
            (Norm::Rms, _) => "rmsnorm_backward",
        }
    }

    /// RMSNorm casts x̂ to x's dtype (`Params::x_round`); LayerNorm never does.
    fn x_round(self, x: &Tensor) -> u32 {
        match self {
            Norm::Layer => 0,
            Norm::Rms => super::round_code(Some(x.dtype())),
        }
    }
}

/// The statistics: `mean` (LayerNorm only) and `rstd`, f32 `[rows]`.
fn check_stats(
    op: &'static str,
    (mean, rstd): (Option<&Tensor>, &Tensor),
    rows: usize,
) -> Result<()> {
    for (what, t) in mean
        .map(|m| ("mean", m))
        .into_iter()
        .chain([("rstd", rstd)])
    {
        check_len(op, what, t, rows)?;
        check_f32(op, what, t)?;
    }
    Ok(())
}
