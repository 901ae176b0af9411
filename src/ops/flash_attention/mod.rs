//! Fused causal self-attention (FlashAttention-2's shape): `shaders/flash_forward.wgsl` and
//! `shaders/flash_backward.wgsl`, with `shaders/include/flash_common.wgsl`.
//!
//! From q, k and v wherever they sit ([`Qkv`]: nanoGPT's packed projections `[B, T, 3C]`,
//! separate ones, grouped-query attention with fewer key/value heads and no repeated copy
//! of them), per head `y = dropout(softmax(q kᵀ / √hs, causal)) v` into `y` `[B, T, C]` and
//! the row log-sum-exp `lse` (f32 `[B, nh, T]`), without any `[B, nh, T, T]` buffer: keys and values
//! stream through in tiles, the softmax is online (f32), and the backward recomputes the
//! probabilities from q, k and `lse`. Attention dropout uses the unfused path's mask
//! ([`super::dropout::keep`] at element `(bh·T + i)·T + j`), so both paths drop the same
//! probabilities under every precision.
//!
//! Backward (FlashAttention-2's split): `delta = rowsum(dy ⊙ y)`, then one kernel with a
//! thread per key for dk and dv (summed over the query heads that share a key/value head, in
//! head order) and one with a thread per query for dq. Every gradient element has one writer
//! and a fixed summation order: no float atomics, the same bits run to run.
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
mod params;

pub use coop::{
    BACKWARD_SHADER as COOP_BACKWARD_SHADER, DQ_SHADER as COOP_DQ_SHADER,
    FORWARD_SHADER as COOP_FORWARD_SHADER, FlashCoopConfig, MAX_HEAD_SIZE as COOP_MAX_HEAD_SIZE,
};

use super::dropout::state_or_placeholder;
pub use super::qkv::{HeadRows, Qkv, QkvLayout};
use crate::error::Result;
use crate::gpu::{Arg, GpuContext, Kernel, KernelDesc, grid_1d};
use crate::shader::{Grid, ShaderDecl};
use crate::tensor::Tensor;
use coop::CoopPass;
pub use params::{FlashBody, FlashParams, MAX_HEAD_SIZE};
use params::{Params, WG, plan, shared_kv_const};

/// The forward kernel.
pub static FORWARD_SHADER: ShaderDecl = ShaderDecl {
    name: "flash_forward",
    source: include_str!("../../../shaders/flash_forward.wgsl"),
    structs: &[Params::WGSL],
    consts: &[],
    variants: |shader| {
        Grid::new()
            .each(&["q", "k", "v", "y"])
            .variants_with(shader, |_| specialisations(false))
    },
};

/// The backward kernels (delta, dk/dv, dq).
pub static BACKWARD_SHADER: ShaderDecl = ShaderDecl {
    name: "flash_backward",
    source: include_str!("../../../shaders/flash_backward.wgsl"),
    structs: &[Params::WGSL],
    consts: &[],
    variants: |shader| {
        Grid::new()
            .each(&["q", "k", "v", "y", "dy", "dq", "dk", "dv"])
            .variants_with(shader, |_| specialisations(true))
    },
};

/// Keys (or query rows) per tile for head size `hs`: a tile of k and one of v (or q and dy)
/// in f32 take at most 8 KiB of workgroup memory (WebGPU guarantees 16 KiB).
pub fn tile_rows(hs: usize) -> usize {
    (1024 / hs.max(1)).clamp(1, WG as usize)
}

