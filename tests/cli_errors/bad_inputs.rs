//! Bad input on the GPT, `sample` and text surfaces (issue 24): files past their caps,
//! weights and moments that are not finite, contradictory or ignored flags, and messages
//! that must point at the real cause. Each case is one `error:` line, never a panic, an
//! abort or a silent wrong result.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use webgpu_amp::data::Vocab;
use webgpu_amp::nn::gpt::gpt_preset;
use webgpu_amp::train::checkpoint::Checkpoint;

use super::common::cli::assert_success;
use super::fixtures::{checkpoint_of, gpt_checkpoint};
use super::{BIN, TempDir, expect_error, run, run_train};

/// `webgpu-amp ARGS` under an address-space limit of 4 GB: a file read without a cap
/// fails the child (an abort, a failed test), not the machine.
fn run_limited(args: &[&str]) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 4000000 && exec \"$@\"")
        .arg("sh")
        .arg(BIN)
        .args(args)
        .env_remove("WEBGPU_AMP_BACKEND")
        .env_remove("WEBGPU_AMP_F16_STORAGE")
        .output()
        .expect("run webgpu-amp under sh")
}

/// A file of `bytes` bytes that takes no disk (sparse: zeros).
fn sparse(tmp: &TempDir, name: &str, bytes: u64) -> PathBuf {
    let path = tmp.path(name);
    std::fs::File::create(&path)
        .unwrap()
        .set_len(bytes)
        .unwrap();
    path
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

#[test]
fn text_from_a_device_stops_at_its_cap() {
    // Read until the kernel killed it (exit 137 after 44 s on a 24 GB machine).
    let out = run_limited(&[
        "train",
        "--model",
        "gpt-tiny",
        "--dataset",
        "text:/dev/zero",
        "--steps",
        "1",
    ]);
    expect_error(
        &out,
        &["/dev/zero", "more than the text file cap of 256 MiB"],
    );
}

#[test]
fn checkpoints_from_a_device_are_refused_before_reading() {
    // With a cap of 4 GiB, reading /dev/zero up to it took gigabytes of memory first (under
    // this test's 4 GB limit: "cannot read: out of memory").
    let zero = "/dev/zero";
    for args in [
        &["sample", "--checkpoint", zero][..],
        &[
            "train",
            "--dataset",
            "synthetic",
            "--steps",
            "1",
            "--init",
            zero,
        ],
        &[
            "train",
            "--dataset",
            "synthetic",
            "--steps",
            "1",
            "--resume",
            zero,
        ],
    ] {
        let out = run_limited(args);
        expect_error(
            &out,
            &[
                "/dev/zero: not a regular file",
                "a checkpoint is read only from a regular file",
            ],
        );
    }
}

#[test]
fn files_over_their_caps_are_refused_by_their_size() {
    let tmp = TempDir::new("caps");
    let text = sparse(&tmp, "big.txt", 256 * MIB + 1);
    let out = run_limited(&["train", "--dataset", &format!("text:{}", s(&text))]);
    expect_error(
        &out,
        &[
            s(&text),
            "268435457 bytes, over the text file cap of 256 MiB",
        ],
    );
    let data = sparse(&tmp, "big.safetensors", 2 * GIB + 1);
    let out = run_limited(&["train", "--dataset", s(&data)]);
    expect_error(&out, &[s(&data), "over the data file cap of 2 GiB"]);
    let model = sparse(&tmp, "big.json", 16 * MIB + 1);
    let out = run_limited(&["train", "--model", s(&model), "--dataset", "synthetic"]);
    expect_error(&out, &[s(&model), "over the model file cap of 16 MiB"]);
    let ck = sparse(&tmp, "big-ck.safetensors", 4 * GIB + 1);
    let out = run_limited(&["train", "--dataset", "synthetic", "--init", s(&ck)]);
    expect_error(&out, &[s(&ck), "over the checkpoint cap of 4 GiB"]);
    let out = run_limited(&["sample", "--checkpoint", s(&ck)]);
    expect_error(&out, &[s(&ck), "over the checkpoint cap of 4 GiB"]);
}

/// The flags of an f32 run on synthetic data that saves to `ck`.
fn f32_saving(ck: &Path) -> [&str; 6] {
    [
        "--dataset",
        "synthetic",
        "--precision",
        "f32",
        "--save",
        s(ck),
    ]
}

#[test]
fn a_moments_file_over_its_cap_is_refused_on_resume() {
    let tmp = TempDir::new("moments-cap");
    let ck = tmp.path("run.safetensors");
    // Every moment goes to a moments file (the test hook lowers the header's share to 0).
    let out = Command::new(BIN)
        .args(super::train(&f32_saving(&ck)))
        .env("WEBGPU_AMP_TEST_INLINE_MOMENTS_MAX", "0")
        .env_remove("WEBGPU_AMP_BACKEND")
        .output()
        .unwrap();
    assert_success(&out, "webgpu-amp");
    let moments = std::fs::read_dir(&tmp.0)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .find(|n| n.contains(".optimizer-"))
        .expect("a moments file");
    sparse(&tmp, &moments, 8 * GIB + 1);
    let out = run_limited(&[
        "train",
        "--dataset",
        "synthetic",
        "--steps",
        "2",
        "--resume",
        s(&ck),
    ]);
    expect_error(&out, &[&moments, "over the moments file cap of 8 GiB"]);
}

#[test]
fn weights_that_are_not_finite_are_refused_naming_the_tensor() {
    // A checkpoint with NaN weights sampled newlines, with no word.
    let tmp = TempDir::new("nan-weights");
    let path = tmp.path("gpt.safetensors");
    let mut ck = gpt_checkpoint(&path);
    let t = ck
        .params
        .iter_mut()
        .find(|t| t.name == "transformer.h.0.attn.c_attn.weight")
        .unwrap();
    t.values[5] = f32::NAN;
    std::fs::write(&path, ck.to_bytes().unwrap()).unwrap();
    let out = run(&["sample", "--checkpoint", s(&path), "--tokens", "4"], None);
    expect_error(
        &out,
        &[
            s(&path),
            "`transformer.h.0.attn.c_attn.weight`",
            "holds NaN at element 5",
        ],
    );
    // --init: an inf in a parameter file, as PyTorch might have saved it.
    let init = tmp.write(
        "init.safetensors",
        &super::fixtures::safetensors_file(&[
            (
                "linear.weight",
                safetensors::Dtype::F32,
                vec![1, 10],
                super::fixtures::f32_bytes(&[0.5, 0.5, f32::INFINITY, 0., 0., 0., 0., 0., 0., 0.]),
            ),
            (
                "linear.bias",
                safetensors::Dtype::F32,
                vec![1],
                super::fixtures::f32_bytes(&[0.0]),
            ),
        ]),
    );
    let out = run_train(&["--dataset", "synthetic", "--init", s(&init)], None);
    expect_error(
        &out,
        &[s(&init), "`linear.weight`", "holds inf at element 2"],
    );
}

/// A checkpoint of the mlp on synthetic data after a step of Adam, whose moments `edit`
/// changes; the edited file's path.
fn edited_moments(tmp: &TempDir, name: &str, edit: impl Fn(&mut Checkpoint)) -> PathBuf {
    let ck = tmp.path("run.safetensors");
    if !ck.exists() {
        let out = run_train(&f32_saving(&ck), None);
        assert_success(&out, "webgpu-amp");
    }
    let mut saved = Checkpoint::load(&ck).unwrap();
    edit(&mut saved);
    tmp.write(name, &saved.to_bytes().unwrap())
}

#[test]
fn moments_that_are_not_finite_or_negative_are_refused_on_resume() {
    // They loaded and trained to NaN.
    let tmp = TempDir::new("nan-moments");
    let set = |moment: &'static str, value: f32| {
        move |ck: &mut Checkpoint| {
            let o = ck.optimizer.as_mut().unwrap();
            let per = o.moments.get_mut(moment).unwrap();
            per.get_mut("linear.weight").unwrap()[3] = value;
        }
    };
    let cases = [
        (
            "nan.safetensors",
            set("exp_avg", f32::NAN),
            "`exp_avg.linear.weight` holds NaN",
        ),
        (
            "negative.safetensors",
            set("exp_avg_sq", -1.0),
            "`exp_avg_sq.linear.weight` holds -1 at element 3",
        ),
    ];
    for (name, edit, needle) in cases {
        let path = edited_moments(&tmp, name, edit);
        let resume = [
            "--dataset",
            "synthetic",
            "--steps",
            "2",
            "--resume",
            s(&path),
        ];
        let out = run(&[&["train", "--no-validate"][..], &resume].concat(), None);
        expect_error(&out, &[s(&path), needle, "cannot continue"]);
        // The weights alone are fine: --init takes them.
        let out = run_train(&["--dataset", "synthetic", "--init", s(&path)], None);
        assert_success(&out, "webgpu-amp");
    }
}

