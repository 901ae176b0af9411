//! Fused causal self-attention (FlashAttention-2's shape): `shaders/flash_forward.wgsl` and
//! `shaders/flash_backward.wgsl`, with `shaders/include/flash_common.wgsl`.
//!
//! From nanoGPT's packed projections `qkv` `[B, T, 3C]`, per head
//! `y = dropout(softmax(q kᵀ / √hs, causal)) v` into `y` `[B, T, C]` and the row
//! log-sum-exp `lse` (f32 `[B, nh, T]`), without any `[B, nh, T, T]` buffer: keys and values
//! stream through in tiles, the softmax is online (f32), and the backward recomputes the
//! probabilities from q, k and `lse`. Attention dropout uses the unfused path's mask
//! ([`super::dropout::keep`] at element `(bh·T + i)·T + j`), so both paths drop the same
//! probabilities under every precision.
//!
//! Backward (FlashAttention-2's split): `delta = rowsum(dy ⊙ y)`, then one kernel with a
//! thread per key for dk and dv and one with a thread per query for dq. Every gradient
//! element has one writer and a fixed summation order: no float atomics, the same bits run
//! to run.
//!
//! Bodies ([`FlashBody`]): the SIMT kernels run *tiled* (tiles through workgroup memory, for
//! GPUs) or *rowwise* (every thread reads the buffers directly, no barriers: on a CPU
//! adapter each barrier is a context switch). Both do the same arithmetic in the same
//! order. A cooperative-matrix body (tensor cores) slots in as a third [`FlashBody`] with
//! its own shader over the same bindings and [`Params`].

use super::dropout::{DropoutKey, DropoutState, state_or_placeholder};
use crate::error::{Error, Result};
use crate::gpu::{Arg, GpuContext, Kernel, KernelDesc, grid_1d};
use crate::shader::{Grid, ShaderDecl};
use crate::tensor::{Storage, Tensor};

/// The forward kernel.
pub static FORWARD_SHADER: ShaderDecl = ShaderDecl {
    name: "flash_forward",
    source: include_str!("../../shaders/flash_forward.wgsl"),
    structs: &[Params::WGSL],
    variants: |shader| {
        Grid::new()
            .each(&["qkv", "y"])
            .variants_with(shader, |_| specialisations())
    },
};

/// The backward kernels (delta, dk/dv, dq).
pub static BACKWARD_SHADER: ShaderDecl = ShaderDecl {
    name: "flash_backward",
    source: include_str!("../../shaders/flash_backward.wgsl"),
    structs: &[Params::WGSL],
    variants: |shader| {
        Grid::new()
            .each(&["qkv", "y", "dy", "dqkv"])
            .variants_with(shader, |_| specialisations())
    },
};

const FLAG_DROPOUT: u32 = 1;
/// Threads per workgroup: query rows (forward, dq) or keys (dk, dv) per workgroup.
const WG: u32 = 64;
/// The largest head size: each thread keeps up to four head-sized rows in registers.
pub const MAX_HEAD_SIZE: usize = 256;

/// Which kernel body runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FlashBody {
    /// By adapter: [`FlashBody::Rowwise`] on CPU adapters, else [`FlashBody::Tiled`].
    #[default]
    Auto,
    /// Key/value (or query) tiles through workgroup memory (GPUs).
    Tiled,
    /// Straight from the buffers, no workgroup memory or barriers (CPU adapters).
    Rowwise,
}

impl FlashBody {
    pub fn resolve(self, ctx: &GpuContext) -> FlashBody {
        match self {
            FlashBody::Auto if ctx.caps.cpu_adapter => FlashBody::Rowwise,
            FlashBody::Auto => FlashBody::Tiled,
            other => other,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            FlashBody::Auto => "auto",
            FlashBody::Tiled => "tiled",
            FlashBody::Rowwise => "rowwise",
        }
    }
}

/// Keys (or query rows) per tile for head size `hs`: a tile of k and one of v (or q and dy)
/// in f32 take at most 8 KiB of workgroup memory (WebGPU guarantees 16 KiB).
pub fn tile_rows(hs: usize) -> usize {
    (1024 / hs.max(1)).clamp(1, WG as usize)
}

