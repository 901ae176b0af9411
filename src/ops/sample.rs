//! Next-token sampling on the GPU (`shaders/sample.wgsl`) for text generation: one dispatch
//! per token, so generating N tokens is one submission with no host round trip per token (the
//! caller records the model forward on the context between draws, in the same command buffer).
//!
//! # The distribution
//! Draw `i` reads row `len − 1` of `logits [block, V]` (any storage, as f32), with
//! `len = state[0]` (clamped into `1..=block`) and `i = state[1]`, and computes in f32:
//! - `z_j = logit_j / temperature` (temperature at least [`MIN_TEMPERATURE`]);
//! - top-k (nanoGPT/PyTorch semantics): the threshold is the k-th largest `z` counted with
//!   multiplicity; every `z_j` below it is dropped and **every value equal to it is kept**, so
//!   ties at the threshold can keep more than k entries. `k ≥ V` (or `None`) keeps all;
//! - `w_j = exp(z_j − m)` for kept finite `z_j`, `m` the largest of them; 0 otherwise (NaN and
//!   ±inf logits are never sampled; NaN ranks below everything for the top-k);
//! - the token is the smallest `j` with `C_j > u · W`, where `C_j` is the cumulative weight in
//!   index order and `W` the total (see below for the exact summation order), and
//!   `u = uniform(seed, i) ∈ [0, 1)` with 24 random bits from a counter-based hash of
//!   `(seed, i)`. So `P(j) = w_j / W` up to f32 rounding and the 2⁻²⁴ grid of `u`; a seed
//!   reproduces the text. If no `j` qualifies (rounding put `u·W` at `W`) the token is the
//!   last `j` with `w_j > 0`; if every weight is 0 (no finite value kept) it is the first
//!   index of the largest `z` (NaN lowest).
//!
//! # Algorithms (one workgroup of 256 threads; thread `l` owns indices `[l·p, (l+1)·p)`,
//! `p = ⌈V/256⌉`)
//! - top-k threshold: bisection on order-preserving u32 keys of `z`, from the top bit down:
//!   the largest key `K` with `#{j : key_j ≥ K} ≥ k` (32 rounds of an exact integer count).
//!   O(32·V) work, O(32·p) span; skipped when `k ≥ V`.
//! - max and argmax: integer atomic max/min on the keys (exact, order-free).
//! - cumulative sums: each thread sums its block sequentially; the 256 block sums go through a
//!   Hillis–Steele inclusive scan (`s_l ← s_{l−d} + s_l` for `d = 1, 2, …, 128`); `W` is the last
//!   scan value; thread `l` starts from `s_{l−1}` (0 for `l = 0`) and adds its weights in
//!   order. [`sample_reference`] repeats exactly these additions.
//! - context update: when `len < block` the token goes to `context[len]` and `len += 1`; when
//!   full, the workgroup shifts the window left by one and writes the token at `block − 1`.
//!   The token also goes to `out[state[1]]` (skipped past the end of `out`), then
//!   `state[1] += 1`.
//!
//! Work O(V·(32 + few)) per draw with top-k, O(V) without.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::gpu::{Arg, KernelDesc};
use crate::gpu::{GpuBuffer, GpuContext, Kernel};
use crate::shader::{Grid, ShaderDecl};
use crate::tensor::Tensor;

pub static SHADER: ShaderDecl = ShaderDecl {
    name: "sample",
    source: include_str!("../../shaders/sample.wgsl"),
    structs: &[Params::WGSL],
    consts: &[],
    // The sampling kernel for logits in every storage.
    variants: |shader| Grid::new().each(&["logits"]).variants(shader, &[]),
};
/// Threads of the sampling workgroup (the reference reproduces its summation order).
pub const SAMPLE_WG: usize = 256;

/// What [`sample_next`] samples from.
#[derive(Clone, Debug, PartialEq)]
pub struct SampleParams {
    /// V: columns of the logits.
    pub vocab: usize,
    /// Context rows of the logits (and length of the context buffer).
    pub block: usize,
    /// Divides the logits; finite and at least [`MIN_TEMPERATURE`].
    pub temperature: f32,
    /// Keep only the k largest (ties at the k-th kept); `None`: all. Must be ≥ 1.
    pub top_k: Option<usize>,
    /// Reproduces the draws: draw `i` uses `uniform(seed, i)`.
    pub seed: u64,
}

crate::wgsl_struct! {
    struct Params {
        vocab: u32,
        block: u32,
        /// keep the top_k largest (ties at the threshold kept); >= vocab: all
        top_k: u32,
        /// capacity of out_tokens
        out_len: u32,
        seed_lo: u32,
        seed_hi: u32,
        /// > 0
        temperature: f32,
        _pad: u32,
    }
}