/// A SIMT entry's specialisation: head size, tile, workgroup size and body (and, for the
/// backward, whether dk and dv are one tensor).
fn simt_desc(
    shader: &'static ShaderDecl,
    entry: &'static str,
    hs: usize,
    tiled: bool,
    shared_kv: Option<bool>,
) -> KernelDesc {
    let mut desc = KernelDesc::new(shader, entry);
    desc.consts = simt_consts(hs, tiled);
    desc.consts.extend(shared_kv.map(shared_kv_const));
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
/// (`heads` of the batch · block): query heads B·nh, or key/value heads B·nkv for dk and
/// dv. `args` are the tensors and the dropout state.
fn launch<'a>(
    ctx: &GpuContext,
    desc: &KernelDesc,
    (uniform, heads): (Params, u32),
    block: u32,
    args: Vec<(&'a str, Arg<'a>)>,
) -> Result<Kernel> {
    let mut uniform = uniform;
    uniform.blocks = uniform.t.div_ceil(block);
    let blocks = uniform.blocks;
    let mut all = vec![("params", Arg::Uniform(bytemuck::bytes_of(&uniform)))];
    all.extend(args);
    let workgroups = heads as usize * blocks as usize;
    ctx.kernel(desc, &all, grid_1d(workgroups, 1))
}

/// Forward of nanoGPT's packed projections `qkv` (`[B, T, (nh + 2·nkv)·hs]`,
/// [`QkvLayout::packed`]): [`forward_qkv`].
pub fn forward(
    ctx: &GpuContext,
    qkv: &Tensor,
    y: &Tensor,
    lse: &Tensor,
    p: &FlashParams,
) -> Result<Kernel> {
    let packed = Qkv::packed(qkv, p.heads, p.kv_heads(), p.head_size());
    forward_qkv(ctx, packed, y, lse, p)
}

/// Forward: `y` (`[B, T, C]`) and `lse` (f32 `[B, nh, T]`) from q, k and v wherever they
/// sit, in one float storage.
pub fn forward_qkv(
    ctx: &GpuContext,
    qkv: Qkv,
    y: &Tensor,
    lse: &Tensor,
    p: &FlashParams,
) -> Result<Kernel> {
    const OP: &str = "flash_attention_forward";
    let (btc, rows) = (p.batch * p.t * p.width, p.batch * p.heads * p.t);
    let uniform = plan(OP, p, (&qkv, None), &[("y", y, btc), ("lse", lse, rows)])?;
    let state = state_or_placeholder(ctx, p.dropout, p.dropout_state);
    let args = vec![
        ("q", qkv.q.arg()),
        ("k", qkv.k.arg()),
        ("v", qkv.v.arg()),
        ("y", y.arg()),
        ("lse", lse.arg()),
        ("dropout_state", Arg::Buffer(&state)),
    ];
    let (hs, storages) = (p.head_size(), [qkv.q.storage(), y.storage()]);
    let launched = (uniform, uniform.batch_heads);
    match p.body.resolve_within(&ctx.caps, p.coop, &storages, hs) {
        FlashBody::Coop => {
            let layout = coop::layout(ctx, OP, CoopPass::Forward, p.coop, &storages, hs)?;
            let desc = coop::desc(&COOP_FORWARD_SHADER, "flash_coop_forward", &layout, None);
            launch(ctx, &desc, launched, layout.block, args)
        }
        body => {
            let tiled = body == FlashBody::Tiled;
            let desc = simt_desc(&FORWARD_SHADER, "flash_forward", hs, tiled, None);
            launch(ctx, &desc, launched, WG, args)
        }
    }
}

/// Backward of nanoGPT's packed projections: [`backward_qkv`] with `dqkv` laid out as `qkv`.
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
    let packed = Qkv::packed(qkv, p.heads, p.kv_heads(), p.head_size());
    let grads = packed.like((dqkv, dqkv, dqkv));
    backward_qkv(ctx, packed, y, lse, (dy, delta), grads, p)
}

