//! Causal softmax for attention (`shaders/attention.wgsl`), forward and backward, in f32.
//!
//! nanoGPT's CausalSelfAttention under autocast: `S = q·kᵀ` (low dtype, from
//! [`super::matmul::batched_matmul`]), `P = softmax(scale · S masked causally)` in f32,
//! `Pd = attn_dropout(P)` stored in the low dtype for `y = Pd · v`. Backward:
//! `dP = dropout_backward(dPd)`, `dS = scale · P ⊙ (dP − rowsum(P ⊙ dP))` in the low dtype.
//! The dropout mask is [`super::dropout::keep`] at element index `r · T + j` of the
//! [B, nh, T, T] tensor, so it matches the standalone dropout kernels bit for bit.
//!
//! One workgroup per row with fixed-order tree reductions on GPUs; one invocation per row
//! with no barriers on CPU adapters, in the same arithmetic order, so the bits are the same
//! ([`SoftmaxBody`]). Deterministic, no float atomics. Any T works.
//!
//! Two small differences from PyTorch's manual attention path, both below the low dtype's
//! rounding: PyTorch rounds `S · scale` to the low dtype before the softmax (here the
//! scaling is f32, inside the kernel), and rounds the softmax gradient to the low dtype
//! before multiplying it by the scale (here one rounding, of the final dS).

use super::dropout::{DropoutKey, DropoutState, state_or_placeholder};
use crate::error::{Error, Result};
use crate::gpu::{Arg, KernelDesc, grid_1d};
use crate::gpu::{GpuContext, Kernel};
use crate::shader::{Grid, ShaderDecl};
use crate::tensor::{Storage, Tensor};

pub static SHADER: ShaderDecl = ShaderDecl {
    name: "attention",
    source: include_str!("../../shaders/attention.wgsl"),
    structs: &[Params::WGSL],
    // Forward variants: every (s, pd) storage pair within one f16 world with p f32; backward
    // variants: every (dpd, ds) pair likewise. Tensors an entry point does not use stay f32.
    variants: |shader| {
        let forward = Grid::new().each(&["s"]).each(&["pd"]);
        let backward = Grid::new().each(&["dpd"]).each(&["ds"]);
        forward.or(backward).one_f16_storage().variants(shader, &[])
    },
};
const FLAG_DROPOUT: u32 = 1;
/// Threads per workgroup of both bodies (`WG` in the shader).
const WG: u32 = 64;

pub use super::bodies::SoftmaxBody;

impl SoftmaxBody {
    fn resolve(self, ctx: &GpuContext) -> SoftmaxBody {
        match self {
            SoftmaxBody::Auto => super::bodies::softmax(&ctx.caps),
            other => other,
        }
    }

    /// The entry point for `forward` or backward, and the grid for `rows`.
    fn entry(self, ctx: &GpuContext, forward: bool, rows: usize) -> (&'static str, [u32; 3]) {
        match (self.resolve(ctx), forward) {
            (SoftmaxBody::Rowwise, true) => ("softmax_forward_rowwise", grid_1d(rows, WG)),
            (SoftmaxBody::Rowwise, false) => ("softmax_backward_rowwise", grid_1d(rows, WG)),
            (_, true) => ("softmax_forward", grid_1d(rows, 1)),
            (_, false) => ("softmax_backward", grid_1d(rows, 1)),
        }
    }
}

/// Sizes and options of one causal softmax.
#[derive(Clone, Copy, Debug, Default)]
pub struct SoftmaxParams<'a> {
    /// Rows of S: B · nh · T.
    pub rows: usize,
    /// Sequence length T (row length; row r is query r % T).
    pub t: usize,
    /// Logit scale, 1 / sqrt(hs).
    pub scale: f32,
    /// Attention dropout on P (None or p = 0: none). Needs `dropout_state`.
    pub dropout: Option<DropoutKey>,
    /// The state buffer the dropout kernels read (seed, counter, training flag); required
    /// when `dropout` is set.
    pub dropout_state: Option<&'a DropoutState>,
    /// The kernel body (default: by adapter).
    pub body: SoftmaxBody,
}

crate::wgsl_struct! {
    struct Params {
        /// B * nh * T
        rows: u32,
        /// T
        t: u32,
        /// 1 / sqrt(hs)
        scale: f32,
        /// FLAG_DROPOUT
        flags: u32,
        /// dropout: ceil(p * 2^24)
        threshold: u32,
        /// dropout: layer id keying the mask
        layer: u32,
        /// dropout: 1 / (1 - p)
        drop_scale: f32,
        _pad: u32,
    }
}