#[test]
fn a_min_lr_above_the_lr_is_refused() {
    // The cosine "decay" raised the rate from 1e-3 to 0.9.
    let out = run_train(&["--model", "gpt-tiny", "--min-lr", "0.9"], None);
    let line = expect_error(&out, &["--min-lr", "got 0.9 with --lr 0.001"]);
    assert_eq!(out.status.code(), Some(2), "{line}");
    let out = run_train(
        &["--model", "gpt-tiny", "--lr", "1e-4", "--min-lr", "2e-4"],
        None,
    );
    expect_error(&out, &["--min-lr", "at most the learning rate"]);
}

#[test]
fn model_files_say_where_their_json_is_wrong() {
    let tmp = TempDir::new("json");
    let train = |json: &str, file: &str| {
        let model = tmp.write(file, json.as_bytes());
        let out = run_train(&["--model", s(&model), "--batch-size", "1"], None);
        (out, model)
    };
    // A trailing comma or a NaN said "unknown field `gpt`, expected `input` or `layers`".
    for (json, at) in [
        (
            "{\"gpt\": {\"n_layer\": 1,}}",
            "trailing comma at line 1 column 23",
        ),
        ("{\"gpt\": {\n  \"dropout\": NaN}}", "at line 2 column 14"),
    ] {
        let (out, model) = train(json, "syntax.json");
        let line = expect_error(&out, &[s(&model), "syntax error", at]);
        assert!(!line.contains("unknown field"), "{line}");
    }
    // Keys beside `gpt` were ignored, while unknown keys inside it were refused.
    let (out, model) = train("{\"gpt\": {\"n_layer\": 1}, \"lr\": 0.1}", "extra.json");
    expect_error(&out, &[s(&model), "unknown field `lr`, expected `gpt`"]);
    // `{"gpt": {}}` filled GPT-2's defaults, then blamed the data.
    let (out, model) = train("{\"gpt\": {}}", "empty.json");
    expect_error(
        &out,
        &[
            s(&model),
            "vocab_size 50304 must match the 65 characters of hamlet's vocabulary",
            "the description gives no vocab_size, block_size, n_layer",
            "GPTConfig's defaults (vocab_size 50304, block_size 1024",
        ],
    );
    // A block_size of 0 is the description's problem; it said "data: hamlet: the block size
    // must be at least 1".
    let (out, model) = train(
        "{\"gpt\": {\"vocab_size\": 65, \"block_size\": 0, \"n_layer\": 1, \"n_head\": 1, \"n_embd\": 8}}",
        "block.json",
    );
    let line = expect_error(&out, &[s(&model), "block_size must be at least 1"]);
    assert!(!line.contains("data:"), "{line}");
}

