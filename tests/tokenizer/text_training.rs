//! A text under a tokenizer, in training and sampling (see the parent's docs).

use std::path::Path;

use webgpu_amp::data::{Inputs, Labels, Split, TokenizedText, Tokenizer};
use webgpu_amp::train::{ModelChoice, model_and_tokenized};

use super::common::cli::{assert_says, command, error_line, fresh_dir, output_text};
use super::{TEXT, fixtures_of, ids};

/// Long enough for windows of 16 tokens in both parts (a few hundred tokens).
fn long_text() -> String {
    (0..6)
        .map(|i| format!("{i}: {TEXT}The quick brown fox, line {i}.\n"))
        .collect()
}

/// Input and target ids of sample `i`.
fn window(set: &webgpu_amp::data::Dataset, i: usize) -> (Vec<u32>, Vec<u32>) {
    match (&set.x, &set.y) {
        (Inputs::Tokens { ids, .. }, Labels::Tokens { targets, .. }) => (
            ids.sample(i).unwrap().to_vec(),
            targets.sample(i).unwrap().to_vec(),
        ),
        _ => panic!("{}: not token windows", set.name),
    }
}

fn run(args: &[&str]) -> std::process::Output {
    command().args(args).output().unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn llama_tiny_trains_on_a_text_under_a_tokenizer_and_samples_with_it() {
    let text = long_text();
    let Some((dir, file)) = fixtures_of("train", &text) else {
        return;
    };
    let tokenizer = dir.join("smollm2").join("tokenizer.json");
    // The windows are `tokenize`'s ids, cut in 16-token windows shifted by one, 90/10.
    let out = run(&["tokenize", "--tokenizer", s(&tokenizer), s(&file)]);
    assert!(out.status.success(), "{}", output_text(&out));
    let want = ids(&out.stdout, "tokenize");
    let tok = Tokenizer::from_file(&tokenizer).unwrap();
    let encoded = TokenizedText::encode("text", &text, &tok).unwrap();
    assert_eq!(encoded.ids(), &want[..], "the data's ids vs tokenize's");
    let llama = ModelChoice::Windowed {
        model: Box::new(ModelChoice::Preset("llama-tiny".into())),
        seq_len: 16,
    };
    let (spec, split) = model_and_tokenized(Some(&llama), &encoded, tok.vocab_size()).unwrap();
    assert_eq!(spec.tokens().unwrap().vocab_size, tok.vocab_size());
    let Split {
        train, validation, ..
    } = split;
    let validation = validation.unwrap();
    let cut = want.len() * 9 / 10;
    assert!(want.len() >= 200, "{} tokens", want.len());
    assert_eq!(train.n, cut - 16);
    assert_eq!(validation.n, want.len() - cut - 16);
    for i in 0..train.n {
        assert_eq!(
            window(&train, i),
            (want[i..i + 16].to_vec(), want[i + 1..i + 17].to_vec()),
            "training window {i}"
        );
    }
    assert_eq!(window(&validation, 0).0, want[cut..cut + 16].to_vec());

    // Training, with the tokenizer exported beside the weights.
    let ck = dir.join("ck.safetensors");
    let folder = dir.join("exported");
    let trained = |extra: &[&str]| {
        let mut args = vec![
            "train",
            "--dataset",
            &format!("text:{}", s(&file)),
            "--seq-len",
            "16",
            "--steps",
            "3",
            "--batch-size",
            "4",
            "--precision",
            "amp-f16",
        ]
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>();
        args.extend(extra.iter().map(|a| a.to_string()));
        command().args(&args).output().unwrap()
    };
    let out = trained(&[
        "--model",
        "llama-tiny",
        "--tokenizer",
        s(&tokenizer),
        "--save",
        s(&ck),
        "--export-hf",
        s(&folder),
    ]);
    assert!(out.status.success(), "{}", output_text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let loss = |name: &str| -> f64 {
        let line = stdout.lines().find(|l| l.starts_with(name)).unwrap();
        line[name.len()..].trim().parse().unwrap()
    };
    // From about ln(vocab) at the start, and finite.
    let ln_vocab = (tok.vocab_size() as f64).ln();
    assert!((loss("first loss") - ln_vocab).abs() < 1.0, "{stdout}");
    assert!(loss("val loss").is_finite(), "{stdout}");
    assert_eq!(
        std::fs::read(folder.join("tokenizer.json")).unwrap(),
        std::fs::read(&tokenizer).unwrap(),
        "the exported folder carries the run's tokenizer"
    );

    // Sampling decodes with it: a prompt of multi-byte characters, valid UTF-8 out.
    let prompt = "Grüße 日本";
    let out = run(&[
        "sample",
        "--checkpoint",
        s(&ck),
        "--tokenizer",
        s(&tokenizer),
        "--prompt",
        prompt,
        "--tokens",
        "24",
        "--chunk",
        "5",
    ]);
    assert!(out.status.success(), "{}", output_text(&out));
    let sampled = String::from_utf8(out.stdout.clone()).expect("sampled text is UTF-8");
    assert!(sampled.starts_with(prompt), "{sampled}");
    // Without the tokenizer: one error naming the flag.
    let line = error_line(
        &run(&["sample", "--checkpoint", s(&ck), "--tokens", "4"]),
        "sample without --tokenizer",
    );
    assert_says(
        &line,
        "sample without --tokenizer",
        &["no vocabulary", "--tokenizer FILE"],
    );

    // --model hf:DIR trains on a text with the folder's tokenizer.json by default (without
    // it the text is characters, which the folder's vocabulary does not match).
    let hf = format!("hf:{}", s(&folder));
    let out = trained(&["--model", &hf]);
    assert!(out.status.success(), "{}", output_text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("the hf: folder's"),
        "{}",
        output_text(&out)
    );
    std::fs::remove_file(folder.join("tokenizer.json")).unwrap();
    let line = error_line(
        &trained(&["--model", &hf]),
        "an hf folder without its tokenizer",
    );
    assert_says(&line, "an hf folder without its tokenizer", &["vocab_size"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_tokenizers_and_texts_in_training_are_one_line_errors() {
    let Some((fx, file)) = fixtures_of("train-errors", &long_text()) else {
        return;
    };
    let dir = fresh_dir("train-errors-files");
    let good = fx.join("gpt2").join("tokenizer.json");
    let text = format!("text:{}", s(&file));
    let train = |extra: &[&str]| {
        let mut args = vec!["train", "--steps", "1", "--batch-size", "2"];
        args.extend_from_slice(extra);
        run(&args)
    };
    let case = |what: &str, extra: &[&str], needles: &[&str]| {
        let line = error_line(&train(extra), what);
        assert_says(&line, what, needles);
    };
    let llama = ["--model", "llama-tiny", "--seq-len", "16"];
    let with = |more: &[&'static str]| [&llama[..], more].concat();
    let missing = dir.join("missing.json");
    case(
        "a missing tokenizer",
        &[
            &with(&["--dataset"])[..],
            &[text.as_str(), "--tokenizer", s(&missing)],
        ]
        .concat(),
        &["--tokenizer", "missing.json"],
    );
    let broken = dir.join("broken.json");
    std::fs::write(&broken, "{\"model\": 3}").unwrap();
    case(
        "an invalid tokenizer",
        &[
            &with(&["--dataset"])[..],
            &[text.as_str(), "--tokenizer", s(&broken)],
        ]
        .concat(),
        &["--tokenizer", "broken.json", "tokenizer.json"],
    );
    // A model whose vocabulary is smaller than the tokenizer's ids.
    let small = dir.join("small.json");
    std::fs::write(
        &small,
        r#"{"llama": {"vocab_size": 40, "hidden_size": 16, "intermediate_size": 32,
            "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
            "max_position_embeddings": 32, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
            "tie_word_embeddings": true}, "seq_len": 16}"#,
    )
    .unwrap();
    case(
        "an id over the model's vocabulary",
        &[
            "--model",
            s(&small),
            "--dataset",
            &text,
            "--tokenizer",
            s(&good),
        ],
        &["text.txt", "is id", "not below the model's vocab_size 40"],
    );
    let short = dir.join("short.txt");
    std::fs::write(&short, "a few words").unwrap();
    let short_text = format!("text:{}", s(&short));
    case(
        "a text too short for one window",
        &[
            &with(&["--dataset"])[..],
            &[short_text.as_str(), "--tokenizer", s(&good)],
        ]
        .concat(),
        &["short.txt", "shorter than one window", "seq_len + 1 = 17"],
    );
    case(
        "a model with no vocabulary of ids",
        &[
            "--model",
            "mlp",
            "--dataset",
            &text,
            "--tokenizer",
            s(&good),
        ],
        &["mlp", "no vocabulary of ids"],
    );
    case(
        "data that is not text",
        &[
            &with(&["--dataset", "synthetic", "--tokenizer"])[..],
            &[s(&good)],
        ]
        .concat(),
        &["--tokenizer", "synthetic", "not text"],
    );
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&fx);
}
