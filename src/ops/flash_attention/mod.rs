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
//! order. The *coop* body ([`coop`]) runs the products on tensor cores (cooperative
//! matrices) for native f16 storage where they are used, with the same bindings and
//! [`Params`]; it differs from the SIMT bodies by reassociation and by rounding P and dS to
//! f16 on their way into a product.

mod coop;
mod coop_layout;

pub use coop::{
    BACKWARD_SHADER as COOP_BACKWARD_SHADER, DQ_SHADER as COOP_DQ_SHADER,
    FORWARD_SHADER as COOP_FORWARD_SHADER, FlashCoopConfig, MAX_HEAD_SIZE as COOP_MAX_HEAD_SIZE,
};

use super::dropout::{DropoutKey, DropoutState, state_or_placeholder};
use crate::dtype::Storage;
use crate::error::{Error, Result};
use crate::gpu::{Arg, Capabilities, GpuContext, Kernel, KernelDesc, grid_1d};
use crate::shader::{Grid, ShaderDecl};
use crate::tensor::Tensor;
use coop::CoopPass;

/// The forward kernel.
pub static FORWARD_SHADER: ShaderDecl = ShaderDecl {
    name: "flash_forward",
    source: include_str!("../../../shaders/flash_forward.wgsl"),
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
    source: include_str!("../../../shaders/flash_backward.wgsl"),
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
    /// By adapter and storage: [`FlashBody::Coop`] for native f16 where tensor cores are used
    /// (head sizes up to [`COOP_MAX_HEAD_SIZE`]), else [`FlashBody::Rowwise`] on CPU
    /// adapters and [`FlashBody::Tiled`] on GPUs.
    #[default]
    Auto,
    /// Key/value (or query) tiles through workgroup memory (GPUs).
    Tiled,
    /// Straight from the buffers, no workgroup memory or barriers (CPU adapters).
    Rowwise,
    /// The products on cooperative matrices (tensor cores), native f16 storage only.
    Coop,
}

impl FlashBody {
    /// The body `Auto` resolves to for tensors of these storages (lse and delta aside) and
    /// head size `hs`: on tensor cores exactly where the matmul's products would be.
    pub fn resolve(self, caps: &Capabilities, storages: &[Storage], hs: usize) -> FlashBody {
        self.resolve_within(caps, None, storages, hs)
    }

    /// [`FlashBody::resolve`] with the tensor-core body's configuration forced (None: the
    /// adapter's, [`FlashCoopConfig::for_adapter`]).
    pub fn resolve_within(
        self,
        caps: &Capabilities,
        config: Option<FlashCoopConfig>,
        storages: &[Storage],
        hs: usize,
    ) -> FlashBody {
        match self {
            FlashBody::Auto if coop::eligible(caps, config, storages, hs) => FlashBody::Coop,
            FlashBody::Auto => Self::simt(caps),
            other => other,
        }
    }

    /// The tensor-core body's blocks for head size `hs` on this adapter under `config`
    /// (None: the adapter's, what `info` reports): `blocks 64x64 forward, 32x64 dk/dv, 64x32
    /// dq` (query rows x keys), or None where it does not run.
    pub fn coop_blocks(
        caps: &Capabilities,
        config: Option<FlashCoopConfig>,
        hs: usize,
    ) -> Option<String> {
        coop::describe(caps, config, hs)
    }