#[test]
fn flags_a_resume_would_override_are_refused() {
    let tmp = TempDir::new("resume-flags");
    let ck = tmp.path("run.safetensors");
    let out = run_train(
        &["--dataset", "synthetic", "--seed", "3", "--save", s(&ck)],
        None,
    );
    assert_success(&out, "webgpu-amp");
    let resume = |extra: &[&str]| {
        let mut args = vec!["--dataset", "synthetic", "--resume", s(&ck)];
        args.extend_from_slice(extra);
        let mut full = vec!["train", "--no-validate", "--steps", "2"];
        full.extend(args);
        run(&full, None)
    };
    let cases: [(&[&str], &[&str]); 4] = [
        (
            &["--init", s(&ck)],
            &["--init", "--resume", "--init would be ignored"],
        ),
        (&["--seed", "4"], &["--seed 4", "the checkpoint's seed 3"]),
        (
            &["--init-scale", "1024"],
            &["--init-scale 1024", "continues the checkpoint's GradScaler"],
        ),
        (
            &["--growth-factor", "3"],
            &["--growth-factor 3", "growth_factor 2"],
        ),
    ];
    for (extra, needles) in cases {
        let out = resume(extra);
        let line = expect_error(&out, needles);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {line}");
    }
    // The checkpoint's own values are no conflict.
    let out = resume(&["--seed", "3", "--growth-factor", "2"]);
    assert_success(&out, "webgpu-amp");
}

