//! Text from a GPT on the GPU: the one sampling core of `sample` (`generate.rs`: a GPT from a
//! checkpoint, chunk by chunk) and of the app's panel ([`submit_sample`]: the training model
//! as it trains).
//!
//! After a prompt, each new token is one forward of the model on its context (batch 1,
//! dropout off, the current weights cast as a step casts them) and one
//! [`sample_next`] draw that appends the token to the context the next forward reads. The
//! context lives on the GPU (it is the network's input buffer), so a run of tokens is one
//! compute pass with no host round trip; the caller reads the tokens back when it likes
//! (`sample` once per chunk, the app through a read-back ring, a test at once). A seed gives
//! the same draws every run on one adapter and precision.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::gpu::{GpuBuffer, GpuContext, Kernel};
use crate::ops::sample::{SampleParams, sample_next, start_context};
use crate::tensor::{Storage, Tensor};
use crate::train::trainer::Trainer;

/// nanoGPT's `sample.py` defaults: `start = "\n"`, `max_new_tokens = 500`,
/// `temperature = 0.8`, `top_k = 200`, `seed = 1337`.
pub const DEFAULT_PROMPT: &str = "\n";
pub const DEFAULT_TOKENS: usize = 500;
pub const DEFAULT_TEMPERATURE: f32 = 0.8;
pub const DEFAULT_TOP_K: usize = 200;
pub const DEFAULT_SEED: u64 = 1337;

/// Most tokens one [`submit_sample`] generates: each is a whole forward, and a submission
/// that long would stall a browser's GPU.
pub const MAX_SAMPLE_TOKENS: usize = 1024;

/// How to sample.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SampleOptions {
    /// New tokens to generate.
    pub tokens: usize,
    /// Divides the logits (> 0; below 1 sharpens, above 1 flattens).
    pub temperature: f32,
    /// Keep only the k most likely tokens (ties at the k-th kept); `None` keeps all.
    pub top_k: Option<usize>,
    /// The same seed gives the same draws, so runs under different precisions that predict
    /// alike write alike.
    pub seed: u64,
}

impl Default for SampleOptions {
    fn default() -> Self {
        Self {
            tokens: DEFAULT_TOKENS,
            temperature: DEFAULT_TEMPERATURE,
            top_k: Some(DEFAULT_TOP_K),
            seed: DEFAULT_SEED,
        }
    }
}

/// A planned sampler over a GPT's forward pass: its kernels, the draw after them, and the
/// draws' state (`[len, draws]`: tokens in the context, tokens drawn; see [`sample_next`]).
pub(crate) struct TokenSampler<'a> {
    weight_cast: Option<&'a Kernel>,
    forward: Vec<&'a Kernel>,
    draw: Kernel,
    state: Arc<GpuBuffer>,
    vocab: usize,
    block: usize,
}

impl<'a> TokenSampler<'a> {
    /// Plan sampling from the forward `forward` whose `input` is one sequence of token ids
    /// (the context, `block` of them) and whose `output` holds the logits of every position
    /// (`block × vocab`): token `i` of a run goes to `out[i]`. `weight_cast` (the master →
    /// compute-dtype cast) runs before the first forward.
    pub(crate) fn new(
        ctx: &GpuContext,
        (input, output): (&Tensor, &Tensor),
        forward: impl Iterator<Item = &'a Kernel>,
        weight_cast: Option<&'a Kernel>,
        out: &Arc<GpuBuffer>,
        options: &SampleOptions,
    ) -> Result<Self> {
        let block = input.numel();
        let vocab = *output.shape().last().unwrap_or(&0);
        if input.storage() != Storage::U32
            || input.byte_offset() != 0
            || output.numel() != block * vocab
        {
            return Err(Error::InvalidArgument(format!(
                "sample: the model's input {:?} is not a token sequence with logits {:?} per token",
                input.shape(),
                output.shape()
            )));
        }
        let state = ctx.alloc_storage("sample.state", 8);
        let draw = sample_next(
            ctx,
            &output.reshape(&[block, vocab])?,
            input.buffer(),
            &state,
            out,
            &SampleParams {
                vocab,
                block,
                temperature: options.temperature,
                top_k: options.top_k,
                seed: options.seed,
            },
        )?;
        Ok(Self {
            weight_cast,
            forward: forward.collect(),
            draw,
            state,
            vocab,
            block,
        })
    }

    /// Put `prompt` into the context `input` (its last `block` tokens; at least one, each
    /// inside the vocabulary) and restart the draws. Queued writes.
    pub(crate) fn start(&self, ctx: &GpuContext, input: &Tensor, prompt: &[u32]) -> Result<()> {
        start_context(ctx, input, &self.state, prompt, self.vocab, self.block)
    }

    /// The kernels of the next `tokens` tokens, in order: the weight cast first when `cast`
    /// (the first tokens after the weights changed), then per token the forward and a draw.
    pub(crate) fn kernels(&self, tokens: usize, cast: bool) -> Vec<&Kernel> {
        let mut kernels: Vec<&Kernel> = Vec::new();
        if cast {
            kernels.extend(self.weight_cast);
        }
        for _ in 0..tokens {
            kernels.extend(self.forward.iter().copied());
            kernels.push(&self.draw);
        }
        kernels
    }
}

/// Generate `options.tokens` tokens from `trainer`'s model (a GPT, its current weights) after
/// `prompt` into `out` (u32 per token, at least `4 · tokens` bytes): one submission, no wait.
/// Errors (before anything is submitted) for a model that is not a GPT, an empty or too long
/// prompt, a token outside the vocabulary, or a token count of 0 or above
/// [`MAX_SAMPLE_TOKENS`].
pub fn submit_sample(
    ctx: &GpuContext,
    trainer: &mut Trainer,
    prompt: &[u32],
    options: &SampleOptions,
    out: &Arc<GpuBuffer>,
) -> Result<()> {
    let op = "sample";
    if trainer.spec.tokens().is_none() {
        return Err(Error::InvalidArgument(format!(
            "{op}: the model {} is no language model; only a language model's (a GPT's) \
             next-token logits can be sampled",
            trainer.spec.name
        )));
    }
    if !(1..=MAX_SAMPLE_TOKENS).contains(&options.tokens) {
        return Err(Error::InvalidArgument(format!(
            "{op}: {} tokens requested; between 1 and {MAX_SAMPLE_TOKENS} per sample",
            options.tokens
        )));
    }
    if out.size() < 4 * options.tokens as u64 {
        return Err(Error::InvalidArgument(format!(
            "{op}: the output buffer holds {} bytes, fewer than {} tokens",
            out.size(),
            options.tokens
        )));
    }
    let (net, weight_cast) = trainer.forward_parts(ctx, 1)?;
    let sampler = TokenSampler::new(
        ctx,
        (&net.input, &net.output),
        net.forward_kernels(),
        weight_cast,
        out,
        options,
    )?;
    // The app's prompts fit the block; a longer one is a caller's mistake, not a tail.
    if prompt.len() > sampler.block {
        return Err(Error::InvalidArgument(format!(
            "{op}: the prompt has {} tokens; at most the block size {}",
            prompt.len(),
            sampler.block
        )));
    }
    sampler.start(ctx, &net.input, prompt)?;
    net.set_dropout(ctx, 0, 0, false);
    let mut encoder = ctx
        .device
        .create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("sample"),
        });
    {
        let mut pass = encoder.begin_compute_pass(&Default::default());
        for k in sampler.kernels(options.tokens, true) {
            k.encode(&mut pass);
        }
    }
    ctx.queue.submit([encoder.finish()]);
    Ok(())
}
