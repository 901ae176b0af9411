//! What cannot sample is one clean `error:` line: checkpoints without a model description or
//! a vocabulary (naming the file), bad flags (naming the flag), prompt tokens beyond the
//! vocabulary.

use webgpu_amp::Error;
use webgpu_amp::amp::policy::Precision;

use super::common::cli::{assert_says, error_line};
use super::common::ctx;
use super::{BLOCK, checkpoint, dir, generator, model_json, ok, options, run, sample, vocab_size};

/// A failed run's stderr: exactly one line, `error: ...`, holding every one of `needles`
/// (as `tests/cli_errors.rs` wants of every CLI error: no panic, no other output).
#[track_caller]
fn expect_error(args: &[&str], needles: &[&str]) -> String {
    let out = run(args);
    let what = format!("{args:?}");
    let line = error_line(&out, &what);
    assert_says(&line, &what, needles);
    assert!(out.stdout.is_empty(), "{what}: printed text before failing");
    line
}

#[test]
fn checkpoints_that_cannot_sample_are_errors_naming_the_file() {
    let d = dir();
    let missing = d.join("missing.safetensors");
    expect_error(
        &["sample", "--checkpoint", missing.to_str().unwrap()],
        &["missing.safetensors", "No such file"],
    );

    // An MNIST-style checkpoint: no model description.
    let mlp = d.join("mlp.safetensors");
    ok(&[
        "train",
        "--model",
        "mlp",
        "--dataset",
        "synthetic:64",
        "--steps",
        "1",
        "--no-validate",
        "--save",
        mlp.to_str().unwrap(),
    ]);
    expect_error(
        &["sample", "--checkpoint", mlp.to_str().unwrap()],
        &[
            "mlp.safetensors",
            "no model description",
            "only checkpoints of a GPT",
        ],
    );

    // A GPT trained on token ids: a model but no vocabulary.
    let tokens = d.join("tokens.safetensors");
    let ids: Vec<i64> = (0..2 * BLOCK as i64).map(|i| i % 5).collect();
    let view = safetensors::tensor::TensorView::new(
        safetensors::tensor::Dtype::I64,
        vec![2, BLOCK],
        bytemuck::cast_slice(&ids),
    )
    .unwrap();
    std::fs::write(
        &tokens,
        safetensors::serialize([("x", view.clone()), ("y", view)], None).unwrap(),
    )
    .unwrap();
    let model = d.join("tokens-model.json");
    std::fs::write(&model, model_json(5, 0.0)).unwrap();
    let token_ck = d.join("tokens-gpt.safetensors");
    ok(&[
        "train",
        "--model",
        model.to_str().unwrap(),
        "--dataset",
        tokens.to_str().unwrap(),
        "--steps",
        "1",
        "--batch-size",
        "2",
        "--no-validate",
        "--save",
        token_ck.to_str().unwrap(),
    ]);
    expect_error(
        &["sample", "--checkpoint", token_ck.to_str().unwrap()],
        &["tokens-gpt.safetensors", "no vocabulary"],
    );
}

#[test]
fn bad_flags_are_errors_naming_the_flag() {
    let ck = checkpoint();
    let bad = |flags: &[&str], needles: &[&str]| {
        let mut args = vec!["sample", "--checkpoint", ck];
        args.extend_from_slice(flags);
        expect_error(&args, needles)
    };
    // The prompt's characters must be in the vocabulary: the error names the character.
    bad(
        &["--prompt", "fox Z"],
        &["--prompt", "'Z'", "character 4", "not in the vocabulary"],
    );
    bad(&["--prompt", "é"], &["--prompt", "'é'", "character 0"]);
    bad(
        &["--tokens", "0"],
        &["--tokens must be 1 to 16777216, got 0"],
    );
    bad(
        &["--tokens", "16777217"],
        &["--tokens must be 1 to 16777216, got 16777217"],
    );
    bad(
        &["--tokens", "99999999999999999999999"],
        &["--tokens", "must be 1 to 16777216"],
    );
    bad(&["--tokens", "-3"], &["--tokens"]);
    // 1e-45 is positive but subnormal: a GPU flushes it to zero (it sampled newlines).
    for t in ["0", "-0.5", "NaN", "inf", "1e-45", "1e-31"] {
        bad(
            &["--temperature", t],
            &["--temperature must be finite and at least 1e-30, got"],
        );
    }
    bad(
        &["--top-k", "0"],
        &["--top-k must be 1 to the vocabulary size, got 0"],
    );
    let v = vocab_size();
    let over = (v + 1).to_string();
    bad(
        &["--top-k", &over],
        &[
            &format!("--top-k must be 1 to the vocabulary size, got {over}"),
            &format!("gpt.safetensors's vocabulary has {v} tokens"),
        ],
    );
    bad(&["--chunk", "0"], &["--chunk"]);
    bad(&["--precision", "f8"], &["f8"]);
    // The vocabulary size itself keeps every token; unset, top-k is 200 capped to it.
    let all = v.to_string();
    let every = sample(&["--top-k", &all, "--tokens", "20", "--seed", "3"]);
    assert_eq!(every, sample(&["--tokens", "20", "--seed", "3"]));
}

#[test]
fn a_prompt_token_beyond_the_vocabulary_is_an_error() {
    let ctx = ctx();
    let (g, _) = generator(ctx, Precision::F32);
    let e = g
        .generate(ctx, &[1, 999], &options(3, 1.0, 5, 0), 64, &mut |_| Ok(()))
        .unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument(ref m) if m.contains("999")),
        "{e}"
    );
    let e = g
        .generate(ctx, &[], &options(3, 1.0, 5, 0), 64, &mut |_| Ok(()))
        .unwrap_err();
    assert!(e.to_string().contains("at least one token"), "{e}");
}
