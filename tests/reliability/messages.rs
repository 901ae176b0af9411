//! Messages that name what the user gave and what to change, never an internal function:
//! each case was unclear or silent in the audit.

use std::process::{Command, Stdio};
use std::time::Duration;

use super::common::child::wait_for_exit;
use super::common::cli::{BIN, error_line, output_text, quick};
use super::{TempDir, gpt_tiny_checkpoint, run};
use webgpu_amp::train::checkpoint::{Checkpoint, DISK_FULL_ENV};

#[test]
fn a_gpt_batch_of_a_million_steps_nothing_and_says_grad_accum() {
    // It said "--lr-decay-steps must be 1 to 2^53, got 0", a flag the user never gave.
    let out = run(&[
        "train",
        "--model",
        "gpt-tiny",
        "--batch-size",
        "1000",
        "--grad-accum",
        "1000",
    ]);
    let line = error_line(&out, "gpt-tiny batch 1000 x 1000");
    assert!(line.contains("--grad-accum 1000"), "{line}");
    assert!(!line.contains("--lr-decay-steps"), "{line}");
}

#[test]
fn a_batch_past_32_bit_indices_names_batch_size_not_an_op() {
    let out = run(&[
        "train",
        "--model",
        "gpt-char",
        "--batch-size",
        "16777216",
        "--steps",
        "1",
    ]);
    let line = error_line(&out, "gpt-char batch 2^24");
    assert!(line.contains("--batch-size"), "{line}");
    assert!(
        !line.contains("embedding_forward") && !line.contains("shape error"),
        "{line}"
    );
}

#[test]
fn a_model_file_with_a_byte_order_mark_names_it() {
    let tmp = TempDir::new("bom");
    let mut json = vec![0xEF, 0xBB, 0xBF];
    json.extend_from_slice(br#"{"input": [10], "layers": [{"linear": {"out": 1}}]}"#);
    let f = tmp.write("bom.json", &json).display().to_string();
    let out = run(&["plan", "--model", &f, "--dataset", "synthetic:64"]);
    let line = error_line(&out, "BOM");
    assert!(line.contains("byte-order mark (BOM"), "{line}");
}

#[test]
fn an_adapter_filter_that_matches_nothing_lists_the_adapters_present() {
    let out = Command::new(BIN)
        .args(["train", "--model", "mlp", "--steps", "1", "--no-validate"])
        .env("WEBGPU_AMP_ADAPTER", "no-such-gpu-here")
        .env_remove("WEBGPU_AMP_BACKEND")
        .output()
        .unwrap();
    let line = error_line(&out, "adapter filter");
    assert!(line.contains("`no-such-gpu-here`"), "{line}");
    assert!(line.contains("the adapters present: `"), "{line}");
    assert!(!line.contains("apt-get install"), "{line}");
}

#[test]
fn info_without_a_runtime_dir_prints_no_error() {
    let out = Command::new(BIN)
        .arg("info")
        .env_remove("XDG_RUNTIME_DIR")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("error"), "{stderr}");
}

#[test]
fn a_full_disk_under_compare_names_the_png_not_a_checkpoint() {
    let tmp = TempDir::new("png");
    let (r, p) = (tmp.path("r.json"), tmp.path("r.png"));
    let out = Command::new(BIN)
        .args(quick("compare", 2, &["--report"]))
        .arg(&r)
        .arg("--png")
        .arg(&p)
        .env(DISK_FULL_ENV, "2:100")
        .env_remove("WEBGPU_AMP_BACKEND")
        .output()
        .unwrap();
    let line = error_line(&out, "compare PNG on a full disk");
    assert!(line.contains("--png") && line.contains("r.png"), "{line}");
    assert!(!line.contains("checkpoint"), "{line}");
}

#[test]
fn sample_refuses_a_vocabulary_that_disagrees_with_vocab_size() {
    let tmp = TempDir::new("vocab");
    let save = gpt_tiny_checkpoint(&tmp);
    let ck = Checkpoint::load(&save).unwrap();
    let chars = ck.vocab().unwrap().chars().to_vec();
    let shorter = webgpu_amp::data::Vocab::from_chars(chars[..chars.len() - 1].to_vec()).unwrap();
    let mut longer = chars.clone();
    longer.extend(['\u{00e9}', '\u{00f1}']);
    let longer = webgpu_amp::data::Vocab::from_chars(longer).unwrap();
    for (name, vocab) in [("short", shorter), ("long", longer)] {
        let path = tmp.path(&format!("{name}.safetensors"));
        Checkpoint {
            vocab: Some(vocab),
            ..ck.clone()
        }
        .save(&path)
        .unwrap();
        let p = path.display().to_string();
        let out = run(&["sample", "--checkpoint", &p, "--tokens", "5"]);
        let line = error_line(&out, name);
        assert!(line.contains("metadata `vocab` lists"), "{line}");
        assert!(line.contains("vocab_size"), "{line}");
    }
}

#[test]
fn two_trains_saving_to_one_path_both_succeed() {
    // One writer's clean-up once deleted the other's temp file (3 failures in 11 tries).
    let tmp = TempDir::new("two");
    let save = tmp.path("ck.safetensors");
    let s = save.display().to_string();
    for _ in 0..3 {
        let spawn = || {
            Command::new(BIN)
                .args([
                    "train",
                    "--model",
                    "mlp",
                    "--dataset",
                    "synthetic:64",
                    "--batch-size",
                ])
                .args([
                    "8",
                    "--steps",
                    "24",
                    "--no-validate",
                    "--save",
                    &s,
                    "--save-every",
                    "1",
                ])
                .env_remove("WEBGPU_AMP_BACKEND")
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        };
        let (a, b) = (spawn(), spawn());
        for child in [a, b] {
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "{}", output_text(&out));
        }
        Checkpoint::load(&save).expect("one whole checkpoint");
    }
}

#[test]
fn a_fifo_text_source_says_it_waits() {
    let tmp = TempDir::new("fifo");
    let fifo = tmp.path("text.fifo");
    let c = std::ffi::CString::new(fifo.display().to_string()).unwrap();
    // SAFETY: mkfifo(3) on a path we own.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    let source = format!("text:{}", fifo.display());
    let mut child = Command::new(BIN)
        .args(["plan", "--model", "gpt-tiny", "--dataset", &source])
        .env_remove("WEBGPU_AMP_BACKEND")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(4));
    assert!(
        child.try_wait().unwrap().is_none(),
        "it should still be waiting"
    );
    // A writer that sends nothing and closes: the read ends, the (empty) text is refused.
    drop(std::fs::OpenOptions::new().write(true).open(&fifo).unwrap());
    wait_for_exit(&mut child, Duration::from_secs(30), "fifo");
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("reading text from a pipe/device: waiting for data"),
        "{stderr}"
    );
}
