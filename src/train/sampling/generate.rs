//! `sample`'s text generation: a GPT rebuilt from a checkpoint (its `model` and `vocab`
//! metadata), planned forward-only for one sequence of the full block, sampled with the one
//! sampling core ([`crate::train::sample`]) as nanoGPT's `GPT.generate` does it: the context is the
//! last `block_size` tokens, the logits of its last position are divided by the temperature,
//! cut to the top k and sampled.
//!
//! A chunk of tokens is recorded as forward, draw, forward, draw, ... into one compute pass
//! and submitted once, and the chunk's tokens are read back once ([`DEFAULT_CHUNK`] tokens
//! per submission and per readback). Dropout is off (evaluation).
//!
//! Native only: the readbacks block (the browser would map them asynchronously).

use crate::amp::policy::{Policy, Precision};
use crate::data::Vocab;
use crate::error::{Error, Result};
use crate::gpu::{GpuContext, Kernel};
use crate::nn::ModelSpec;
use crate::nn::family::Tokens;
use crate::nn::inference::ForwardNetwork;
use crate::nn::params::ParamStore;
use crate::train::checkpoint::Checkpoint;
use crate::train::sample::TokenSampler;
pub use crate::train::sample::{
    DEFAULT_PROMPT, DEFAULT_SEED, DEFAULT_TEMPERATURE, DEFAULT_TOKENS, DEFAULT_TOP_K, SampleOptions,
};
use crate::train::trainer::load_params;

/// Tokens per submission (and per readback) unless asked otherwise.
pub const DEFAULT_CHUNK: usize = 64;
/// Most tokens one generation may produce: their ids are kept in one GPU buffer (64 MiB).
pub const MAX_TOKENS: usize = 1 << 24;

/// What a generation did, for tests and reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Generation {
    /// The generated token ids (the prompt not included).
    pub tokens: Vec<u32>,
    /// Command buffers submitted and readbacks made (one each per chunk).
    pub submissions: usize,
    pub readbacks: usize,
}

/// A language model (a GPT) planned for generation: parameters on the GPU, an evaluation
/// forward over one sequence of `block_size` tokens, and its context and sampling state.
pub struct Generator {
    pub spec: ModelSpec,
    /// Its vocabulary and context, as its family says.
    pub tokens: Tokens,
    pub precision: Precision,
    store: ParamStore,
    net: ForwardNetwork,
    weight_cast: Option<Kernel>,
}

/// What [`model_from_checkpoint`] reads out of a checkpoint.
pub struct SavedModel {
    /// The GPT the metadata `model` describes.
    pub spec: ModelSpec,
    /// Its parameters by name, in the model's order.
    pub params: Vec<(String, Vec<f32>)>,
    /// The characters that decode its token ids (metadata `vocab`); `None` for a model
    /// trained under a tokenizer, which decodes them.
    pub vocab: Option<Vocab>,
}

/// The language model a checkpoint describes (metadata `model`, `{"gpt": {...}}` or
/// `{"llama": {...}}`), its parameters and its characters (metadata `vocab`, when it was
/// trained on characters). `what` names the file in errors.
pub fn model_from_checkpoint(ck: &Checkpoint, what: &str) -> Result<SavedModel> {
    let Some(model) = &ck.model else {
        return Err(Error::Checkpoint(format!(
            "{what}: no model description (metadata `model`): only checkpoints of a GPT \
             written by `webgpu-amp train --save` can sample"
        )));
    };
    let spec = ModelSpec::from_json(&model.to_string())
        .map_err(|e| Error::Checkpoint(format!("{what}: metadata `model`: {e}")))?;
    let Some(tokens) = spec.tokens() else {
        return Err(Error::Checkpoint(format!(
            "{what}: metadata `model` describes no language model ({model}); only a language \
             model (a GPT) samples text"
        )));
    };
    // A model trained on characters carries their list; one trained under a tokenizer
    // (`--tokenizer`) has none, and samples with that tokenizer.
    let vocab = ck.vocab();
    // Every id the model can sample must decode, and every character must have an id the
    // model embeds: the list and vocab_size must agree (a 64-entry list for 65 ids once
    // failed 13 s into sampling; a 67-entry one was taken).
    let vocab_size = tokens.vocab_size;
    if let Some(vocab) = vocab
        && vocab.len() != vocab_size
    {
        return Err(Error::Checkpoint(format!(
            "{what}: metadata `vocab` lists {} characters, but metadata `model` has vocab_size \
             {vocab_size}: {}",
            vocab.len(),
            if vocab.len() < vocab_size {
                "ids past the list would be sampled that no character stands for"
            } else {
                "characters past vocab_size have no embedding"
            }
        )));
    }
    let params = ck.params_for_model(&spec, what)?;
    Ok(SavedModel {
        spec,
        params,
        vocab: vocab.cloned(),
    })
}

