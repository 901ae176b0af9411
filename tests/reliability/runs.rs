//! Runs that say what they do (round five, items 5 to 7): no run trains nothing while saying
//! all is well, a failing run reports up to its failing step, and a resume knows what it
//! resumes and advises only what pastes.

use serde_json::Value;

use super::advice::assert_pastes;
use super::{TempDir, class_data, run_owned as run};
use crate::common::cli::{assert_says, error_line, json_lines, output_text, quick};
use webgpu_amp::train::checkpoint::Checkpoint;

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// `--init-scale 1e-30` under amp-f16: every gradient rounds to zero in the f16 backward and
/// nothing is skipped. The run warns at its start, and the doctor names the gradients and the
/// scale to try, instead of "no layer overflowed or underflowed".
#[test]
fn a_loss_scale_that_zeroes_every_gradient_is_named() {
    let args = quick(
        "train",
        8,
        &[
            "--precision",
            "amp-f16",
            "--init-scale",
            "1e-30",
            "--numerics",
            "every:1",
        ],
    );
    let out = run(&args);
    assert!(out.status.success(), "{}", output_text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !stdout.contains("no layer overflowed or underflowed"),
        "{stdout}"
    );
    assert_says(
        &stdout,
        "tiny scale",
        &[
            "warning: --init-scale 1e-30 is below f16's smallest value",
            "weight gradient",
            "raise the loss scale (--init-scale 65536)",
            "warning: every value of",
            "try --init-scale 65536",
        ],
    );
    assert_says(&stdout, "final scale", &["final scale", "1e-30"]);
    assert_pastes("train --init-scale 1e-30", &stdout);
}

/// `--numerics` without a GradScaler on a run that diverges: the metrics file holds every
/// step up to and with the failing one (its numerics say where the NaN began), and the
/// doctor's table comes before the error.
#[test]
fn a_diverging_run_reports_its_numerics_up_to_the_failing_step() {
    let tmp = TempDir::new("diverge");
    let metrics = tmp.path("m.jsonl").display().to_string();
    for extra in [
        &["--precision", "f16"][..],
        &["--scaler", "false", "--precision", "amp-f16"],
    ] {
        let mut flags = vec![
            "--lr",
            "1e6",
            "--numerics",
            "every:1",
            "--metrics",
            &metrics,
        ];
        flags.extend_from_slice(extra);
        let out = run(&quick("train", 20, &flags));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("training diverged"),
            "{extra:?}: {}",
            output_text(&out)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("counted steps against"),
            "{extra:?}: no advice: {stdout}"
        );
        let lines = json_lines(std::path::Path::new(&metrics));
        let steps: Vec<&Value> = lines.iter().filter(|l| l.get("loss").is_some()).collect();
        let last = steps
            .last()
            .unwrap_or_else(|| panic!("{extra:?}: no step lines"));
        assert!(
            !last["loss"].as_f64().is_some_and(f64::is_finite),
            "{extra:?}: {last}"
        );
        assert!(
            last["numerics"].is_array(),
            "{extra:?}: the failing step's numerics: {last}"
        );
    }
}

/// `bench step --rounds N` without `--numerics` did nothing with N, silently.
#[test]
fn rounds_without_numerics_are_refused() {
    let out = run(&strings(&[
        "bench", "step", "--models", "mlp", "--steps", "1", "--rounds", "5",
    ]));
    let line = error_line(&out, "--rounds without --numerics");
    assert_says(&line, "--rounds", &["--rounds", "--numerics"]);
    assert_pastes("bench step --rounds", &line);
}

/// `--tuning` on a CPU adapter, whose training takes nothing from the table: said once.
#[test]
fn a_tuning_file_training_does_not_use_is_said_once() {
    let ctx = crate::common::ctx();
    if !ctx.caps.cpu_adapter || ctx.caps.tensor_cores.config().is_some() {
        crate::common::not_checked(
            "a tuning file unused by training: this adapter's training uses the table",
        );
        return;
    }
    let tmp = TempDir::new("unused-table");
    let file = super::tables::tuning_file(&tmp, "t.json", |_| {});
    let path = file.display().to_string();
    let out = run(&quick("train", 2, &["--tuning", &path]));
    assert!(out.status.success(), "{}", output_text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout
            .matches("takes nothing from the kernel table")
            .count(),
        1,
        "{stdout}"
    );
}