    /// The SIMT body for this adapter (the delta kernel's, under every body).
    fn simt(caps: &Capabilities) -> FlashBody {
        if caps.cpu_adapter {
            FlashBody::Rowwise
        } else {
            FlashBody::Tiled
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            FlashBody::Auto => "auto",
            FlashBody::Tiled => "tiled",
            FlashBody::Rowwise => "rowwise",
            FlashBody::Coop => "coop",
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
    /// The tensor-core body's configuration (None: the adapter's); tests force small blocks.
    pub coop: Option<FlashCoopConfig>,
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
        /// ceil(T / BLOCK): workgroups per (batch, head)
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

/// A SIMT entry's specialisation: head size, tile, workgroup size and body.
fn simt_desc(
    shader: &'static ShaderDecl,
    entry: &'static str,
    hs: usize,
    tiled: bool,
) -> KernelDesc {
    let mut desc = KernelDesc::new(shader, entry);
    desc.consts = simt_consts(hs, tiled);
    desc
}

fn simt_consts(hs: usize, tiled: bool) -> Vec<(&'static str, String)> {
    vec![
        ("HS", format!("{hs}u")),
        ("TILE", format!("{}u", tile_rows(hs))),
        ("WG", format!("{WG}u")),
        ("BLOCK", format!("{WG}u")),
        ("TILED", tiled.to_string()),
    ]
}

/// One kernel: the uniform with `block` rows (or keys) per workgroup, one workgroup per
/// (batch · head, block). `args` are the tensors and the dropout state.
fn launch<'a>(
    ctx: &GpuContext,
    desc: &KernelDesc,
    uniform: Params,
    block: u32,
    args: Vec<(&'a str, Arg<'a>)>,
) -> Result<Kernel> {
    let blocks = uniform.t.div_ceil(block);
    let uniform = Params { blocks, ..uniform };
    let mut all = vec![("params", Arg::Uniform(bytemuck::bytes_of(&uniform)))];
    all.extend(args);
    let workgroups = uniform.batch_heads as usize * blocks as usize;
    ctx.kernel(desc, &all, grid_1d(workgroups, 1))
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
    let args = vec![
        ("qkv", qkv.arg()),
        ("y", y.arg()),
        ("lse", lse.arg()),
        ("dropout_state", Arg::Buffer(&state)),
    ];
    let (hs, storages) = (p.head_size(), [qkv.storage(), y.storage()]);
    match p.body.resolve_within(&ctx.caps, p.coop, &storages, hs) {
        FlashBody::Coop => {
            let layout = coop::layout(ctx, OP, CoopPass::Forward, p.coop, &storages, hs)?;
            let desc = coop::desc(&COOP_FORWARD_SHADER, "flash_coop_forward", &layout);
            launch(ctx, &desc, uniform, layout.block, args)
        }
        body => {
            let desc = simt_desc(
                &FORWARD_SHADER,
                "flash_forward",
                hs,
                body == FlashBody::Tiled,
            );
            launch(ctx, &desc, uniform, WG, args)
        }
    }
}

/// Backward: `dqkv` (every element overwritten) from the forward's `qkv`, `y` and `lse` and
/// the output gradient `dy`; `delta` (f32 `[B, nh, T]`) is workspace. Three kernels, in
/// order: delta (SIMT under every body), dk/dv, dq.
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
    let args = |with_y: bool| {
        let mut a = vec![
            ("qkv", qkv.arg()),
            ("lse", lse.arg()),
            ("dy", dy.arg()),
            ("delta", delta.arg()),
            ("dqkv", dqkv.arg()),
            ("dropout_state", Arg::Buffer(&state)),
        ];
        if with_y {
            a.push(("y", y.arg()));
        }
        a
    };
    let hs = p.head_size();
    let storages = [qkv.storage(), y.storage(), dy.storage(), dqkv.storage()];
    let body = p.body.resolve_within(&ctx.caps, p.coop, &storages, hs);
    let simt = |entry, body: FlashBody| {
        let desc = simt_desc(&BACKWARD_SHADER, entry, hs, body == FlashBody::Tiled);
        launch(ctx, &desc, uniform, WG, args(true))
    };
    if body != FlashBody::Coop {
        return [
            "flash_backward_delta",
            "flash_backward_dkv",
            "flash_backward_dq",
        ]
        .into_iter()
        .map(|entry| simt(entry, body))
        .collect();
    }
    let coop_kernel = |pass, shader, entry| {
        let layout = coop::layout(ctx, OP, pass, p.coop, &storages, hs)?;
        let desc = coop::desc(shader, entry, &layout);
        launch(ctx, &desc, uniform, layout.block, args(false))
    };
    Ok(vec![
        simt("flash_backward_delta", FlashBody::simt(&ctx.caps))?,
        coop_kernel(CoopPass::KeyGrads, &COOP_BACKWARD_SHADER, "flash_coop_dkv")?,
        coop_kernel(CoopPass::QueryGrads, &COOP_DQ_SHADER, "flash_coop_dq")?,
    ])
}

/// The specialisations the portability tests check for every storage (lse and delta f32):
/// both bodies at the head sizes of gpt-tiny (16), gpt-char (64) and an odd one (5).
fn specialisations() -> Vec<Vec<(&'static str, String)>> {
    let mut v = Vec::new();
    for hs in [5usize, 16, 64] {
        for tiled in [false, true] {
            v.push(simt_consts(hs, tiled));
        }
    }
    v
}
