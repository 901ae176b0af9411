//! Text from a GPT as it trains, a function over a [`Trainer`]: after a prompt, each new token is one forward of the model
//! on the context (batch 1, dropout off, the current weights cast as a step casts them) and
//! one [`sample_next`] draw that appends the token to the context the next forward reads.
//! All tokens are one submission with no host round trip; the caller reads the tokens back
//! when it likes (the app through a read-back ring, a test at once).

use std::sync::Arc;

use super::trainer::Trainer;
use crate::error::{Error, Result};
use crate::gpu::{GpuBuffer, GpuContext};
use crate::ops::sample::{SampleParams, sample_next, start_context};
use crate::tensor::Storage;

/// Most tokens one [`submit_sample`] generates: each is a whole forward, and a
/// submission that long would stall a browser's GPU.
pub const MAX_SAMPLE_TOKENS: usize = 1024;

/// What to sample: how many tokens, and the distribution ([`SampleParams`]'s fields).
#[derive(Clone, Debug, PartialEq)]
pub struct SampleRequest {
    pub tokens: usize,
    pub temperature: f32,
    pub top_k: Option<usize>,
    /// The same seed gives the same draws, so runs under different precisions that predict
    /// alike write alike.
    pub seed: u64,
}

/// Generate `request.tokens` tokens from `trainer`'s model (a GPT, its current weights) after
/// `prompt` into `out` (u32 per token, at least `4 · tokens` bytes): one submission, no
/// wait. Errors (before anything is submitted) for a model that is not a GPT, an empty or too
/// long prompt, a token outside the vocabulary, or a token count of 0 or above
/// [`MAX_SAMPLE_TOKENS`].
pub fn submit_sample(
    ctx: &GpuContext,
    trainer: &mut Trainer,
    prompt: &[u32],
    request: &SampleRequest,
    out: &Arc<GpuBuffer>,
) -> Result<()> {
    let op = "sample";
    if trainer.spec.gpt.is_none() {
        return Err(Error::InvalidArgument(format!(
            "{op}: the model {} is not a GPT; only a GPT's next-token logits can be sampled",
            trainer.spec.name
        )));
    }
    if !(1..=MAX_SAMPLE_TOKENS).contains(&request.tokens) {
        return Err(Error::InvalidArgument(format!(
            "{op}: {} tokens requested; between 1 and {MAX_SAMPLE_TOKENS} per sample",
            request.tokens
        )));
    }
    if out.size() < 4 * request.tokens as u64 {
        return Err(Error::InvalidArgument(format!(
            "{op}: the output buffer holds {} bytes, fewer than {} tokens",
            out.size(),
            request.tokens
        )));
    }
    let i = trainer.plan_network(ctx, 1)?;
    let net = &trainer.nets[i];
    let block = net.input.numel();
    let vocab = *net.output.shape().last().unwrap_or(&0);
    if net.input.storage() != Storage::U32 || net.output.numel() != block * vocab {
        return Err(Error::InvalidArgument(format!(
            "{op}: the model's input {:?} is not a token sequence with logits {:?} per token",
            net.input.shape(),
            net.output.shape()
        )));
    }
    // The app's prompts fit the block; a longer one is a caller's mistake, not a tail.
    if prompt.len() > block {
        return Err(Error::InvalidArgument(format!(
            "{op}: the prompt has {} tokens; at most the block size {block}",
            prompt.len()
        )));
    }
    let input = net.input.buffer();
    let state = ctx.alloc_storage("sample.state", 8);
    start_context(ctx, &net.input, &state, prompt, vocab, block)?;
    let draw = sample_next(
        ctx,
        &net.output,
        input,
        &state,
        out,
        &SampleParams {
            vocab,
            block,
            temperature: request.temperature,
            top_k: request.top_k,
            seed: request.seed,
        },
    )?;
    net.set_dropout(ctx, 0, 0, false);
    let mut encoder = ctx
        .device
        .create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("sample"),
        });
    {
        let mut pass = encoder.begin_compute_pass(&Default::default());
        for k in trainer.weight_cast.iter() {
            k.encode(&mut pass);
        }
        for _ in 0..request.tokens {
            for k in net.forward_kernels() {
                k.encode(&mut pass);
            }
            draw.encode(&mut pass);
        }
    }
    ctx.queue.submit([encoder.finish()]);
    Ok(())
}