impl Generator {
    /// Plan `spec` (a GPT on its full block) with `params` under `precision`.
    pub fn new(
        ctx: &GpuContext,
        spec: &ModelSpec,
        params: &[(String, Vec<f32>)],
        precision: Precision,
    ) -> Result<Self> {
        let (Some(family), Some(tokens)) = (spec.family.clone(), spec.tokens()) else {
            return Err(Error::model(format!(
                "{}: only a language model (a GPT) generates text",
                spec.name
            )));
        };
        // The model on the full block, whatever sequence length it was trained on.
        let spec = ModelSpec::of_family(family, &spec.name, tokens.block_size)?
            .with_attention(spec.attention);
        let policy = Policy::new(precision);
        // Pure f16 keeps f16 values, as training does.
        let (store, weight_cast) = load_params(ctx, &spec, precision, params)?;
        let net = ForwardNetwork::build(ctx, &spec, &store, &policy, 1)?;
        ctx.check()?;
        Ok(Self {
            spec,
            tokens,
            precision,
            store,
            net,
            weight_cast,
        })
    }

    /// The parameters this generator holds (master weights, read back; tests).
    pub fn parameters(&self, ctx: &GpuContext) -> Result<Vec<(String, Vec<f32>)>> {
        self.store.download(ctx)
    }

    /// Generate `options.tokens` tokens after `prompt` (token ids, at least one; only the
    /// last `block_size` are context). Submits once per `chunk` tokens and reads that
    /// chunk's tokens back once, handing them to `on_chunk` as they arrive.
    pub fn generate(
        &self,
        ctx: &GpuContext,
        prompt: &[u32],
        options: &SampleOptions,
        chunk: usize,
        on_chunk: &mut dyn FnMut(&[u32]) -> Result<()>,
    ) -> Result<Generation> {
        if chunk == 0 {
            return Err(Error::InvalidArgument(
                "tokens per submission must be at least 1".into(),
            ));
        }
        if options.tokens > MAX_TOKENS {
            return Err(Error::InvalidArgument(format!(
                "{} tokens is more than the {MAX_TOKENS} one generation may produce",
                options.tokens
            )));
        }
        let mut out = Generation::default();
        if options.tokens == 0 {
            return Ok(out);
        }
        let tokens_buffer = ctx.alloc_storage("generate.tokens", 4 * options.tokens as u64);
        let sampler = TokenSampler::new(
            ctx,
            (&self.net.input, &self.net.output),
            self.net.kernels(),
            self.weight_cast.as_ref(),
            &tokens_buffer,
            options,
        )?;
        sampler.start(ctx, &self.net.input, prompt)?;
        let mut done = 0;
        while done < options.tokens {
            let n = chunk.min(options.tokens - done);
            ctx.run(&sampler.kernels(n, done == 0));
            out.submissions += 1;
            let bytes = ctx.read_bytes(&tokens_buffer, 4 * done as u64, 4 * n as u64)?;
            out.readbacks += 1;
            ctx.check()?;
            let ids: Vec<u32> = bytemuck::pod_collect_to_vec(&bytes[..4 * n]);
            on_chunk(&ids)?;
            out.tokens.extend_from_slice(&ids);
            done += n;
        }
        Ok(out)
    }

    /// The logits of the model's forward over `tokens` (at most `block_size`; the rest of
    /// the block is padded with id 0 and its rows dropped): `[tokens.len(), vocab]` as f32,
    /// read back (tests: the generator's forward against the training network's).
    pub fn logits(&self, ctx: &GpuContext, tokens: &[u32]) -> Result<Vec<f32>> {
        let (vocab, block) = (self.tokens.vocab_size, self.tokens.block_size);
        if tokens.is_empty() || tokens.len() > block {
            return Err(Error::InvalidArgument(format!(
                "{} tokens: the forward takes 1 to block_size = {block}",
                tokens.len()
            )));
        }
        let mut words = vec![0u32; block];
        words[..tokens.len()].copy_from_slice(tokens);
        let input = &self.net.input;
        ctx.write_buffer(
            input.buffer(),
            input.byte_offset(),
            bytemuck::cast_slice(&words),
        );
        let kernels: Vec<&Kernel> = self.weight_cast.iter().chain(self.net.kernels()).collect();
        ctx.run(&kernels);
        let mut all = self.net.output.read_f32(ctx)?;
        all.truncate(tokens.len() * vocab);
        Ok(all)
    }
}