/// Backward: `grads` (dq, dk, dv where q, k and v sit; every element overwritten) from the
/// forward's q, k, v, `y` and `lse` and the output gradient `dy`; `delta` (f32 `[B, nh, T]`)
/// is workspace. Three kernels, in order: delta (SIMT under every body), dk/dv (one writer
/// per element of a key/value head, its group's query heads summed in order), dq.
pub fn backward_qkv(
    ctx: &GpuContext,
    qkv: Qkv,
    y: &Tensor,
    lse: &Tensor,
    (dy, delta): (&Tensor, &Tensor),
    grads: Qkv,
    p: &FlashParams,
) -> Result<Vec<Kernel>> {
    const OP: &str = "flash_attention_backward";
    let (btc, rows) = (p.batch * p.t * p.width, p.batch * p.heads * p.t);
    let uniform = plan(
        OP,
        p,
        (&qkv, Some(&grads)),
        &[
            ("y", y, btc),
            ("lse", lse, rows),
            ("dy", dy, btc),
            ("delta", delta, rows),
        ],
    )?;
    let shared = grads.shared_kv();
    let state = state_or_placeholder(ctx, p.dropout, p.dropout_state);
    // What a kernel binds: all of these but `leave_out` (a shader rejects a tensor it does
    // not declare).
    let args = |leave_out: &[&str]| {
        let all = vec![
            ("q", qkv.q.arg()),
            ("k", qkv.k.arg()),
            ("v", qkv.v.arg()),
            ("y", y.arg()),
            ("lse", lse.arg()),
            ("dy", dy.arg()),
            ("delta", delta.arg()),
            ("dq", grads.q.arg()),
            ("dk", grads.k.arg()),
            ("dv", grads.v.arg()),
            ("dropout_state", Arg::Buffer(&state)),
        ];
        all.into_iter()
            .filter(|(n, _)| !leave_out.contains(n))
            .collect::<Vec<_>>()
    };
    let hs = p.head_size();
    let storages = [
        qkv.q.storage(),
        y.storage(),
        dy.storage(),
        grads.q.storage(),
    ];
    let body = p.body.resolve_within(&ctx.caps, p.coop, &storages, hs);
    // Query heads, or key/value heads for dk and dv, of the batch.
    let query_heads = (uniform, uniform.batch_heads);
    let kv_heads = (uniform, (p.batch * p.kv_heads()) as u32);
    let simt = |entry, body: FlashBody, heads| {
        let tiled = body == FlashBody::Tiled;
        let desc = simt_desc(&BACKWARD_SHADER, entry, hs, tiled, Some(shared));
        launch(ctx, &desc, heads, WG, args(&[]))
    };
    if body != FlashBody::Coop {
        return Ok(vec![
            simt("flash_backward_delta", body, query_heads)?,
            simt("flash_backward_dkv", body, kv_heads)?,
            simt("flash_backward_dq", body, query_heads)?,
        ]);
    }
    let coop_kernel = |pass, shader, entry, heads, shared_kv, leave_out| {
        let layout = coop::layout(ctx, OP, pass, p.coop, &storages, hs)?;
        let desc = coop::desc(shader, entry, &layout, shared_kv);
        launch(ctx, &desc, heads, layout.block, args(leave_out))
    };
    Ok(vec![
        simt(
            "flash_backward_delta",
            FlashBody::simt(&ctx.caps),
            query_heads,
        )?,
        coop_kernel(
            CoopPass::KeyGrads,
            &COOP_BACKWARD_SHADER,
            "flash_coop_dkv",
            kv_heads,
            Some(shared),
            &["y", "dq"],
        )?,
        coop_kernel(
            CoopPass::QueryGrads,
            &COOP_DQ_SHADER,
            "flash_coop_dq",
            query_heads,
            None,
            &["y", "dk", "dv"],
        )?,
    ])
}

/// The specialisations the portability tests check for every storage (lse and delta f32):
/// both bodies at the head sizes of gpt-tiny (16), gpt-char (64) and an odd one (5), and for
/// the backward with dk and dv one tensor or two.
fn specialisations(backward: bool) -> Vec<Vec<(&'static str, String)>> {
    let shared: &[Option<bool>] = if backward {
        &[Some(true), Some(false)]
    } else {
        &[None]
    };
    let mut v = Vec::new();
    for hs in [5usize, 16, 64] {
        for tiled in [false, true] {
            for s in shared {
                let mut consts = simt_consts(hs, tiled);
                consts.extend(s.map(shared_kv_const));
                v.push(consts);
            }
        }
    }
    v
}
