//! Token + position embedding (`shaders/embedding.wgsl`), nanoGPT's
//! `x = wte(idx) + wpe(pos)`, forward and backward.
//!
//! Embedding is on no autocast list, so it runs in the weight's dtype (f32 master weights
//! under AMP); every tensor may have any storage anyway. Tokens are u32 in a raw buffer.
//!
//! The backward is a deterministic scatter-add (no float atomics, the same bits every run),
//! built on a stable counting sort of the positions by token, all on the GPU. With N = B·T
//! positions, V tokens, C columns, and the positions cut into `chunks = ⌈N / 256⌉` chunks:
//!
//! 1. `embedding_chunk_counts` — thread per chunk: zero its V counters, count its 256 positions.
//!    Work O(chunks·V + N), span O(V + 256).
//! 2. `embedding_chunk_scan` — thread per token: exclusive scan of its counts over the chunks
//!    (chunk order); the token's total goes to `offsets[v]`. Work O(chunks·V), span O(chunks).
//! 3. `embedding_offsets` — one workgroup: exclusive prefix sum of the totals over the
//!    vocabulary (`offsets[V]` = valid positions). Work O(V), span O(V/256 + log 256).
//! 4. `embedding_fill` — thread per chunk: each position, in increasing order, to its slot of
//!    `order` (token segment start + earlier chunks + earlier in this chunk). Work O(N),
//!    span O(256). Within a token's segment positions are increasing.
//! 5. `embedding_wte_grad` — thread per (v, c): `dwte[v, c] += Σ dy[i, c]` over the token's
//!    positions in increasing order. Work O(N·C + V·C), span O(max occurrences of a token).
//! 6. `embedding_wpe_grad` — thread per (t, c): `dwpe[t, c] += Σ_b dy[b, t, c]` in batch order.
//!    Work O(N·C), span O(B).
//!
//! Scratch (`chunks·V + V + 1 + N` u32) is allocated once when the backward is planned.
//! Tokens ≥ V are never used as an index: the forward writes NaN in their rows of `y` (so the
//! loss shows them, as cross-entropy does with a bad label) and the backward skips them.

use std::sync::Arc;

use super::check_f32;
use crate::error::{Error, Result};
use crate::gpu::{Arg, KernelDesc, grid_1d};
use crate::gpu::{GpuBuffer, GpuContext, Kernel};
use crate::shader::{ShaderDecl, each_like_or_f32};
use crate::tensor::Tensor;

pub static SHADER: ShaderDecl = ShaderDecl {
    name: "embedding",
    source: include_str!("../../shaders/embedding.wgsl"),
    structs: &[Params::WGSL],
    consts: &[],
    // Every storage combination these kernels may run with: `y` and `dy` in any storage, with
    // the tables (`wte`, `wpe`) in the same storage or f32; gradients f32.
    variants: |shader| each_like_or_f32(shader, &["y", "dy"], &["wte", "wpe"]),
};
const WG: u32 = 256;
/// Positions per chunk of the counting sort.
const CHUNK: usize = 256;

/// Shapes of one call: (V, C) from `wte`, checked against `wpe`, `tokens` and `batch·t` rows.
fn check_shapes(
    op: &'static str,
    tokens: &GpuBuffer,
    wte: &Tensor,
    wpe: Option<&Tensor>,
    out_shape: &[usize],
    out_name: &str,
    (batch, t): (usize, usize),
) -> Result<(usize, usize)> {
    let &[vocab, cols] = wte.shape() else {
        return Err(Error::shape(
            op,
            format!("wte must be [V, C], not {:?}", wte.shape()),
        ));
    };
    if cols == 0 || vocab == 0 {
        return Err(Error::shape(op, format!("wte {:?} is empty", wte.shape())));
    }
    let n = batch * t;
    if let Some(wpe) = wpe {
        match *wpe.shape() {
            [t_max, c] if c == cols && t_max >= t => {}
            _ => {
                return Err(Error::shape(
                    op,
                    format!(
                        "wpe {:?} must be [T_max, {cols}] with T_max >= T = {t}",
                        wpe.shape()
                    ),
                ));
            }
        }
    }
    let out_numel: usize = out_shape.iter().product();
    if out_numel != n * cols || out_shape.last() != Some(&cols) {
        return Err(Error::shape(
            op,
            format!(
                "{out_name} {out_shape:?} must be [B, T, C] = [{batch}, {t}, {cols}] (or [B·T, C])"
            ),
        ));
    }
    if u32::try_from(n * cols).is_err() || u32::try_from(vocab * cols).is_err() {
        return Err(Error::shape(
            op,
            format!("{n} positions × {cols} or {vocab} tokens × {cols} is over 2^32"),
        ));
    }
    if tokens.size() < 4 * n as u64 {
        return Err(Error::shape(
            op,
            format!(
                "tokens buffer holds {} bytes, fewer than B·T = {n} u32 tokens",
                tokens.size()
            ),
        ));
    }
    Ok((vocab, cols))
}

crate::wgsl_struct! {
    struct Params {
        /// positions: B * T
        n: u32,
        /// sequence length T
        t: u32,
        /// embedding width C
        cols: u32,
        /// V (rows of wte)
        vocab: u32,
        has_wpe: u32,
        /// positions per chunk of the counting sort
        chunk: u32,
        /// ceil(n / chunk)
        chunks: u32,
        /// B
        batch: u32,
    }
}

