//! `webgpu-amp sample`: generate text on the GPU from a language model's checkpoint written
//! by `train --save` (nanoGPT's `sample.py`: its defaults, its top-k, its context cropping).
//! The prompt and the generated text go to stdout, everything else to stderr. A model trained
//! on characters decodes with the characters its checkpoint lists; one trained under a
//! tokenizer (`train --tokenizer`) samples with `--tokenizer FILE`: the prompt encoded by it,
//! the ids decoded by it as they come, never cutting a character in two.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use webgpu_amp::amp::policy::Precision;
use webgpu_amp::data::{Tokenizer, Vocab};
use webgpu_amp::ops::sample::{MIN_TEMPERATURE, TEMPERATURE_RANGE};
use webgpu_amp::train::checkpoint::Checkpoint;
use webgpu_amp::train::generate::{
    self, DEFAULT_CHUNK, Generator, SampleOptions, SavedModel, model_from_checkpoint,
};
use webgpu_amp::{Error, GpuContext, Result};

use super::numbers::number;
use super::out;
use super::run_args::SEED_RANGE;
use super::{AttentionArgs, DeviceArgs};

/// `--tokens`: at most [`generate::MAX_TOKENS`] (their ids are kept in one GPU buffer).
const TOKENS_RANGE: &str = "1 to 16777216";
/// `--chunk`: tokens per submission (more than `--tokens` is `--tokens`).
const CHUNK_RANGE: &str = "1 to 16777216";
const TOP_K_RANGE: &str = "1 to the vocabulary size";
const MAX_CHUNK: usize = 1 << 24;

#[derive(Args, Debug)]
pub struct SampleArgs {
    /// A language model's checkpoint from `train --save` (it holds the model, and the
    /// characters of a model trained on characters).
    #[arg(long)]
    checkpoint: PathBuf,
    /// The tokenizer.json of a model trained under one (`train --tokenizer`, or an hf:
    /// folder's): it encodes the prompt and decodes the ids. A checkpoint records no
    /// tokenizer, so give the run's.
    #[arg(long, value_name = "FILE")]
    tokenizer: Option<PathBuf>,
    /// Text to continue (default "\n", as nanoGPT's sample.py); only its last block_size
    /// tokens are the model's context.
    #[arg(long)]
    prompt: Option<String>,
    /// New tokens (characters, or the tokenizer's tokens) to generate, 1 to 16777216.
    #[arg(long, default_value_t = generate::DEFAULT_TOKENS, allow_negative_numbers = true,
          value_parser = number::<usize>(TOKENS_RANGE))]
    tokens: usize,
    /// Divides the logits: below 1 sharpens the distribution, above 1 flattens it (finite
    /// and at least 1e-30).
    #[arg(long, default_value_t = generate::DEFAULT_TEMPERATURE, allow_negative_numbers = true,
          value_parser = number::<f32>(TEMPERATURE_RANGE))]
    temperature: f32,
    /// Sample among the K most likely tokens only, 1 to the vocabulary size (1 is greedy; the
    /// vocabulary size keeps every token). Default 200 (nanoGPT's), or the vocabulary size
    /// when that is smaller.
    #[arg(long = "top-k", allow_negative_numbers = true, value_parser = number::<usize>(TOP_K_RANGE))]
    top_k: Option<usize>,
    /// Seed of the draws: the same seed gives the same text.
    #[arg(long, default_value_t = generate::DEFAULT_SEED, allow_negative_numbers = true,
          value_parser = number::<u64>(SEED_RANGE))]
    seed: u64,
    /// f32, amp-f16, amp-bf16 or f16 (default: the precision the checkpoint was trained in).
    #[arg(long)]
    precision: Option<String>,
    /// Tokens per GPU submission (each submission is read back once), 1 to 16777216.
    #[arg(long, default_value_t = DEFAULT_CHUNK, allow_negative_numbers = true,
          value_parser = number::<usize>(CHUNK_RANGE))]
    chunk: usize,
    #[command(flatten)]
    attention: AttentionArgs,
    #[command(flatten)]
    device: DeviceArgs,
}

