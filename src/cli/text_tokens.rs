//! `--tokenizer FILE` on a text data set: which tokenizer (the flag, else an `hf:DIR`
//! model's `tokenizer.json`), and the text encoded by it once on the host, with progress on
//! standard error for a large text.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use webgpu_amp::data::hf::TOKENIZER;
use webgpu_amp::data::{DataSource, TokenizedText, Tokenizer};
use webgpu_amp::{Error, Result};

use super::resolve::HF_PREFIX;

/// Texts at least this long report their tokenizing on standard error.
const PROGRESS_BYTES: usize = 1 << 20;

/// The tokenizer a text trains under: `--tokenizer`, else the `tokenizer.json` of an
/// `--model hf:DIR` folder when it has one, else none (a text then trains on its
/// characters). `--tokenizer` with data that is not text is an error.
pub fn tokenizer_for(
    tokenizer: Option<&Path>,
    model: Option<&str>,
    source: &DataSource,
    dataset: &str,
) -> Result<Option<PathBuf>> {
    if !source.is_text() {
        return match tokenizer {
            Some(path) => Err(Error::InvalidArgument(format!(
                "--tokenizer {} encodes a text data set (text:FILE, {}, shakespeare); \
                 `{dataset}` is not text",
                path.display(),
                DataSource::EMBEDDED_TEXT
            ))),
            None => Ok(None),
        };
    }
    if let Some(path) = tokenizer {
        return Ok(Some(path.to_path_buf()));
    }
    let folder = model.and_then(|m| m.strip_prefix(HF_PREFIX));
    let found = folder
        .map(|dir| Path::new(dir).join(TOKENIZER))
        .filter(|p| p.is_file());
    if let Some(path) = &found {
        note(&format!(
            "note: `{dataset}` is encoded by {} (the hf: folder's; --tokenizer FILE names \
             another)",
            path.display()
        ));
    }
    Ok(found)
}

/// The text of `source` encoded by the tokenizer at `path` (read and checked first, so a
/// bad tokenizer fails before a large text is read), and the tokenizer's vocabulary size.
pub fn tokenized_text(source: &DataSource, path: &Path) -> Result<(TokenizedText, usize)> {
    let tokenizer = Tokenizer::from_file(path).map_err(|e| match e {
        Error::Data(m) => Error::InvalidArgument(format!("--tokenizer: {m}")),
        other => other,
    })?;
    let (name, text) = source
        .read_text()?
        .expect("tokenizer_for gives a tokenizer for text sources only");
    let large = text.len() >= PROGRESS_BYTES;
    let start = Instant::now();
    let encoded = if large {
        with_ticker(&name, text.len(), || {
            TokenizedText::encode(&name, &text, &tokenizer)
        })?
    } else {
        TokenizedText::encode(&name, &text, &tokenizer)?
    };
    if large {
        note(&format!(
            "{name}: {} tokens from {:.1} MB in {:.1} s",
            encoded.len(),
            text.len() as f64 / 1e6,
            start.elapsed().as_secs_f64()
        ));
    }
    Ok((encoded, tokenizer.vocab_size()))
}

/// Runs `encode` while a line on standard error says how long it has run. The tokenizer
/// encodes the text whole (cut in pieces, the ids at each cut could differ), so there is
/// no fraction done to show: the time and the text's size are what is known.
fn with_ticker<T: Send>(name: &str, bytes: usize, encode: impl FnOnce() -> T + Send) -> T {
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|scope| {
        let ticker = scope.spawn(move || {
            let start = Instant::now();
            // Done, or the encoder gone (a panic): stop either way.
            while let Err(RecvTimeoutError::Timeout) = done_rx.recv_timeout(Duration::from_secs(1))
            {
                note_inline(&format!(
                    "tokenizing {name} ({:.1} MB): {:.0} s",
                    bytes as f64 / 1e6,
                    start.elapsed().as_secs_f64()
                ));
            }
        });
        let out = encode();
        let _ = done_tx.send(());
        let _ = ticker.join();
        out
    })
}

/// A progress line on standard error, redrawn in place (a closed stderr is no reason to
/// stop).
fn note_inline(line: &str) {
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "\r{line}");
    let _ = err.flush();
}

/// A finished line on standard error, ending any line drawn in place.
fn note(line: &str) {
    let _ = writeln!(std::io::stderr(), "\r{line}");
}
