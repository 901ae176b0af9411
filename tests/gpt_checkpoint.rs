//! GPT checkpoints: `train --save` stores the model description (metadata `model`,
//! `{"gpt": {...}}`), the vocabulary of a text, and the tied weight under both of nanoGPT's
//! names (`transformer.wte.weight` and `lm_head.weight`, equal); loading takes a tied weight
//! under both names, either one, and refuses two names with different values; `--init`
//! takes a nanoGPT-style state dict and `--resume` continues a GPT run.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use webgpu_amp::nn::ModelSpec;
use webgpu_amp::train::checkpoint::{Checkpoint, NamedTensor};

const BIN: &str = env!("CARGO_BIN_EXE_webgpu-amp");
const MODEL: &str = r#"{"gpt": {"vocab_size": 9, "block_size": 8, "n_layer": 1, "n_head": 2,
    "n_embd": 8, "dropout": 0.1, "bias": false, "activation": "gelu_tanh"}}"#;
const TEXT: &str = "a bad cab faced a dead bee.\n";

fn dir(tag: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("gpt-checkpoint-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .output()
        .expect("run webgpu-amp")
}

#[track_caller]
fn ok(args: &[&str]) {
    let out = run(args);
    assert!(
        out.status.success(),
        "webgpu-amp {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `train` of `model` on `dataset` for `steps` at batch 4, saving to `save`.
fn train_args<'a>(
    model: &'a Path,
    dataset: &'a str,
    steps: &'a str,
    save: &'a Path,
) -> Vec<&'a str> {
    vec![
        "train",
        "--model",
        model.to_str().unwrap(),
        "--dataset",
        dataset,
        "--steps",
        steps,
        "--batch-size",
        "4",
        "--no-validate",
        "--save",
        save.to_str().unwrap(),
    ]
}

/// Train 3 steps on TEXT (vocabulary of 9) and save; returns (model file, text file, checkpoint).
fn train(d: &Path, extra: &[&str]) -> (PathBuf, PathBuf, PathBuf) {
    let model = d.join("model.json");
    std::fs::write(&model, MODEL).unwrap();
    let text = d.join("text.txt");
    std::fs::write(&text, TEXT.repeat(4)).unwrap();
    let ck = d.join("gpt.safetensors");
    let dataset = format!("text:{}", text.display());
    let mut args = train_args(&model, &dataset, "3", &ck);
    args.extend_from_slice(extra);
    ok(&args);
    (model, text, ck)
}

fn tensor<'a>(ck: &'a Checkpoint, name: &str) -> &'a NamedTensor {
    ck.params
        .iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no {name}"))
}

#[test]
fn a_saved_gpt_has_its_description_vocabulary_and_both_tied_names() {
    let d = dir("save");
    let (_, _, path) = train(&d, &[]);
    let ck = Checkpoint::load(&path).unwrap();
    let spec = ModelSpec::from_json(MODEL).unwrap();
    // The description rebuilds the same model.
    let described = ck.model.clone().expect("metadata `model`");
    assert_eq!(described, spec.description().unwrap());
    assert_eq!(
        ModelSpec::from_json(&described.to_string())
            .unwrap()
            .description(),
        spec.description()
    );
    assert_eq!(
        described["gpt"]["activation"], "gelu_tanh",
        "the description keeps the activation"
    );
    let vocab = ck.vocab().expect("metadata `vocab`");
    assert_eq!(vocab.chars().iter().collect::<String>(), "\n .abcdef");
    // nanoGPT's state_dict keys exactly: every parameter plus lm_head.weight.
    let mut names: Vec<String> = ck.params.iter().map(|t| t.name.clone()).collect();
    names.sort();
    let mut want: Vec<String> = spec.parameters().into_iter().map(|p| p.name).collect();
    want.push("lm_head.weight".into());
    want.sort();
    assert_eq!(names, want);
    let (wte, head) = (
        tensor(&ck, "transformer.wte.weight"),
        tensor(&ck, "lm_head.weight"),
    );
    assert_eq!(wte.shape, head.shape);
    assert_eq!(wte.values, head.values);
    ck.params_for_model(&spec, "gpt").unwrap();
}