impl SampleArgs {
    /// Checks the flags that need neither the checkpoint nor the GPU. `top_k` is settled
    /// later, against the vocabulary ([`SampleArgs::top_k`]).
    fn options(&self) -> Result<SampleOptions> {
        let bad = |m: String| Err(Error::InvalidArgument(m));
        if !(self.temperature >= MIN_TEMPERATURE && self.temperature.is_finite()) {
            return bad(format!(
                "--temperature must be {TEMPERATURE_RANGE}, got {:?} (a smaller one overflows \
                 the scaled logits, or is zero on a GPU)",
                self.temperature
            ));
        }
        if self.top_k == Some(0) {
            return bad(format!(
                "--top-k must be {TOP_K_RANGE}, got 0 (1 is greedy; the vocabulary size keeps \
                 every token)"
            ));
        }
        if !(1..=MAX_CHUNK).contains(&self.chunk) {
            return bad(format!("--chunk must be {CHUNK_RANGE}, got {}", self.chunk));
        }
        if !(1..=generate::MAX_TOKENS).contains(&self.tokens) {
            return bad(format!(
                "--tokens must be {TOKENS_RANGE}, got {} (the tokens are kept in one GPU \
                 buffer)",
                self.tokens
            ));
        }
        Ok(SampleOptions {
            tokens: self.tokens,
            temperature: self.temperature,
            top_k: None,
            seed: self.seed,
        })
    }

    /// `--top-k` against a vocabulary of `vocab` tokens: at most `vocab` when given, the
    /// default capped to it (nanoGPT's `min(top_k, logits.size(-1))`) when not.
    fn top_k(&self, vocab: usize, what: &str) -> Result<usize> {
        match self.top_k {
            Some(k) if k > vocab => Err(Error::InvalidArgument(format!(
                "--top-k must be {TOP_K_RANGE}, got {k}: {what}'s vocabulary has {vocab} tokens \
                 (at most {vocab}, which keeps every token)"
            ))),
            Some(k) => Ok(k),
            None => Ok(generate::DEFAULT_TOP_K.min(vocab)),
        }
    }
}

