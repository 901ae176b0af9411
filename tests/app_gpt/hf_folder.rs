//! A Hugging Face folder picked in the app (issue 41, What to build 6): the page hands its
//! files' bytes ([`MemoryFolder`]; the model is `hf:FOLDER`), the native setup panel loads a
//! path ([`DiskFolder`]; `hf:PATH`, the CLI's flag).
//! The model is the folder's config, its first weights the folder's tensors, the embedded
//! text is encoded by the folder's tokenizer and the sample panel decodes through it; the
//! first and last losses equal the CLI's `train --model hf:DIR` on the same text. A folder
//! that is not a Llama one, has no tokenizer, or is too big for the adapter says so, the
//! last before any weight is read.

use std::sync::Arc;

use eframe::egui;
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use serde_json::json;
use webgpu_amp::amp::policy::Precision;
use webgpu_amp::app::autorun::Autorun;
use webgpu_amp::app::session::{SessionConfig, Status};
use webgpu_amp::app::{App, Tab};
use webgpu_amp::data::TokenizedText;
use webgpu_amp::data::hf::{DiskFolder, HostTensor, LlamaConfig, MemoryFolder, TOKENIZER};
use webgpu_amp::train::{ModelChoice, model_and_tokenized};

use super::common;
use super::common::cli::{assert_success, command, fresh_dir, json_lines};

/// A small GQA Llama over a byte-level vocabulary (257 ids used of 260).
const CONFIG: &str = r#"{"model_type": "llama", "vocab_size": 260, "hidden_size": 32,
    "intermediate_size": 48, "num_hidden_layers": 1, "num_attention_heads": 4,
    "num_key_value_heads": 2, "max_position_embeddings": 32, "rope_theta": 50000.0,
    "rms_norm_eps": 1e-05, "tie_word_embeddings": false}"#;

/// SmolLM2-135M's config: its flat f32 buffers are 538 MB, over a browser's 256 MiB.
const TOO_BIG: &str = r#"{"model_type": "llama", "vocab_size": 49152, "hidden_size": 576,
    "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9,
    "num_key_value_heads": 3, "max_position_embeddings": 64, "tie_word_embeddings": true}"#;

/// A byte-level BPE without merges (every byte its own token, in the byte-level alphabet's
/// order) and `<|endoftext|>` at 256: GPT-2's shape, small.
fn tokenizer_json() -> String {
    let mut alphabet: Vec<char> = tokenizers::pre_tokenizers::byte_level::ByteLevel::alphabet()
        .into_iter()
        .collect();
    alphabet.sort();
    let vocab: serde_json::Map<String, serde_json::Value> = (alphabet.iter().enumerate())
        .map(|(i, c)| (c.to_string(), json!(i)))
        .collect();
    let byte_level = json!({"type": "ByteLevel", "add_prefix_space": false,
        "trim_offsets": true, "use_regex": true});
    json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": [{"id": 256, "content": "<|endoftext|>", "single_word": false,
            "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
        "normalizer": null, "pre_tokenizer": byte_level, "post_processor": null,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": null, "unk_token": null,
            "continuing_subword_prefix": null, "end_of_word_suffix": null, "fuse_unk": false,
            "byte_fallback": false, "ignore_merges": false, "vocab": vocab, "merges": []}
    })
    .to_string()
}

/// The files of a folder of `config` with weights drawn from `seed` (written by the family's
/// export, as `--export-hf` writes them) and the tokenizer.
fn folder_files(config: &str, seed: u64) -> Vec<(String, Vec<u8>)> {
    let config = LlamaConfig::from_json(config, "config").unwrap();
    let ids = TokenizedText::from_ids("ids", (0..400).map(|i| i % 250).collect()).unwrap();
    let (spec, _) = model_and_tokenized(Some(&ModelChoice::hf(config)), &ids, 257).unwrap();
    let shapes = spec.parameters();
    let tensors: Vec<HostTensor> = (spec.init_params(seed).into_iter())
        .map(|(name, values)| HostTensor {
            shape: shapes
                .iter()
                .find(|p| p.name == name)
                .unwrap()
                .shape
                .clone(),
            name: spec.export_name(&name).unwrap(),
            values,
        })
        .collect();
    let family = spec.family.as_ref().expect("a Llama is of a family");
    let mut files: Vec<(String, Vec<u8>)> = (family.export_folder(&tensors).unwrap())
        .into_iter()
        .map(|(name, bytes)| (name.to_string(), bytes))
        .collect();
    files.push((TOKENIZER.into(), tokenizer_json().into_bytes()));
    files
}

