//! `webgpu-amp sample` and the generator under it (`train::generate`): a small GPT trained
//! on a text by the real binary, then sampled. Same seed → same text, another seed → other
//! text; top-k 1 is the argmax of the model's logits at every step (and equals a tiny
//! temperature); every draw follows `sample_reference` on the logits of the window it saw,
//! also after the window starts to shift; one submission and one readback per chunk;
//! dropout off; the generator's forward is the training network's; the prompt rules
//! (default "\n", long prompts keep the last block); the errors in `gpt_sample/errors.rs`.

mod common;
#[path = "gpt_sample/errors.rs"]
mod errors;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use common::cli::{BIN, command};
use common::ctx;
use webgpu_amp::GpuContext;
use webgpu_amp::amp::policy::Precision;
use webgpu_amp::nn::ModelSpec;
use webgpu_amp::ops::sample::sample_reference;
use webgpu_amp::train::checkpoint::Checkpoint;
use webgpu_amp::train::evaluate::predict;
use webgpu_amp::train::generate::{Generator, SampleOptions, SavedModel, model_from_checkpoint};

const TEXT: &str = "the quick brown fox jumps over the lazy dog.\n";
const BLOCK: usize = 8;

fn dir() -> PathBuf {
    let d =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("gpt-sample-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn run(args: &[&str]) -> Output {
    command().args(args).output().expect("run webgpu-amp")
}

#[track_caller]
fn ok(args: &[&str]) -> String {
    let out = run(args);
    assert!(
        out.status.success(),
        "webgpu-amp {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The model description: one block, dropout 0.2 (sampling must turn it off).
fn model_json(vocab: usize, dropout: f32) -> String {
    format!(
        r#"{{"gpt": {{"vocab_size": {vocab}, "block_size": {BLOCK}, "n_layer": 1, "n_head": 2,
            "n_embd": 16, "dropout": {dropout}, "bias": true}}}}"#
    )
}

fn vocab_size() -> usize {
    let mut chars: Vec<char> = TEXT.chars().collect();
    chars.sort_unstable();
    chars.dedup();
    chars.len()
}

/// A checkpoint of the GPT trained 60 steps on TEXT (written once per test binary).
fn checkpoint() -> &'static str {
    static CK: OnceLock<String> = OnceLock::new();
    CK.get_or_init(|| {
        let d = dir();
        let text = d.join("text.txt");
        std::fs::write(&text, TEXT.repeat(20)).unwrap();
        let model = d.join("model.json");
        std::fs::write(&model, model_json(vocab_size(), 0.2)).unwrap();
        let ck = d.join("gpt.safetensors");
        ok(&[
            "train",
            "--model",
            model.to_str().unwrap(),
            "--dataset",
            &format!("text:{}", text.display()),
            "--precision",
            "f32",
            "--steps",
            "60",
            "--batch-size",
            "8",
            "--optimizer",
            "adamw",
            "--lr",
            "0.01",
            // A constant rate, no clipping: enough for 60 steps to learn the text (a GPT's
            // default cosine decay and clipping at 1 leave it repeating one character).
            "--lr-schedule",
            "constant",
            "--clip-grad-norm",
            "0",
            "--no-validate",
            "--save",
            ck.to_str().unwrap(),
        ]);
        ck.to_str().unwrap().to_string()
    })
}

fn sample(extra: &[&str]) -> String {
    let mut args = vec!["sample", "--checkpoint", checkpoint()];
    args.extend_from_slice(extra);
    ok(&args)
}

fn generator(ctx: &GpuContext, precision: Precision) -> (Generator, webgpu_amp::data::Vocab) {
    let ck = Checkpoint::load(Path::new(checkpoint())).unwrap();
    let m = model_from_checkpoint(&ck, "gpt").unwrap();
    (
        Generator::new(ctx, &m.spec, &m.params, precision).unwrap(),
        m.vocab
            .expect("a character-level GPT's checkpoint lists its characters"),
    )
}

fn argmax(row: &[f32]) -> u32 {
    (0..row.len())
        .max_by(|&a, &b| row[a].total_cmp(&row[b]).then(b.cmp(&a)))
        .unwrap() as u32
}

fn options(tokens: usize, temperature: f32, top_k: usize, seed: u64) -> SampleOptions {
    SampleOptions {
        tokens,
        temperature,
        top_k: Some(top_k),
        seed,
    }
}