/// Sizes and options of one fused attention.
#[derive(Clone, Copy, Debug, Default)]
pub struct FlashParams<'a> {
    pub batch: usize,
    pub heads: usize,
    /// Sequence length T.
    pub t: usize,
    /// C: embedding width, heads × head size.
    pub width: usize,
    /// Logit scale, 1 / sqrt(hs).
    pub scale: f32,
    /// Attention dropout (None or p = 0: none). Needs `dropout_state`.
    pub dropout: Option<DropoutKey>,
    /// The state buffer the dropout kernels read (seed, counter, training flag).
    pub dropout_state: Option<&'a DropoutState>,
    pub body: FlashBody,
}

impl FlashParams<'_> {
    pub fn head_size(&self) -> usize {
        self.width / self.heads.max(1)
    }
}

crate::wgsl_struct! {
    struct Params {
        /// B * nh
        batch_heads: u32,
        /// nh
        heads: u32,
        /// T
        t: u32,
        /// C = nh * HS
        width: u32,
        /// 1 / sqrt(HS)
        scale: f32,
        /// FLAG_DROPOUT
        flags: u32,
        /// dropout: ceil(p * 2^24)
        threshold: u32,
        /// dropout: layer id keying the mask
        layer: u32,
        /// dropout: 1 / (1 - p)
        drop_scale: f32,
        /// ceil(T / WG): workgroups per (batch, head)
        blocks: u32,
        _pad0: u32,
        _pad1: u32,
    }
}

fn u32_of(op: &'static str, what: &str, n: Option<usize>) -> Result<u32> {
    n.filter(|&n| n <= u32::MAX as usize)
        .map(|n| n as u32)
        .ok_or_else(|| Error::shape(op, format!("{what} exceeds 2^32 elements")))
}

/// Check sizes, storages and the dropout setting; the uniform parameters.
fn plan(op: &'static str, p: &FlashParams, tensors: &[(&str, &Tensor, usize)]) -> Result<Params> {
    let (b, nh, t, c) = (p.batch, p.heads, p.t, p.width);
    if b == 0 || nh == 0 || t == 0 || c == 0 || !c.is_multiple_of(nh) {
        return Err(Error::shape(
            op,
            format!(
                "batch {b}, heads {nh}, T {t}, width {c}: all positive, width a multiple of heads"
            ),
        ));
    }
    let hs = c / nh;
    if hs > MAX_HEAD_SIZE {
        return Err(Error::shape(
            op,
            format!(
                "head size {hs} exceeds the fused kernel's {MAX_HEAD_SIZE} (use the unfused attention)"
            ),
        ));
    }
    u32_of(
        op,
        "B · T · 3C",
        b.checked_mul(t).and_then(|n| n.checked_mul(3 * c)),
    )?;
    if p.dropout.is_some() {
        // The mask's element index (bh·T + i)·T + j is a u32, as the unfused path's.
        let n = (b * nh).checked_mul(t).and_then(|n| n.checked_mul(t));
        u32_of(op, "attention dropout over B · nh · T · T", n)?;
    }
    for (name, tensor, numel) in tensors {
        if tensor.numel() != *numel {
            return Err(Error::shape(
                op,
                format!("{name} {:?} must hold {numel} elements", tensor.shape()),
            ));
        }
    }
    for name in ["lse", "delta"] {
        if let Some((_, tensor, _)) = tensors.iter().find(|(n, _, _)| *n == name)
            && tensor.storage() != Storage::F32
        {
            return Err(Error::shape(
                op,
                format!("{name} must be f32, got {}", tensor.storage().name()),
            ));
        }
    }
    let storages: Vec<Storage> = tensors.iter().map(|(_, t, _)| t.storage()).collect();
    if storages.contains(&Storage::F16) && storages.contains(&Storage::F16Packed) {
        return Err(Error::shape(
            op,
            format!("mixes native and packed f16 storages ({storages:?}); one context uses one"),
        ));
    }
    let mut u = Params {
        batch_heads: (b * nh) as u32,
        heads: nh as u32,
        t: t as u32,
        width: c as u32,
        scale: p.scale,
        flags: 0,
        threshold: 0,
        layer: 0,
        drop_scale: 1.0,
        blocks: t.div_ceil(WG as usize) as u32,
        _pad0: 0,
        _pad1: 0,
    };
    if let Some(key) = p.dropout {
        key.check(op)?;
        if p.dropout_state.is_none() {
            return Err(Error::shape(
                op,
                "attention dropout needs FlashParams::dropout_state (the DropoutState buffer)"
                    .to_string(),
            ));
        }
        u.flags |= FLAG_DROPOUT;
        u.threshold = key.threshold();
        u.layer = key.layer;
        u.drop_scale = key.scale();
    }
    Ok(u)
}