/// The smallest temperature: logits up to 3·10^8 stay finite once divided by it (a scaled
/// logit that overflows to inf is never sampled), it is far from the subnormals a GPU
/// flushes to zero, and the draw is already greedy there.
pub const MIN_TEMPERATURE: f32 = 1e-30;

/// The temperatures [`sample_next`] takes, in words.
pub const TEMPERATURE_RANGE: &str = "finite and at least 1e-30";

fn check_temperature(op: &str, temperature: f32) -> Result<()> {
    if !(temperature >= MIN_TEMPERATURE && temperature.is_finite()) {
        return Err(Error::InvalidArgument(format!(
            "{op}: temperature must be {TEMPERATURE_RANGE} (a smaller one overflows the \
             scaled logits, or is zero on a GPU), got {temperature}"
        )));
    }
    Ok(())
}

fn check_top_k(op: &str, top_k: Option<usize>) -> Result<()> {
    if top_k == Some(0) {
        return Err(Error::InvalidArgument(format!(
            "{op}: top_k must be at least 1"
        )));
    }
    Ok(())
}

/// Plan one draw (see the module docs): reads `logits [block, V]` at row `state[0] − 1`,
/// appends the sampled token to `context` (`block` u32, shifting the window when full) and
/// writes it to `out[state[1]]`; `state` holds two u32 (`len`, draws so far) that the kernel
/// updates. Encode the kernel once per token; the state carries the rest.
pub fn sample_next(
    ctx: &GpuContext,
    logits: &Tensor,
    context: &Arc<GpuBuffer>,
    state: &Arc<GpuBuffer>,
    out: &Arc<GpuBuffer>,
    params: &SampleParams,
) -> Result<Kernel> {
    let op = "sample_next";
    let SampleParams {
        vocab,
        block,
        temperature,
        top_k,
        seed,
    } = *params;
    check_temperature(op, temperature)?;
    check_top_k(op, top_k)?;
    if vocab == 0 || block == 0 {
        return Err(Error::shape(
            op,
            format!("vocab ({vocab}) and block ({block}) must be at least 1"),
        ));
    }
    let shape = logits.shape();
    if logits.numel() != block * vocab || shape.last() != Some(&vocab) {
        return Err(Error::shape(
            op,
            format!("logits {shape:?} must be [block, V] = [{block}, {vocab}]"),
        ));
    }
    if u32::try_from(block * vocab).is_err() {
        return Err(Error::shape(op, format!("{block}×{vocab} is over 2^32")));
    }
    if context.size() < 4 * block as u64 {
        return Err(Error::shape(
            op,
            format!(
                "context buffer holds {} bytes, fewer than block = {block} u32 tokens",
                context.size()
            ),
        ));
    }
    if state.size() < 8 {
        return Err(Error::shape(op, "the state buffer must hold two u32"));
    }
    let p = Params {
        vocab: vocab as u32,
        block: block as u32,
        top_k: top_k.map_or(u32::MAX, |k| k.min(u32::MAX as usize) as u32),
        out_len: (out.size() / 4).min(u32::MAX as u64) as u32,
        seed_lo: seed as u32,
        seed_hi: (seed >> 32) as u32,
        temperature,
        ..Default::default()
    };
    ctx.kernel(
        &KernelDesc::new(&SHADER, "sample_token"),
        &[
            ("params", Arg::Uniform(bytemuck::bytes_of(&p))),
            ("logits", logits.arg()),
            ("ctx_tokens", Arg::Buffer(context)),
            ("sample_state", Arg::Buffer(state)),
            ("out_tokens", Arg::Buffer(out)),
        ],
        [1, 1, 1],
    )
}

/// Start a generation: check `prompt` (at least one token, each below `vocab`), write its
/// last `block` tokens into the token-id tensor `input` (padded with id 0: positions past the
/// context never reach the rows the draws read, as attention is causal) and set `state` to
/// (context length, 0 draws). Both samplers, the CLI's and the app's, start here.
pub fn start_context(
    ctx: &GpuContext,
    input: &Tensor,
    state: &GpuBuffer,
    prompt: &[u32],
    vocab: usize,
    block: usize,
) -> Result<()> {
    if prompt.is_empty() {
        return Err(Error::InvalidArgument(
            "the prompt has 0 tokens; generation needs at least one token".into(),
        ));
    }
    if let Some((i, &bad)) = prompt
        .iter()
        .enumerate()
        .find(|&(_, &id)| id as usize >= vocab)
    {
        return Err(Error::InvalidArgument(format!(
            "prompt token {bad} at position {i} is outside the vocabulary (the model's \
             vocab_size is {vocab})"
        )));
    }
    if input.numel() != block || state.size() < 8 {
        return Err(Error::shape(
            "start_context",
            format!(
                "input {:?} must hold block = {block} token ids and the state two u32",
                input.shape()
            ),
        ));
    }
    let context = &prompt[prompt.len().saturating_sub(block)..];
    let mut words = vec![0u32; block];
    words[..context.len()].copy_from_slice(context);
    ctx.write_buffer(
        input.buffer(),
        input.byte_offset(),
        bytemuck::cast_slice(&words),
    );
    ctx.write_buffer(state, 0, bytemuck::cast_slice(&[context.len() as u32, 0]));
    Ok(())
}