fn generate(g: &Generator, prompt: &[u32], o: &SampleOptions, chunk: usize) -> Vec<u32> {
    g.generate(ctx(), prompt, o, chunk, &mut |_| Ok(()))
        .unwrap()
        .tokens
}

#[test]
fn same_seed_same_text_other_seed_other_text() {
    let args = |seed: &'static str| {
        [
            "--prompt",
            "the ",
            "--tokens",
            "40",
            "--temperature",
            "1.0",
            "--seed",
            seed,
        ]
    };
    let a = sample(&args("5"));
    let b = sample(&args("5"));
    let c = sample(&args("6"));
    assert_eq!(a, b, "the same seed must give the same text");
    assert_ne!(a, c, "another seed must give other text");
    for out in [&a, &c] {
        assert!(out.starts_with("the "), "{out:?}");
        assert!(out.ends_with('\n'), "{out:?}");
        assert_eq!(out.chars().count(), 4 + 40 + 1, "{out:?}");
        assert!(out.chars().all(|ch| TEXT.contains(ch)), "{out:?}");
    }
}

#[test]
fn default_prompt_is_a_newline_and_long_prompts_keep_the_last_block() {
    let none = sample(&["--tokens", "12"]);
    let empty = sample(&["--prompt", "", "--tokens", "12"]);
    let newline = sample(&["--prompt", "\n", "--tokens", "12"]);
    assert_eq!(none, newline);
    assert_eq!(empty, newline);
    assert!(none.starts_with('\n'));
    // Only the last BLOCK characters are context, but the whole prompt is printed.
    let long = "the quick brown fox ";
    let tail = &long[long.len() - BLOCK..];
    let from_long = sample(&["--prompt", long, "--tokens", "12"]);
    let from_tail = sample(&["--prompt", tail, "--tokens", "12"]);
    assert_eq!(
        from_long,
        format!("{}{from_tail}", &long[..long.len() - BLOCK])
    );
}

