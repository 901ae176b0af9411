//! Text sampled from one language-model run as it trains (characters, or a picked folder's
//! tokens through its tokenizer): every few hundred steps (and at the run's last
//! step) a short sample is generated on the GPU with the run's current weights
//! ([`submit_sample`]), copied into a read-back slot and mapped; a later frame
//! decodes it. Every mode samples with the same seed and prompt, so the f32 and amp-f16
//! texts differ only where their weights do.

use std::sync::Arc;

use super::DueReadback;
use crate::data::{Tokenizer, Vocab};
use crate::error::Result;
use crate::gpu::GpuContext;
use crate::train::sample::submit_sample;
use crate::train::{SampleOptions, Trainer};

/// Tokens per sample: a few words. Each is a whole forward, and a CPU adapter pays per
/// dispatch whatever the batch (Chromium's SwiftShader takes several seconds per token).
pub const SAMPLE_TOKENS: usize = 16;
/// Softmax temperature of the samples (nanoGPT's `sample.py` uses 0.8).
pub const TEMPERATURE: f32 = 0.8;

/// How a run's ids are text: a character vocabulary (a text trained on its characters) or a
/// Hugging Face tokenizer (a picked folder's), decoded by its stream decoder as `sample
/// --tokenizer` does.
#[derive(Clone, Debug)]
pub enum SampleText {
    Chars(Arc<Vocab>),
    Tokens(Arc<Tokenizer>),
}

impl SampleText {
    /// The prompt: a newline (nanoGPT's), as the vocabulary or the tokenizer has it; the
    /// first id where it has none.
    fn prompt(&self) -> Vec<u32> {
        match self {
            SampleText::Chars(vocab) => vec![vocab.id('\n').unwrap_or(0)],
            SampleText::Tokens(tokenizer) => tokenizer
                .encode("\n")
                .ok()
                .filter(|ids| !ids.is_empty())
                .unwrap_or_else(|| vec![0]),
        }
    }

    /// The text of `ids` (the prompt's and the sampled).
    fn decode(&self, ids: &[u32]) -> Result<String> {
        match self {
            SampleText::Chars(vocab) => vocab.decode(ids),
            SampleText::Tokens(tokenizer) => {
                let mut stream = tokenizer.stream();
                let mut text = stream.push(ids)?;
                text.push_str(&stream.finish()?);
                Ok(text)
            }
        }
    }
}

/// One mode's sampling in flight (or due).
pub struct SampleProbe {
    text: SampleText,
    prompt: Vec<u32>,
    tokens: DueReadback,
    seed: u64,
    /// The sample in flight: the steps submitted before it, until they have landed (then
    /// `None`), and when (the caller's clock, seconds) it was submitted or, later, when the
    /// last of those steps landed.
    queued_behind: Option<u64>,
    started_at: f64,
    /// Seconds the latest landed sample took from the later of its submission and the
    /// landing of the training steps queued before it: its own time on the GPU (pipelines
    /// compiled for it included), not the queue's.
    pub last_secs: Option<f64>,
}

impl SampleProbe {
    /// Samples that start from a newline (or the first id), decoded by `text`; the first at
    /// step `first_step`.
    pub fn new(ctx: &GpuContext, text: SampleText, seed: u64, first_step: u64) -> Self {
        let prompt = text.prompt();
        let bytes = 4 * SAMPLE_TOKENS as u64;
        Self {
            text,
            prompt,
            tokens: DueReadback::new(ctx, "app.sample", "tokens", bytes, first_step),
            seed,
            queued_behind: None,
            started_at: 0.0,
            last_secs: None,
        }
    }

    pub fn in_flight(&self) -> bool {
        self.tokens.in_flight()
    }

    /// The run's last sample has been taken.
    pub fn done(&self) -> bool {
        self.tokens.finished() && !self.in_flight()
    }

    /// Sample `trainer`'s current weights when `submitted` steps reach the next due step
    /// and the previous sample has been taken; the next is due `every` steps later (or at
    /// `last`, the run's final step). `now` (seconds) times the sample.
    pub fn maybe_submit(
        &mut self,
        ctx: &GpuContext,
        trainer: &mut Trainer,
        (submitted, every, last): (u64, u64, u64),
        now: f64,
    ) -> Result<()> {
        let options = SampleOptions {
            tokens: SAMPLE_TOKENS,
            temperature: TEMPERATURE,
            top_k: None,
            seed: self.seed,
        };
        let prompt = &self.prompt;
        let was_in_flight = self.in_flight();
        self.tokens
            .maybe_submit(ctx, submitted, every, last, |tokens| {
                submit_sample(ctx, trainer, prompt, &options, tokens)
            })?;
        if !was_in_flight && self.in_flight() {
            (self.queued_behind, self.started_at) = (Some(submitted), now);
        }
        Ok(())
    }

    /// `landed` training steps have landed by `now`: the sample in flight starts its own
    /// time once those queued before it have.
    pub fn steps_landed(&mut self, landed: u64, now: f64) {
        if self.queued_behind.is_some_and(|behind| landed >= behind) {
            self.queued_behind = None;
            self.started_at = now;
        }
    }

    /// (step, text) of the sample that has landed, if one has: the prompt, then the
    /// generated tokens. `now` (seconds) times it.
    pub fn take(&mut self, now: f64) -> Option<Result<(u64, String)>> {
        let text = &self.text;
        let prompt = &self.prompt;
        let landed = self.tokens.take_ready(|step, bytes| {
            let ids: Vec<u32> = prompt
                .iter()
                .copied()
                .chain(bytemuck::cast_slice::<u8, u32>(bytes).iter().copied())
                .collect();
            text.decode(&ids).map(|text| (step, text))
        });
        if landed.is_some() {
            self.queued_behind = None;
            self.last_secs = Some(now - self.started_at);
        }
        landed
    }
}