fn memory(files: &[(String, Vec<u8>)]) -> Box<MemoryFolder> {
    Box::new(MemoryFolder::new("tiny-llama", files.to_vec()).unwrap())
}

/// One amp-f16 mode, 2 steps at batch 4, a sample at the last step.
fn config() -> SessionConfig {
    SessionConfig {
        modes: vec![Precision::AmpF16],
        batch_size: 4,
        steps: 2,
        sample_every: 2,
        eval_every: SessionConfig::NEVER,
        profile_every: SessionConfig::NEVER,
        ..Default::default()
    }
}

#[test]
fn a_picked_folder_trains_from_its_weights_like_the_cli_and_samples_through_its_tokenizer() {
    let files = folder_files(CONFIG, 7);
    let mut app = App::new(Arc::new(common::ctx_owned()), config());
    let summary = app.pick_folder("tiny-llama", memory(&files)).unwrap();
    assert!(
        summary.contains("hf:tiny-llama") && summary.contains("vocabulary 260"),
        "{summary}"
    );
    assert!(summary.contains("257 ids"), "{summary}");
    assert_eq!(
        (app.config.model.as_str(), app.config.dataset.as_str()),
        ("hf:tiny-llama", "hamlet")
    );
    app.tab = Tab::Samples;
    // Sampled bytes need not be whole UTF-8 characters: U+FFFD, which the test fonts lack.
    let mut harness = Harness::builder()
        .with_size(egui::vec2(1280.0, 820.0))
        .allow_missing_glyphs()
        .build_ui_state(|ui, app: &mut App| app.update(ui), app);
    harness.step();
    super::start_and_wait(&mut harness);
    let app = harness.state();
    assert_eq!(*app.session.status(), Status::Finished);
    let run = &app.session.runs()[0];
    let losses: Vec<f32> = run.history.iter().map(|s| s.loss).collect();
    assert_eq!(losses.len(), 2);
    // A tokenized split has no character vocabulary: a sample at all is the tokenizer's.
    let samples: Vec<u64> = run.samples.iter().map(|s| s.0).collect();
    assert_eq!(samples, [2]);
    let text = run.samples[0].1.clone();
    assert!(
        text.starts_with('\n') && text.chars().count() > 1,
        "{text:?}"
    );
    harness.step();
    assert_eq!(harness.query_all_by_label(&text).count(), 1, "{text:?}");

    // The CLI on the same folder, with the app's recipe: the same losses (same device).
    let dir = fresh_dir("app-hf-folder").join("tiny-llama");
    std::fs::create_dir_all(&dir).unwrap();
    for (name, bytes) in &files {
        std::fs::write(dir.join(name), bytes).unwrap();
    }
    let metrics = dir.with_file_name("metrics.jsonl");
    let model = format!("hf:{}", dir.display());
    let out = command()
        .args(["train", "--model", &model, "--dataset", "hamlet"])
        .args([
            "--precision",
            "amp-f16",
            "--steps",
            "2",
            "--batch-size",
            "4",
        ])
        .args(["--optimizer", "adam", "--lr", "0.001", "--beta2", "0.999"])
        .args(["--weight-decay", "0", "--clip-grad-norm", "0"])
        .args(["--lr-schedule", "constant", "--seed", "0", "--no-validate"])
        .arg("--metrics")
        .arg(&metrics)
        .output()
        .unwrap();
    assert_success(&out, "train --model hf:DIR");
    let lines = json_lines(&metrics);
    let summary = (lines.iter().rev())
        .find_map(|l| l.get("summary"))
        .expect("a summary line");
    let cli = [&summary["first_loss"], &summary["final_loss"]].map(|v| v.as_f64().unwrap());
    for (app_loss, cli_loss) in losses.iter().zip(cli) {
        let diff = (*app_loss as f64 - cli_loss).abs() / cli_loss.abs();
        assert!(diff < 1e-5, "app {losses:?} against the CLI's {cli:?}");
    }

    // The native setup panel loads the same folder from its path.
    harness.get_by_label("Reset").click();
    harness.state_mut().folder_path = dir.display().to_string();
    harness.step();
    harness.get_by_label("Load").click();
    harness.step();
    let app = harness.state();
    let note = app.folder_note.clone().expect("Load says what it loaded");
    assert!(note.as_ref().is_ok_and(|s| s.contains(&model)), "{note:?}");
    // Named as the CLI's flag names it, which the resume command of a closed window says.
    assert_eq!(app.config.model, model);
}