#[test]
fn the_header_names_the_precision_trained_in_unless_one_is_asked_for() {
    let out = run(&["sample", "--checkpoint", checkpoint(), "--tokens", "3"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains(" under f32;"));
    let out = run(&[
        "sample",
        "--checkpoint",
        checkpoint(),
        "--tokens",
        "3",
        "--precision",
        "amp-f16",
    ]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains(" under amp-f16;"));
}

#[test]
fn top_k_1_is_the_argmax_of_the_logits_and_equals_a_tiny_temperature() {
    let ctx = ctx();
    for precision in [Precision::F32, Precision::AmpF16] {
        let (g, vocab) = generator(ctx, precision);
        let prompt = vocab.encode("the q").unwrap();
        let greedy = generate(&g, &prompt, &options(14, 0.8, 1, 1), 64);
        // Step by step on the CPU: the argmax of the last row of the window's logits.
        let mut context = prompt.clone();
        for (i, &token) in greedy.iter().enumerate() {
            let window = &context[context.len().saturating_sub(BLOCK)..];
            let logits = g.logits(ctx, window).unwrap();
            let last = &logits[(window.len() - 1) * vocab.len()..];
            assert_eq!(token, argmax(last), "{precision:?}: token {i}");
            context.push(token);
        }
        let cold = generate(&g, &prompt, &options(14, 1e-6, 200, 1), 64);
        assert_eq!(greedy, cold, "{precision:?}: temperature 1e-6");
        assert!(
            greedy
                .iter()
                .collect::<std::collections::BTreeSet<_>>()
                .len()
                > 2,
            "{precision:?}: a greedy text this uniform proves little: {:?}",
            vocab.decode(&greedy)
        );
    }
}

#[test]
fn every_draw_follows_the_logits_of_its_window_also_when_it_shifts() {
    let ctx = ctx();
    let (g, vocab) = generator(ctx, Precision::F32);
    let prompt = vocab.encode("lazy d").unwrap(); // 6 of the 8 positions
    let o = options(3 * BLOCK, 1.0, 5, 42);
    let drawn = generate(&g, &prompt, &o, 64);
    let mut context = prompt.clone();
    for (i, &token) in drawn.iter().enumerate() {
        let window = &context[context.len().saturating_sub(BLOCK)..];
        let logits = g.logits(ctx, window).unwrap();
        let last = &logits[(window.len() - 1) * vocab.len()..];
        let want = sample_reference(last, o.temperature, o.top_k, o.seed, i as u64);
        assert_eq!(token, want, "draw {i} (window of {})", window.len());
        context.push(token);
    }
}

#[test]
fn one_submission_and_one_readback_per_chunk() {
    let owned = common::ctx_owned();
    let ctx = &owned;
    let (g, vocab) = generator(ctx, Precision::F32);
    let prompt = vocab.encode("dog").unwrap();
    let o = options(10, 0.8, 200, 7);
    let mut chunks = Vec::new();
    let before = ctx.host_waits();
    let chunked = g
        .generate(ctx, &prompt, &o, 4, &mut |c| {
            chunks.push(c.len());
            Ok(())
        })
        .unwrap();
    assert_eq!(ctx.host_waits() - before, 3, "one wait per chunk");
    assert_eq!((chunked.submissions, chunked.readbacks), (3, 3));
    assert_eq!(chunks, [4, 4, 2]);
    let whole = g.generate(ctx, &prompt, &o, 64, &mut |_| Ok(())).unwrap();
    assert_eq!((whole.submissions, whole.readbacks), (1, 1));
    assert_eq!(whole.tokens, chunked.tokens, "chunking changes nothing");
}

#[test]
fn dropout_is_off_and_the_forward_is_the_training_networks() {
    let ctx = ctx();
    let ck = Checkpoint::load(Path::new(checkpoint())).unwrap();
    let SavedModel {
        spec,
        params,
        vocab,
    } = model_from_checkpoint(&ck, "gpt").unwrap();
    let vocab = vocab.expect("a character-level GPT's checkpoint lists its characters");
    let dropout = spec.description().unwrap()["gpt"]["dropout"].as_f64();
    assert_eq!(dropout.map(|p| p as f32), Some(0.2));
    let tokens = vocab.encode("over the").unwrap();
    for precision in [Precision::F32, Precision::AmpF16] {
        let g = Generator::new(ctx, &spec, &params, precision).unwrap();
        let logits = g.logits(ctx, &tokens).unwrap();
        // The same weights in a model without dropout.
        let no_dropout = ModelSpec::from_json(&model_json(vocab.len(), 0.0)).unwrap();
        let plain = Generator::new(ctx, &no_dropout, &params, precision).unwrap();
        assert_eq!(logits, plain.logits(ctx, &tokens).unwrap(), "{precision:?}");
        // The training network's forward (evaluation mode) gives the same bits.
        let mut trainer = webgpu_amp::train::Trainer::new(
            ctx,
            spec.clone(),
            webgpu_amp::train::StepConfig::new(
                precision,
                webgpu_amp::nn::LossKind::CrossEntropy,
                webgpu_amp::optim::OptimizerConfig::sgd(0.1),
            )
            .scaler_enabled(true),
            vocab.len(),
            &params,
        )
        .unwrap();
        let predicted = predict(ctx, &mut trainer, 1, &tokens).unwrap();
        assert_eq!(logits, predicted, "{precision:?}");
    }
}

/// Runs `command` under `script` (util-linux), which gives it a terminal; returns what the
/// terminal showed.
fn on_a_terminal(command: &str) -> String {
    let out = Command::new("script")
        .args(["-qec", command, "/dev/null"])
        .output()
        .expect("run script (util-linux)");
    assert!(
        out.status.success(),
        "{command}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The terminal turns each "\n" into "\r\n".
    String::from_utf8_lossy(&out.stdout).replace("\r\n", "\n")
}

#[test]
fn a_progress_bar_shows_on_the_terminal_only_when_stdout_is_redirected() {
    let d = dir();
    let file = d.join("progress.txt");
    let base = format!(
        "{BIN} sample --checkpoint {} --tokens 64 --chunk 8 --prompt dog",
        checkpoint()
    );
    let shown = on_a_terminal(&format!("{base} > {}", file.display()));
    assert!(shown.contains("/64 tokens"), "{shown:?}");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        !text.contains("tokens") && text.starts_with("dog"),
        "{text:?}"
    );
    assert_eq!(text.chars().count(), 3 + 64 + 1);
    let plain = on_a_terminal(&base);
    assert!(!plain.contains("/64 tokens"), "{plain:?}");
    assert!(plain.contains(text.trim_end()), "{plain:?} vs {text:?}");
}