/// The checkpoint's parameters with the tied pair as `keep` says: "both" (equal), "owner",
/// "alias", or "different" (both, the alias changed in one value).
fn variant(ck: &Checkpoint, keep: &str) -> Checkpoint {
    let mut params: Vec<NamedTensor> = ck
        .params
        .iter()
        .filter(|t| match keep {
            "owner" => t.name != "lm_head.weight",
            "alias" => t.name != "transformer.wte.weight",
            _ => true,
        })
        .cloned()
        .collect();
    if keep == "different" {
        let head = params
            .iter_mut()
            .find(|t| t.name == "lm_head.weight")
            .unwrap();
        head.values[5] += 0.25;
    }
    Checkpoint {
        params,
        ..Default::default()
    }
}

#[test]
fn a_tied_weight_loads_from_either_name_or_both_and_never_from_two_values() {
    let d = dir("tied");
    let (model, text, path) = train(&d, &[]);
    let ck = Checkpoint::load(&path).unwrap();
    let spec = ModelSpec::from_json(MODEL).unwrap();
    let want = variant(&ck, "both")
        .params_for_model(&spec, "both")
        .unwrap();
    for keep in ["owner", "alias"] {
        let got = variant(&ck, keep).params_for_model(&spec, keep).unwrap();
        assert_eq!(got, want, "{keep}");
    }
    let e = match variant(&ck, "different").params_for_model(&spec, "different") {
        Ok(_) => panic!("two different values of a tied weight loaded"),
        Err(e) => e.to_string(),
    };
    assert!(
        e.contains(
            "`lm_head.weight` is tied to `transformer.wte.weight` but holds other values (element 5"
        ),
        "{e}"
    );
    let mut neither = variant(&ck, "owner");
    neither
        .params
        .retain(|t| t.name != "transformer.wte.weight");
    let e = match neither.params_for_model(&spec, "neither") {
        Ok(_) => panic!("a checkpoint without either name loaded"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("missing `transformer.wte.weight`"), "{e}");

    // The same through `train --init`: a file with both names trains, as does one with the
    // alias only (what safetensors' save_model keeps); two different values are an error.
    let dataset = format!("text:{}", text.display());
    for keep in ["both", "alias", "different"] {
        let init = d.join(format!("init-{keep}.safetensors"));
        variant(&ck, keep).save(&init).unwrap();
        let out = run(&[
            "train",
            "--model",
            model.to_str().unwrap(),
            "--dataset",
            &dataset,
            "--init",
            init.to_str().unwrap(),
            "--steps",
            "1",
            "--batch-size",
            "4",
            "--no-validate",
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if keep == "different" {
            assert!(!out.status.success());
            assert!(
                stderr.contains("init-different.safetensors")
                    && stderr.contains("holds other values"),
                "{stderr}"
            );
        } else {
            assert!(out.status.success(), "{keep}: {stderr}");
        }
    }
}

/// nanoGPT's warm-up and cosine decay over 5 steps, whatever the run's own budget.
const SCHEDULE: [&str; 6] = [
    "--lr-schedule",
    "cosine",
    "--warmup-steps",
    "1",
    "--lr-decay-steps",
    "5",
];

#[test]
fn resume_continues_a_gpt_run_exactly() {
    let d = dir("resume");
    // One schedule for all three runs: by default a GPT's cosine decay ends at each run's own
    // step budget (3, then 5), which would make the resumed run differ from the whole one.
    let (model, text, first) = train(&d, &SCHEDULE);
    let dataset = format!("text:{}", text.display());
    let five = |save: &Path, resume: Option<&Path>| {
        let mut args = train_args(&model, &dataset, "5", save);
        if let Some(r) = resume {
            args.extend(["--resume", r.to_str().unwrap()]);
        }
        args.extend(SCHEDULE);
        ok(&args);
    };
    let resumed = d.join("resumed.safetensors");
    five(&resumed, Some(&first));
    let whole = d.join("whole.safetensors");
    five(&whole, None);
    let (a, b) = (
        Checkpoint::load(&resumed).unwrap(),
        Checkpoint::load(&whole).unwrap(),
    );
    assert_eq!(a.params, b.params);
    assert_eq!(a.model, b.model);
    assert_eq!(a.vocab, b.vocab);
}
