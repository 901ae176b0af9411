//! `webgpu-amp tokenize` against Python's `tokenizers`: three byte-level BPE tokenizers shaped
//! like GPT-2's, SmolLM2's (digits split one by one) and Llama 3's (its look-ahead regex, a
//! BOS post-processor), trained by Python in the test (scripts/tokenizer_fixtures.py; nothing
//! downloaded), give the same ids as Python's `Tokenizer.encode(text).ids` on a text with
//! multi-byte UTF-8 (accents, CJK, a 4-byte mathematical script, emoji), whitespace runs
//! (blank lines, spaces, tabs, `\r\n`, trailing spaces), digits and contractions; from a file
//! and from standard input. Bad files and text are one-line errors naming the file.
//!
//! Then training on a text under a tokenizer (`train --dataset text:FILE --tokenizer FILE`):
//! its windows are the ids `tokenize` prints, cut in `--seq-len` windows shifted by one;
//! `llama-tiny` trains on them, `sample --tokenizer` decodes what it samples, an exported
//! folder carries the tokenizer, and `--model hf:DIR` uses the folder's by default
//! (`text_training.rs`, which shares these fixtures).

mod common;
#[path = "tokenizer/text_training.rs"]
mod text_training;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use common::cli::{assert_says, command, error_line, fresh_dir, output_text};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

const TEXT: &str = "Héllo wörld — 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 日本語テキスト 🙂🙂!\n\n\n   three spaces,\ttab\t\t\
                    and trailing   \n12345 678 9.0 3,141,592 l33t h4x0r\r\nIt's 2026; \
                    they'll see.  \n";

/// The fixtures in a fresh folder: (folder, text file), or None (said loudly) without the
/// venv's Python.
fn fixtures(tag: &str) -> Option<(PathBuf, PathBuf)> {
    fixtures_of(tag, TEXT)
}

/// [`fixtures`] trained on and for `text`.
fn fixtures_of(tag: &str, text_of: &str) -> Option<(PathBuf, PathBuf)> {
    let python = Path::new(ROOT).join(".venv/bin/python");
    if !python.exists() {
        common::not_checked(
            "webgpu-amp tokenize against Python's tokenizers: no .venv/bin/python \
             (bash scripts/python-venv.sh)",
        );
        return None;
    }
    let dir = fresh_dir(tag);
    let text = dir.join("text.txt");
    std::fs::write(&text, text_of).unwrap();
    let out = std::process::Command::new(python)
        .arg(Path::new(ROOT).join("scripts/tokenizer_fixtures.py"))
        .arg(&dir)
        .arg(&text)
        .output()
        .expect("run scripts/tokenizer_fixtures.py");
    assert!(
        out.status.success(),
        "scripts/tokenizer_fixtures.py:\n{}",
        output_text(&out)
    );
    Some((dir, text))
}

fn ids(json: &[u8], what: &str) -> Vec<u32> {
    serde_json::from_slice(json).unwrap_or_else(|e| {
        panic!(
            "{what}: not a JSON array of ids ({e}): {}",
            String::from_utf8_lossy(json)
        )
    })
}

#[test]
fn tokenize_gives_pythons_ids_for_gpt2_smollm2_and_llama3_shaped_tokenizers() {
    let Some((dir, text)) = fixtures("ids") else {
        return;
    };
    for kind in ["gpt2", "smollm2", "llama3"] {
        let tokenizer = dir.join(kind).join("tokenizer.json");
        let want = ids(
            &std::fs::read(dir.join(kind).join("ids.json")).unwrap(),
            kind,
        );
        let out = command()
            .args(["tokenize", "--tokenizer"])
            .arg(&tokenizer)
            .arg(&text)
            .output()
            .unwrap();
        assert!(out.status.success(), "{kind}: {}", output_text(&out));
        let got = ids(&out.stdout, kind);
        assert_eq!(got, want, "{kind}: ours vs Python's tokenizers");
        // One line of output: the array.
        assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1);
        // Standard input gives the same.
        let mut child = command()
            .args(["tokenize", "--tokenizer"])
            .arg(&tokenizer)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(TEXT.as_bytes())
            .unwrap();
        let piped = child.wait_with_output().unwrap();
        assert!(piped.status.success(), "{kind}: {}", output_text(&piped));
        assert_eq!(
            ids(&piped.stdout, kind),
            want,
            "{kind}: from standard input"
        );
    }
    // Llama 3's post-processor put its BOS first; the others add nothing.
    let first = |kind: &str| {
        ids(
            &std::fs::read(dir.join(kind).join("ids.json")).unwrap(),
            kind,
        )[0]
    };
    assert_eq!(
        first("llama3"),
        0,
        "<|begin_of_text|> is id 0 of the Llama 3 shape"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_tokenizer_files_and_text_are_one_line_errors() {
    let dir = fresh_dir("errors");
    let text = dir.join("text.txt");
    std::fs::write(&text, "hello").unwrap();
    let run = |tokenizer: &Path, text: &Path| {
        command()
            .args(["tokenize", "--tokenizer"])
            .arg(tokenizer)
            .arg(text)
            .output()
            .unwrap()
    };
    let missing = dir.join("missing.json");
    let line = error_line(&run(&missing, &text), "a missing tokenizer");
    assert_says(
        &line,
        "a missing tokenizer",
        &["missing.json", "cannot read"],
    );
    let broken = dir.join("broken.json");
    std::fs::write(&broken, "{\"model\": 3}").unwrap();
    let line = error_line(&run(&broken, &text), "a broken tokenizer");
    assert_says(
        &line,
        "a broken tokenizer",
        &["broken.json", "tokenizer.json"],
    );
    let Some((fx, _)) = fixtures("errors-fx") else {
        return;
    };
    let latin1 = dir.join("latin1.txt");
    std::fs::write(&latin1, b"caf\xe9").unwrap();
    let good = fx.join("gpt2").join("tokenizer.json");
    let line = error_line(&run(&good, &latin1), "latin-1 text");
    assert_says(
        &line,
        "latin-1 text",
        &["latin1.txt", "not UTF-8", "offset 3"],
    );
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&fx);
}