/// Check sizes and the dropout setting; the uniform parameters.
fn plan(op: &'static str, params: &SoftmaxParams, tensors: &[(&str, &Tensor)]) -> Result<Params> {
    let (rows, t) = (params.rows, params.t);
    if t == 0 || rows % t != 0 {
        return Err(Error::shape(
            op,
            format!("rows {rows} must be a multiple of T = {t} (rows = B · nh · T, T > 0)"),
        ));
    }
    let n = rows
        .checked_mul(t)
        .filter(|&n| n <= u32::MAX as usize)
        .ok_or_else(|| Error::shape(op, format!("{rows} rows of {t} exceed 2^32 elements")))?;
    for (name, tensor) in tensors {
        if tensor.numel() != n {
            return Err(Error::shape(
                op,
                format!(
                    "{name} {:?} must hold rows · T = {rows} · {t} = {n} elements",
                    tensor.shape()
                ),
            ));
        }
    }
    let storages: Vec<Storage> = tensors.iter().map(|(_, t)| t.storage()).collect();
    if storages.contains(&Storage::F16) && storages.contains(&Storage::F16Packed) {
        return Err(Error::shape(
            op,
            format!("mixes native and packed f16 storages ({storages:?}); one context uses one"),
        ));
    }
    let mut p = Params {
        rows: rows as u32,
        t: t as u32,
        scale: params.scale,
        flags: 0,
        threshold: 0,
        layer: 0,
        drop_scale: 1.0,
        ..Default::default()
    };
    if let Some(key) = params.dropout {
        key.check(op)?;
        if params.dropout_state.is_none() {
            return Err(Error::shape(
                op,
                "attention dropout needs SoftmaxParams::dropout_state (the DropoutState buffer)"
                    .to_string(),
            ));
        }
        p.flags |= FLAG_DROPOUT;
        p.threshold = key.threshold();
        p.layer = key.layer;
        p.drop_scale = key.scale();
    }
    Ok(p)
}

fn require_f32(op: &'static str, name: &str, t: &Tensor) -> Result<()> {
    if t.storage() != Storage::F32 {
        return Err(Error::shape(
            op,
            format!(
                "{name} must be f32 (softmax is on autocast's fp32 list), got {}",
                t.storage().name()
            ),
        ));
    }
    Ok(())
}

/// Causal softmax forward: `p[r, j] = softmax_{j ≤ i}(scale · s[r, j])` with i = r % T, and
/// `p = 0` exactly for j > i (`p` must be f32); `pd = dropout(p)` stored in pd's storage (the
/// low dtype, or f32). `s`, `p`, `pd` are [B, nh, T, T] (any shape of rows · T elements).
/// Without dropout (or in eval mode) `pd` is `p` rounded to pd's storage.
pub fn causal_softmax_forward(
    ctx: &GpuContext,
    s: &Tensor,
    p: &Tensor,
    pd: &Tensor,
    params: &SoftmaxParams,
) -> Result<Kernel> {
    const OP: &str = "causal_softmax_forward";
    require_f32(OP, "p", p)?;
    let uniform = plan(OP, params, &[("s", s), ("p", p), ("pd", pd)])?;
    let state = state_or_placeholder(ctx, params.dropout, params.dropout_state);
    let (entry, grid) = params.body.entry(ctx, true, params.rows);
    ctx.kernel(
        &KernelDesc::new(&SHADER, entry),
        &[
            ("params", Arg::Uniform(bytemuck::bytes_of(&uniform))),
            ("s", s.arg()),
            ("p", p.arg()),
            ("pd", pd.arg()),
            ("dropout_state", Arg::Buffer(&state)),
        ],
        grid,
    )
}

/// Causal softmax backward: `ds = scale · p ⊙ (dp − Σ_j p ⊙ dp)` with
/// `dp = dropout_backward(dpd)` (the forward's mask: same key, same state words), `ds = 0`
/// exactly for j > i, stored in ds's storage. `p` is the forward's f32 output.
pub fn causal_softmax_backward(
    ctx: &GpuContext,
    p: &Tensor,
    dpd: &Tensor,
    ds: &Tensor,
    params: &SoftmaxParams,
) -> Result<Kernel> {
    const OP: &str = "causal_softmax_backward";
    require_f32(OP, "p", p)?;
    let uniform = plan(OP, params, &[("p", p), ("dpd", dpd), ("ds", ds)])?;
    let state = state_or_placeholder(ctx, params.dropout, params.dropout_state);
    let (entry, grid) = params.body.entry(ctx, false, params.rows);
    ctx.kernel(
        &KernelDesc::new(&SHADER, entry),
        &[
            ("params", Arg::Uniform(bytemuck::bytes_of(&uniform))),
            ("p", p.arg()),
            ("dpd", dpd.arg()),
            ("ds", ds.arg()),
            ("dropout_state", Arg::Buffer(&state)),
        ],
        grid,
    )
}
