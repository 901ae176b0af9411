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
//!
//! [`manual_forward`] and [`manual_backward`] plan the whole manual path around it: the
//! batched products of q, k and v wherever they sit ([`Qkv`]), grouped-query attention
//! included (each product once per query head of a group, over every key/value head; dk and
//! dv add the group's terms in head order, one dispatch after the other: no atomics).

use super::dropout::{DropoutKey, DropoutState, state_or_placeholder};
use super::matmul::{MatmulOpts, MatrixLayout, batched_matmul};
use super::qkv::{Qkv, QkvLayout};
use crate::error::{Error, Result};
use crate::gpu::{Arg, KernelDesc, grid_1d};
use crate::gpu::{GpuContext, Kernel};
use crate::shader::{Grid, ShaderDecl};
use crate::tensor::{Storage, Tensor};

pub static SHADER: ShaderDecl = ShaderDecl {
    name: "attention",
    source: include_str!("../../shaders/attention.wgsl"),
    structs: &[Params::WGSL],
    consts: &[],
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

/// Where the batched products of query head `g` of every group read and write, over the
/// batch (sample b, key/value head): q, k, v, the `[B, nh, T, T]` scores and the `[B, T, C]`
/// output. With one query head per key/value head, the batch is (sample, head) as in
/// nanoGPT's manual path.
struct GroupLayouts {
    q: MatrixLayout,
    k: MatrixLayout,
    v: MatrixLayout,
    scores: MatrixLayout,
    out: MatrixLayout,
}

fn group_layouts(l: &QkvLayout, t: usize, g: usize) -> GroupLayouts {
    let (hs, group, nh) = (l.head_size, l.group(), l.heads);
    let rows = |at: super::qkv::HeadRows, offset, head_stride| MatrixLayout {
        offset: at.offset + offset,
        ld: at.row,
        batch_stride: [t * at.row, head_stride],
    };
    GroupLayouts {
        q: rows(l.q, g * hs, group * hs),
        k: rows(l.k, 0, hs),
        v: rows(l.v, 0, hs),
        scores: MatrixLayout {
            offset: g * t * t,
            ld: t,
            batch_stride: [nh * t * t, group * t * t],
        },
        out: MatrixLayout {
            offset: g * hs,
            ld: l.width(),
            batch_stride: [t * l.width(), group * hs],
        },
    }
}

/// The manual path's sizes: `params.rows` must be batch · nh · T.
fn manual_batch(op: &'static str, qkv: &Qkv, params: &SoftmaxParams) -> Result<[usize; 2]> {
    let l = qkv.layout;
    l.check(op)?;
    let per_sample = l.heads * params.t;
    if per_sample == 0 || !params.rows.is_multiple_of(per_sample) {
        return Err(Error::shape(
            op,
            format!(
                "softmax rows {} are not batch × {} heads × T {}",
                params.rows, l.heads, params.t
            ),
        ));
    }
    let batch = params.rows / per_sample;
    qkv.check(op, ["q", "k", "v"], batch, params.t)?;
    Ok([batch, l.kv_heads])
}

/// The manual attention's forward, as nanoGPT writes it without flash: `S = q kᵀ` (into `s`,
/// the low dtype), `P = softmax(scale · S, causal)` (f32 `p`), `Pd = dropout(P)` (`pd`), `y =
/// Pd v` (`[B, T, C]`). `s`, `p` and `pd` are `[B, nh, T, T]`; grouped-query attention reads
/// each key/value head for its group's query heads (no repeated copy). Kernels in order.
pub fn manual_forward(
    ctx: &GpuContext,
    qkv: Qkv,
    (s, p, pd): (&Tensor, &Tensor, &Tensor),
    y: &Tensor,
    params: &SoftmaxParams,
) -> Result<Vec<Kernel>> {
    let batches = manual_batch("manual_attention_forward", &qkv, params)?;
    let (l, t) = (qkv.layout, params.t);
    let hs = l.head_size;
    let nt = MatmulOpts {
        trans_b: true,
        ..Default::default()
    };
    let plain = MatmulOpts::default();
    let mut kernels = Vec::new();
    for g in 0..l.group() {
        let at = group_layouts(&l, t, g);
        kernels.push(batched_matmul(
            ctx, qkv.q, at.q, qkv.k, at.k, s, at.scores, t, t, hs, batches, nt,
        )?);
    }
    kernels.push(causal_softmax_forward(ctx, s, p, pd, params)?);
    for g in 0..l.group() {
        let at = group_layouts(&l, t, g);
        kernels.push(batched_matmul(
            ctx, pd, at.scores, qkv.v, at.v, y, at.out, t, hs, t, batches, plain,
        )?);
    }
    Ok(kernels)
}

/// Backward of [`manual_forward`]: `dPd = dy vᵀ` (into `dpd`), `dv = Pdᵀ dy`, `dS =
/// softmax'(P, dropout'(dPd))` (into `ds`, which may be the forward's `s`), `dq = dS k`, `dk
/// = dSᵀ q`; the gradients land in `grads`, laid out as `qkv` (every element overwritten;
/// with grouped-query attention dk and dv add the group's query heads in order, rounding to
/// their storage after each). Kernels in order.
pub fn manual_backward(
    ctx: &GpuContext,
    qkv: Qkv,
    (p, pd): (&Tensor, &Tensor),
    dy: &Tensor,
    (dpd, ds): (&Tensor, &Tensor),
    grads: Qkv,
    params: &SoftmaxParams,
) -> Result<Vec<Kernel>> {
    const OP: &str = "manual_attention_backward";
    let batches = manual_batch(OP, &qkv, params)?;
    if grads.layout != qkv.layout {
        return Err(Error::shape(
            OP,
            "dq, dk and dv must sit where q, k and v do (one layout)".to_string(),
        ));
    }
    grads.check(OP, ["dq", "dk", "dv"], batches[0], params.t)?;
    let (l, t) = (qkv.layout, params.t);
    let hs = l.head_size;
    let opts = |trans_a, trans_b, accumulate| MatmulOpts {
        trans_a,
        trans_b,
        accumulate,
        ..Default::default()
    };
    let mut kernels = Vec::new();
    for g in 0..l.group() {
        let at = group_layouts(&l, t, g);
        let nt = opts(false, true, false);
        kernels.push(batched_matmul(
            ctx, dy, at.out, qkv.v, at.v, dpd, at.scores, t, t, hs, batches, nt,
        )?);
        let tn = opts(true, false, g > 0);
        kernels.push(batched_matmul(
            ctx, pd, at.scores, dy, at.out, grads.v, at.v, t, hs, t, batches, tn,
        )?);
    }
    kernels.push(causal_softmax_backward(ctx, p, dpd, ds, params)?);
    for g in 0..l.group() {
        let at = group_layouts(&l, t, g);
        let plain = opts(false, false, false);
        kernels.push(batched_matmul(
            ctx, ds, at.scores, qkv.k, at.k, grads.q, at.q, t, hs, t, batches, plain,
        )?);
        let tn = opts(true, false, g > 0);
        kernels.push(batched_matmul(
            ctx, ds, at.scores, qkv.q, at.q, grads.k, at.k, t, hs, t, batches, tn,
        )?);
    }
    Ok(kernels)
}