/// The entry's specialisation: head size, tile, workgroup size and body.
fn desc(
    shader: &'static ShaderDecl,
    entry: &'static str,
    ctx: &GpuContext,
    p: &FlashParams,
) -> KernelDesc {
    let hs = p.head_size();
    KernelDesc::new(shader, entry)
        .with_const("HS", format!("{hs}u"))
        .with_const("TILE", format!("{}u", tile_rows(hs)))
        .with_const("WG", format!("{WG}u"))
        .with_const("TILED", p.body.resolve(ctx) == FlashBody::Tiled)
}

/// Workgroups: one per (batch · head, block of WG rows or keys).
fn grid(p: &FlashParams) -> [u32; 3] {
    grid_1d(p.batch * p.heads * p.t.div_ceil(WG as usize), 1)
}

/// Forward: `y` (any float storage) and `lse` (f32) from `qkv`.
pub fn forward(
    ctx: &GpuContext,
    qkv: &Tensor,
    y: &Tensor,
    lse: &Tensor,
    p: &FlashParams,
) -> Result<Kernel> {
    const OP: &str = "flash_attention_forward";
    let (btc, rows) = (p.batch * p.t * p.width, p.batch * p.heads * p.t);
    let uniform = plan(
        OP,
        p,
        &[("qkv", qkv, 3 * btc), ("y", y, btc), ("lse", lse, rows)],
    )?;
    let state = state_or_placeholder(ctx, p.dropout, p.dropout_state);
    ctx.kernel(
        &desc(&FORWARD_SHADER, "flash_forward", ctx, p),
        &[
            ("params", Arg::Uniform(bytemuck::bytes_of(&uniform))),
            ("qkv", qkv.arg()),
            ("y", y.arg()),
            ("lse", lse.arg()),
            ("dropout_state", Arg::Buffer(&state)),
        ],
        grid(p),
    )
}

/// Backward: `dqkv` (every element overwritten) from the forward's `qkv`, `y` and `lse` and
/// the output gradient `dy`; `delta` (f32 `[B, nh, T]`) is workspace. Three kernels, in
/// order: delta, dk/dv, dq.
#[allow(clippy::too_many_arguments)]
pub fn backward(
    ctx: &GpuContext,
    qkv: &Tensor,
    y: &Tensor,
    lse: &Tensor,
    dy: &Tensor,
    delta: &Tensor,
    dqkv: &Tensor,
    p: &FlashParams,
) -> Result<Vec<Kernel>> {
    const OP: &str = "flash_attention_backward";
    let (btc, rows) = (p.batch * p.t * p.width, p.batch * p.heads * p.t);
    let uniform = plan(
        OP,
        p,
        &[
            ("qkv", qkv, 3 * btc),
            ("y", y, btc),
            ("lse", lse, rows),
            ("dy", dy, btc),
            ("delta", delta, rows),
            ("dqkv", dqkv, 3 * btc),
        ],
    )?;
    let state = state_or_placeholder(ctx, p.dropout, p.dropout_state);
    let args = [
        ("params", Arg::Uniform(bytemuck::bytes_of(&uniform))),
        ("qkv", qkv.arg()),
        ("y", y.arg()),
        ("lse", lse.arg()),
        ("dy", dy.arg()),
        ("delta", delta.arg()),
        ("dqkv", dqkv.arg()),
        ("dropout_state", Arg::Buffer(&state)),
    ];
    [
        "flash_backward_delta",
        "flash_backward_dkv",
        "flash_backward_dq",
    ]
    .into_iter()
    .map(|entry| ctx.kernel(&desc(&BACKWARD_SHADER, entry, ctx, p), &args, grid(p)))
    .collect()
}

/// The specialisations the portability tests check for every storage (lse and delta f32):
/// both bodies at the head sizes of gpt-tiny (16), gpt-char (64) and an odd one (5).
fn specialisations() -> Vec<Vec<(&'static str, String)>> {
    let mut v = Vec::new();
    for hs in [5usize, 16, 64] {
        for tiled in [false, true] {
            v.push(vec![
                ("HS", format!("{hs}u")),
                ("TILE", format!("{}u", tile_rows(hs))),
                ("WG", format!("{WG}u")),
                ("TILED", tiled.to_string()),
            ]);
        }
    }
    v
}