/// Wellons' triple32 mixer (as `mix32` in the shader).
fn mix32(mut x: u32) -> u32 {
    x ^= x >> 17;
    x = x.wrapping_mul(0xed5a_d4bb);
    x ^= x >> 11;
    x = x.wrapping_mul(0xac4c_1b51);
    x ^= x >> 15;
    x = x.wrapping_mul(0x3184_8bab);
    x ^= x >> 14;
    x
}

/// The uniform in `[0, 1)` (24 bits) of draw `draw` under `seed`, as the kernel computes it
/// (the kernel's draw index is `state[1]`, a u32, so its high word is 0).
pub fn sample_uniform(seed: u64, draw: u64) -> f32 {
    let mut h = mix32(seed as u32 ^ 0x9e37_79b9);
    h = mix32(h ^ (seed >> 32) as u32);
    h = mix32(h ^ draw as u32);
    h = mix32(h ^ (draw >> 32) as u32);
    (h >> 8) as f32 * (1.0 / 16_777_216.0)
}

/// Order-preserving key of an f32 (as `order_key` in the shader): NaN lowest, −0 = +0.
fn order_key(v: f32) -> u32 {
    let b = v.to_bits();
    if b & 0x7fff_ffff > 0x7f80_0000 {
        0
    } else if b == 0x8000_0000 {
        0x8000_0000
    } else if b & 0x8000_0000 != 0 {
        !b
    } else {
        b | 0x8000_0000
    }
}

/// CPU reference of one draw of [`sample_next`] from one row of logits (already in f32): the
/// same distribution and the same f32 summation order (`exp` and the division may differ from
/// the GPU's in the last bits, so a draw can differ only when `u` falls within rounding of a
/// boundary). The top-k threshold is found by sorting here (an independent check of the
/// kernel's bisection). Panics on a temperature ≤ 0 or `top_k == Some(0)`.
pub fn sample_reference(
    logits_row: &[f32],
    temperature: f32,
    top_k: Option<usize>,
    seed: u64,
    draw: u64,
) -> u32 {
    check_temperature("sample_reference", temperature).expect("temperature");
    check_top_k("sample_reference", top_k).expect("top_k");
    let v = logits_row.len();
    assert!(v > 0, "sample_reference: empty row");
    let z: Vec<f32> = logits_row.iter().map(|&l| l / temperature).collect();
    let keys: Vec<u32> = z.iter().map(|&x| order_key(x)).collect();
    let k = top_k.unwrap_or(v).min(v);
    let threshold = if k < v {
        let mut sorted = keys.clone();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        sorted[k - 1]
    } else {
        0
    };
    let kept = |j: usize| keys[j] >= threshold && z[j].is_finite();
    let m = (0..v)
        .filter(|&j| kept(j))
        .map(|j| z[j])
        .fold(f32::NEG_INFINITY, f32::max);
    let w: Vec<f32> = (0..v)
        .map(|j| if kept(j) { (z[j] - m).exp() } else { 0.0 })
        .collect();
    let per = v.div_ceil(SAMPLE_WG);
    let block = |l: usize| (l * per).min(v)..((l * per).min(v) + per).min(v);
    // Per-thread sums, then the Hillis–Steele scan of the kernel.
    let mut scan: Vec<f32> = (0..SAMPLE_WG)
        .map(|l| block(l).fold(0.0f32, |acc, j| acc + w[j]))
        .collect();
    let mut d = 1;
    while d < SAMPLE_WG {
        scan = (0..SAMPLE_WG)
            .map(|l| {
                if l >= d {
                    scan[l - d] + scan[l]
                } else {
                    scan[l]
                }
            })
            .collect();
        d <<= 1;
    }
    let total = scan[SAMPLE_WG - 1];
    let goal = sample_uniform(seed, draw) * total;
    for l in 0..SAMPLE_WG {
        let mut cumulative = if l > 0 { scan[l - 1] } else { 0.0 };
        for j in block(l) {
            cumulative += w[j];
            if cumulative > goal {
                return j as u32;
            }
        }
    }
    if let Some(j) = (0..v).rev().find(|&j| w[j] > 0.0) {
        return j as u32;
    }
    let top = *keys.iter().max().expect("non-empty");
    keys.iter().position(|&key| key == top).expect("max exists") as u32
}