#[test]
fn a_folder_without_a_tokenizer_or_not_a_llama_or_too_big_says_so() {
    // A browser's limits (256 MiB per buffer), which the last folder passes.
    let ctx = Arc::new(common::ctx_with_browser_limits());
    let mut app = App::new(ctx.clone(), config());
    let files = folder_files(CONFIG, 7);
    let without: Vec<_> = (files.iter())
        .filter(|&(name, _)| name != TOKENIZER)
        .cloned()
        .collect();
    common::expect_err(
        app.pick_folder("tiny-llama", memory(&without)),
        &["tiny-llama", "no tokenizer.json"],
    );
    let mut gpt2 = files.clone();
    gpt2[0].1 = br#"{"model_type": "gpt2", "n_embd": 32}"#.to_vec();
    assert_eq!(gpt2[0].0, "config.json");
    common::expect_err(
        app.pick_folder("tiny-llama", memory(&gpt2)),
        &["tiny-llama/config.json", "model_type `gpt2`", "Llama"],
    );
    assert_eq!(app.config.model, "mlp", "a refused folder changes nothing");
    common::expect_err(
        app.pick_folder(
            "gone",
            Box::new(DiskFolder::new("/nonexistent/gone".as_ref())),
        ),
        &["/nonexistent/gone", "not a folder"],
    );

    // The page's autorun of a picked folder's model waits for the folder.
    let autorun = Autorun::from_query("autorun=1&model=hf:&steps=1&batch=4")
        .unwrap()
        .expect("autorun asked for");
    assert_eq!(autorun.config.dataset, "hamlet");
    let mut app = App::new(ctx, autorun.config);
    app.autostart = true;
    for i in 0..5 {
        app.tick_at(i as f64);
    }
    assert_eq!(*app.session.status(), Status::Idle);
    // SmolLM2's config and no weights at all: the limits fail it at Start, before the
    // folder's (missing) weights are looked for.
    let mut big = vec![("config.json".to_string(), TOO_BIG.as_bytes().to_vec())];
    big.push((TOKENIZER.into(), tokenizer_json().into_bytes()));
    app.pick_folder("big", Box::new(MemoryFolder::new("big", big).unwrap()))
        .unwrap();
    let mut now = 10.0;
    while !matches!(app.session.status(), Status::Failed(_)) && now < 20.0 {
        now += 1.0 / 60.0;
        app.tick_at(now);
    }
    let Status::Failed(message) = app.session.status() else {
        panic!("expected a failure, got {:?}", app.session.status());
    };
    assert!(
        message.contains("max_buffer_size of 268.4 MB") && message.contains("hf:big"),
        "{message}"
    );
    assert!(!message.contains("model.safetensors"), "{message}");
    assert_eq!(
        app.session.ctx().memory().live_bytes,
        0,
        "nothing allocated"
    );
}