#[test]
fn flags_the_optimizer_would_ignore_are_refused() {
    for (flags, needle) in [
        (
            &["--optimizer", "adam", "--momentum", "0.9"][..],
            "--momentum is a setting of --optimizer sgd, but this run's optimizer is Adam",
        ),
        (
            &["--model", "gpt-tiny", "--nesterov"],
            "--nesterov is a setting of --optimizer sgd, but this run's optimizer is AdamW",
        ),
        (
            &["--optimizer", "sgd", "--beta1", "0.8"],
            "--beta1 is a setting of --optimizer adam or adamw, but this run's optimizer is SGD",
        ),
    ] {
        let mut args = vec!["--dataset", "synthetic"];
        if flags.contains(&"--model") {
            args.clear();
        }
        args.extend_from_slice(flags);
        let out = run_train(&args, None);
        let line = expect_error(&out, &[needle]);
        assert_eq!(out.status.code(), Some(2), "{line}");
    }
}

#[test]
fn adamw_is_called_adamw() {
    // A GPT's default optimizer is AdamW; its range errors said "Adam".
    let tmp = TempDir::new("adamw");
    let text = tmp.write("tiny.txt", "to be or not to be\n".repeat(20).as_bytes());
    for flags in [
        &["--model", "gpt-tiny", "--beta2", "1"][..],
        &["--dataset", &format!("text:{}", s(&text)), "--eps", "-1"],
    ] {
        let out = run_train(flags, None);
        let line = expect_error(&out, &["AdamW: Invalid"]);
        assert!(!line.contains("(Adam:"), "{line}");
    }
}

#[test]
fn a_vocabulary_without_a_newline_does_not_blame_an_ungiven_flag() {
    // The default prompt is "\n"; a vocabulary without it reported a --prompt problem when
    // no prompt was given.
    let tmp = TempDir::new("vocab");
    let vocab = Vocab::from_chars(vec!['a', 'b', 'c']).unwrap();
    let config = std::sync::Arc::new(gpt_preset("gpt-tiny", 3).unwrap());
    let spec = webgpu_amp::nn::ModelSpec::of_family(config, "gpt", 64).unwrap();
    let path = tmp.path("abc.safetensors");
    checkpoint_of(&spec, Some(vocab)).save(&path).unwrap();
    let out = run(&["sample", "--checkpoint", s(&path), "--tokens", "2"], None);
    let line = expect_error(&out, &[s(&path), "the default prompt", "not in"]);
    assert!(
        !line.contains("--"),
        "mentions a flag that was not given: {line}"
    );
    // A prompt that was given is named as the problem.
    let out = run(
        &[
            "sample",
            "--checkpoint",
            s(&path),
            "--prompt",
            "abd",
            "--tokens",
            "2",
        ],
        None,
    );
    expect_error(&out, &["--prompt", "character 'd' (U+0064) at character 2"]);
}