pub fn run(args: &SampleArgs) -> Result<()> {
    let mut options = args.options()?;
    let explicit = args
        .precision
        .as_deref()
        .map(Precision::parse)
        .transpose()?;
    let device = args.device.options()?;
    let what = args.checkpoint.display().to_string();
    let ck = Checkpoint::load(&args.checkpoint)?;
    let SavedModel {
        spec,
        params,
        vocab,
    } = model_from_checkpoint(&ck, &what)?;
    let vocab = vocab.as_ref();
    let model_vocab = spec.tokens().map_or(0, |t| t.vocab_size);
    let top_k = args.top_k(model_vocab, &what)?;
    options.top_k = Some(top_k);
    let precision = match (explicit, &ck.precision) {
        (Some(p), _) => p,
        (None, Some(saved)) => Precision::parse(saved)
            .map_err(|e| Error::Checkpoint(format!("{what}: metadata `precision`: {e}")))?,
        (None, None) => Precision::F32,
    };
    let tokenizer = args
        .tokenizer
        .as_deref()
        .map(|path| {
            Tokenizer::from_file(path).map_err(|e| match e {
                Error::Data(m) => Error::InvalidArgument(format!("--tokenizer: {m}")),
                other => other,
            })
        })
        .transpose()?;
    let text = match (vocab, &tokenizer) {
        (Some(_), Some(_)) => {
            return Err(Error::InvalidArgument(format!(
                "--tokenizer: {what} was trained on characters (metadata `vocab` lists them), \
                 which decode its ids; --tokenizer is for a model trained under a tokenizer"
            )));
        }
        (Some(vocab), None) => Text::Chars(vocab),
        (None, Some(t)) => Text::Tokens(t),
        (None, None) => {
            return Err(Error::Checkpoint(format!(
                "{what}: no vocabulary (metadata `vocab`): the model was not trained on \
                 characters, so its token ids decode only with the tokenizer they came from; \
                 give --tokenizer FILE (a checkpoint records no tokenizer)"
            )));
        }
    };
    let given = args.prompt.clone().filter(|p| !p.is_empty());
    let prompt = given
        .clone()
        .unwrap_or_else(|| generate::DEFAULT_PROMPT.to_string());
    let ids = text.encode_prompt(&prompt, given.is_some(), model_vocab, &what)?;

    let ctx = GpuContext::new(&device)?;
    let spec = spec.with_attention(args.attention.kernel()?);
    let generator = Generator::new(&ctx, &spec, &params, precision)?;
    let model = spec.description().unwrap_or_default();
    eprintln!(
        "sample: {what}: {model} (block {}, vocabulary {}{}) on {} under {}; {} tokens, \
         temperature {}, top-k {}, seed {}",
        generator.tokens.block_size,
        model_vocab,
        match &text {
            Text::Chars(_) => " characters".to_string(),
            Text::Tokens(t) => format!(", tokenizer of {}", t.vocab_size()),
        },
        ctx.report.name,
        precision.name(),
        options.tokens,
        options.temperature,
        top_k,
        options.seed
    );

    // On a terminal the text itself shows the progress (it appears chunk by chunk), and a bar
    // redrawn on the same screen would overwrite it: the bar is for a redirected stdout.
    let bar = if std::io::stdout().is_terminal() {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(options.tokens as u64)
    };
    bar.set_style(
        ProgressStyle::with_template(
            "   sample [{elapsed_precise}] {bar:30.cyan/blue} {pos}/{len} tokens {per_sec}",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    // SIGINT/SIGTERM stop between chunks with one line and exit 130, as the other commands
    // do (also where the signals were inherited as ignored, as in a script's background job).
    webgpu_amp::interrupt::install();
    let mut sampled = 0;
    let mut stdout = std::io::stdout().lock();
    let mut stream = text.stream();
    // A closed pipe (`sample | head -1`): the text is all this command makes, so it stops
    // there, quietly and with success; any other failure keeps its exit code.
    let io = |e: std::io::Error| out::write_error(e, "writing the text");
    let written = write!(stdout, "{prompt}")
        .and_then(|_| stdout.flush())
        .map_err(io)
        .and_then(|()| {
            generator.generate(&ctx, &ids, &options, args.chunk, &mut |chunk| {
                let text = stream.push(chunk).map_err(|e| {
                    Error::Checkpoint(format!(
                        "{what}: the model sampled an id that cannot be decoded (vocab_size \
                         {}): {e}",
                        generator.tokens.vocab_size
                    ))
                })?;
                bar.suspend(|| write!(stdout, "{text}").and_then(|_| stdout.flush()))
                    .map_err(io)?;
                bar.inc(chunk.len() as u64);
                sampled += chunk.len();
                super::interrupted::check(|| {
                    format!(
                        "sample: interrupted by {} after {sampled} of {} tokens",
                        super::interrupted::signal_name(),
                        options.tokens
                    )
                })
            })
        })
        .and_then(|_generated| {
            let rest = stream.finish()?;
            writeln!(stdout, "{rest}").map_err(io)
        });
    bar.finish_and_clear();
    match written {
        Err(Error::Output(_)) if out::closed() => Ok(()),
        written => written,
    }
}

/// What turns text into the model's ids and back: the characters a checkpoint lists, or a
/// tokenizer.
enum Text<'t> {
    Chars(&'t Vocab),
    Tokens(&'t Tokenizer),
}

impl<'t> Text<'t> {
    /// The prompt's ids, each below the model's `vocab` (`given`: the user's prompt, not the
    /// default newline).
    fn encode_prompt(
        &self,
        prompt: &str,
        given: bool,
        vocab: usize,
        what: &str,
    ) -> Result<Vec<u32>> {
        let ids = match self {
            Text::Chars(v) => v.encode(prompt),
            Text::Tokens(t) => t.encode(prompt),
        };
        let ids = ids.and_then(|ids| match ids.iter().find(|&&id| id as usize >= vocab) {
            Some(id) => Err(Error::Data(format!(
                "it encodes to id {id}, outside the model's vocab_size {vocab} (is this the \
                 run's tokenizer?)"
            ))),
            None if ids.is_empty() => Err(Error::Data("it encodes to no token".into())),
            None => Ok(ids),
        });
        ids.map_err(|e| {
            let msg = match e {
                Error::Data(m) => m,
                other => other.to_string(),
            };
            match (given, self) {
                (true, _) => Error::InvalidArgument(format!("--prompt: {msg} of {what}")),
                // Only the default prompt was used: the vocabulary is the problem, not a flag.
                (false, Text::Chars(_)) => Error::Checkpoint(format!(
                    "{what}: the default prompt, a newline (nanoGPT's), is not in its \
                     vocabulary ({msg}); sampling from this model needs a prompt of its \
                     characters"
                )),
                (false, Text::Tokens(_)) => Error::InvalidArgument(format!(
                    "--tokenizer: the default prompt, a newline: {msg}; give --prompt"
                )),
            }
        })
    }

    /// A decoder of the sampled ids, chunk by chunk.
    fn stream(&self) -> Stream<'t> {
        match self {
            Text::Chars(v) => Stream::Chars(v),
            Text::Tokens(t) => Stream::Tokens(t.stream()),
        }
    }
}

/// Sampled ids to text as they come.
enum Stream<'t> {
    Chars(&'t Vocab),
    Tokens(webgpu_amp::data::tokenizer::TextStream<'t>),
}

impl Stream<'_> {
    fn push(&mut self, ids: &[u32]) -> Result<String> {
        match self {
            Stream::Chars(v) => v.decode(ids),
            Stream::Tokens(s) => s.push(ids),
        }
    }

    /// What is left once the last id is in (a tokenizer's incomplete character).
    fn finish(self) -> Result<String> {
        match self {
            Stream::Chars(_) => Ok(String::new()),
            Stream::Tokens(s) => s.finish(),
        }
    }
}