/// A checkpoint of an mlp, one step into 64 synthetic samples at batch 8, saved in `tmp`.
fn checkpoint(tmp: &TempDir, extra: &[&str]) -> String {
    let ck = tmp.path("ck.safetensors").display().to_string();
    let mut flags = vec!["--save", ck.as_str()];
    flags.extend_from_slice(extra);
    let out = run(&quick("train", 1, &flags));
    assert!(out.status.success(), "{}", output_text(&out));
    ck
}

/// A resume with other `--keep-f32` layers computes other numbers from the same step: refused
/// with the flag that continues the run as it was, which pastes.
#[test]
fn a_resume_that_drops_or_adds_keep_f32_is_refused() {
    let tmp = TempDir::new("resume-keep");
    let ck = checkpoint(&tmp, &["--keep-f32", "1"]);
    for (extra, says) in [
        (&[][..], "--keep-f32 1"),
        (&["--keep-f32", "3"][..], "--keep-f32 1"),
    ] {
        let mut flags = vec!["--resume", ck.as_str()];
        flags.extend_from_slice(extra);
        let out = run(&quick("train", 3, &flags));
        let line = error_line(&out, "keep-f32 resume");
        assert_says(&line, "keep-f32 resume", &["kept", says]);
        assert_pastes("resume --keep-f32", &line);
    }
}

/// The data set is compared by what was read, not only its size: the same count of other
/// samples is refused.
#[test]
fn a_resume_on_other_data_of_the_same_size_is_refused() {
    let tmp = TempDir::new("resume-data");
    let x: Vec<f32> = (0..64 * 4).map(|i| (i % 7) as f32).collect();
    let labels: Vec<i64> = (0..64).map(|i| i % 3).collect();
    let a = tmp.write("a.safetensors", &class_data(&x, 4, &labels));
    let other: Vec<f32> = x.iter().map(|v| v + 1.0).collect();
    let b = tmp.write("b.safetensors", &class_data(&other, 4, &labels));
    let ck = tmp.path("ck.safetensors").display().to_string();
    let data = |p: &std::path::Path| p.display().to_string();
    let save = strings(&[
        "train",
        "--model",
        "mlp",
        "--dataset",
        &data(&a),
        "--batch-size",
        "8",
        "--steps",
        "1",
        "--no-validate",
        "--save",
        &ck,
    ]);
    let out = run(&save);
    assert!(out.status.success(), "{}", output_text(&out));
    let resume = strings(&[
        "train",
        "--model",
        "mlp",
        "--dataset",
        &data(&b),
        "--batch-size",
        "8",
        "--steps",
        "2",
        "--no-validate",
        "--resume",
        &ck,
    ]);
    let line = error_line(&run(&resume), "other data");
    assert_says(
        &line,
        "other data",
        &["not what the checkpoint's run read", "fnv64:"],
    );
}

/// A checkpoint whose metadata says batch size 0 (or 2^64 − 1): the advice was to give that
/// value, which no run takes. It is said to be the file's, and nothing unpasteable offered.
#[test]
fn resume_advice_never_offers_a_value_the_flag_refuses() {
    let tmp = TempDir::new("resume-advice");
    let ck = checkpoint(&tmp, &[]);
    for bad in [0u64, u64::MAX] {
        let mut c = Checkpoint::load(std::path::Path::new(&ck)).unwrap();
        c.data.as_mut().expect("data order").batch_size = bad;
        let edited = tmp.path(&format!("edited-{bad}.safetensors"));
        c.save(&edited).unwrap();
        let edited = edited.display().to_string();
        let line = error_line(&run(&quick("train", 3, &["--resume", &edited])), "edited");
        assert_says(&line, "edited", &["edited or damaged"]);
        assert!(
            !line.contains(&format!("give --batch-size {bad}")),
            "{line}"
        );
        assert_pastes("resume of an edited checkpoint", &line);
    }
}

/// Resuming an mlp's checkpoint with another model and data: the model is what differs, and
/// it is named first (it was reported as a batch-size and data problem).
#[test]
fn a_resume_with_another_model_names_the_model_first() {
    let tmp = TempDir::new("resume-model");
    let ck = checkpoint(&tmp, &[]);
    let args = strings(&[
        "train",
        "--model",
        "mnist-cnn",
        "--dataset",
        "default",
        "--batch-size",
        "4",
        "--steps",
        "3",
        "--no-validate",
        "--resume",
        &ck,
    ]);
    let line = error_line(&run(&args), "another model");
    assert_says(
        &line,
        "another model",
        &["parameters do not match the model"],
    );
    assert!(!line.contains("--batch-size"), "{line}");
}