/// `y[b, t, :] = wte[tokens[b·T + t], :] + wpe[t, :]`. `tokens`: u32 `[B·T]` in a raw buffer;
/// `wte` `[V, C]`, `wpe` `[T_max, C]` (rows `0..T` used; `None`: no position term); `y`
/// `[B, T, C]` (or `[B·T, C]`), any storage. A token ≥ V makes its row of `y` NaN (never an
/// out-of-bounds read). One kernel.
pub fn embedding_forward(
    ctx: &GpuContext,
    tokens: &Arc<GpuBuffer>,
    wte: &Tensor,
    wpe: Option<&Tensor>,
    y: &Tensor,
    batch: usize,
    t: usize,
) -> Result<Kernel> {
    let op = "embedding_forward";
    let (vocab, cols) = check_shapes(op, tokens, wte, wpe, y.shape(), "y", (batch, t))?;
    let n = batch * t;
    let params = Params {
        n: n as u32,
        t: t as u32,
        cols: cols as u32,
        vocab: vocab as u32,
        has_wpe: wpe.is_some() as u32,
        batch: batch as u32,
        ..Default::default()
    };
    let pairs = (n * cols).div_ceil(2);
    ctx.kernel(
        &KernelDesc::new(&SHADER, "embedding_forward"),
        &[
            ("params", Arg::Uniform(bytemuck::bytes_of(&params))),
            ("tokens", Arg::Buffer(tokens)),
            ("wte", wte.arg()),
            // Without a position table the shader never reads this binding; `wte` fills it.
            ("wpe", wpe.unwrap_or(wte).arg()),
            ("y", y.arg()),
        ],
        if pairs == 0 {
            [0, 0, 0]
        } else {
            grid_1d(pairs, WG)
        },
    )
}

/// Backward of [`embedding_forward`]: `dwte[v, :] += Σ_{i: tokens[i] = v} dy[i, :]` and
/// `dwpe[t, :] += Σ_b dy[b, t, :]` (f32, accumulated; rows of tokens absent from the batch and
/// rows `T..T_max` of `dwpe` are left untouched bit for bit). `dy`: `[B, T, C]` (or
/// `[B·T, C]`), any storage. Deterministic: see the module docs for the algorithm. Returns
/// the kernels in order (six, or five without `dwpe`; none when `B·T = 0`).
pub fn embedding_backward(
    ctx: &GpuContext,
    tokens: &Arc<GpuBuffer>,
    dy: &Tensor,
    dwte: &Tensor,
    dwpe: Option<&Tensor>,
    batch: usize,
    t: usize,
) -> Result<Vec<Kernel>> {
    let op = "embedding_backward";
    let (vocab, cols) = check_shapes(op, tokens, dwte, dwpe, dy.shape(), "dy", (batch, t))?;
    check_f32(op, "dwte", dwte)?;
    if let Some(d) = dwpe {
        check_f32(op, "dwpe", d)?;
    }
    let n = batch * t;
    if n == 0 {
        return Ok(Vec::new());
    }
    let chunks = n.div_ceil(CHUNK);
    // The sort's scratch: counts [chunks, V], offsets [V + 1], order [n] (shaders/embedding.wgsl).
    let scratch_words = chunks * vocab + vocab + 1 + n;
    if u32::try_from(scratch_words).is_err() {
        return Err(Error::shape(
            op,
            format!(
                "{chunks} chunks × {vocab} tokens of counters (+ offsets and order) is over 2^32"
            ),
        ));
    }
    let params = Params {
        n: n as u32,
        t: t as u32,
        cols: cols as u32,
        vocab: vocab as u32,
        has_wpe: dwpe.is_some() as u32,
        chunk: CHUNK as u32,
        chunks: chunks as u32,
        batch: batch as u32,
    };
    let uniform = bytemuck::bytes_of(&params);
    let scratch = ctx.alloc_storage("embedding sort scratch", 4 * scratch_words as u64);
    let mut kernels = Vec::new();
    let base_args = [
        ("params", Arg::Uniform(uniform)),
        ("tokens", Arg::Buffer(tokens)),
        ("sort_scratch", Arg::Buffer(&scratch)),
    ];
    kernels.push(ctx.kernel(
        &KernelDesc::new(&SHADER, "embedding_chunk_counts"),
        &base_args,
        grid_1d(chunks, WG),
    )?);
    kernels.push(ctx.kernel(
        &KernelDesc::new(&SHADER, "embedding_chunk_scan"),
        &base_args,
        grid_1d(vocab, WG),
    )?);
    kernels.push(ctx.kernel(
        &KernelDesc::new(&SHADER, "embedding_offsets"),
        &base_args,
        [1, 1, 1],
    )?);
    kernels.push(ctx.kernel(
        &KernelDesc::new(&SHADER, "embedding_fill"),
        &base_args,
        grid_1d(chunks, WG),
    )?);
    kernels.push(ctx.kernel(
        &KernelDesc::new(&SHADER, "embedding_wte_grad"),
        &[
            ("params", Arg::Uniform(uniform)),
            ("sort_scratch", Arg::Buffer(&scratch)),
            ("dy", dy.arg()),
            ("dwte", dwte.arg()),
        ],
        grid_1d(vocab * cols, WG),
    )?);
    if let Some(dwpe) = dwpe {
        kernels.push(ctx.kernel(
            &KernelDesc::new(&SHADER, "embedding_wpe_grad"),
            &[
                ("params", Arg::Uniform(uniform)),
                ("dy", dy.arg()),
                ("dwpe", dwpe.arg()),
            ],
            grid_1d(t * cols, WG),
        )?);
    }
    Ok(kernels)
}
