//! Character-level text, as nanoGPT's `data/shakespeare_char/prepare.py` prepares it.
//!
//! - The file is read as UTF-8 (an invalid byte is an error naming its byte offset and line),
//!   with line endings as Python's text mode reads them (`\r\n` and a lone `\r` become `\n`).
//! - The vocabulary is the sorted set of the characters of the whole text
//!   (`chars = sorted(list(set(data)))`: sorted by code point), and every character is
//!   encoded as its index in that list ([`Vocab`]).
//! - The first `int(n * 0.9)` characters train, the rest validate (`n` counts characters;
//!   the product is the same f64 product Python computes, then truncated).
//! - A sample is a window of `block_size + 1` characters: inputs `ids[i .. i + T]`, targets
//!   `ids[i + 1 .. i + T + 1]`, for every offset `i` in `0 .. len - T` of its part
//!   ([`TextCorpus::split`]). nanoGPT draws the offsets of each batch at random
//!   (`torch.randint(len(data) - block_size, ...)`); here a shuffled epoch visits every
//!   offset once in an order seeded by `(seed, epoch)` (the [`super::Loader`]), so runs are
//!   reproducible and resume exactly; `--no-shuffle` walks the offsets in order.

use std::path::Path;
use std::sync::Arc;

use super::files::read_text_file;
use super::tokens::TokenSamples;
use super::vocab::Vocab;
use super::{Dataset, Split};
use crate::{Error, Result};

/// Fraction of the characters that train (nanoGPT's `int(n * 0.9)`).
pub const TRAIN_FRACTION: f64 = 0.9;

/// Decodes UTF-8 bytes as Python's text mode reads a file: an invalid byte is an error naming
/// its byte offset and line; `\r\n` and a lone `\r` become `\n`.
pub fn decode_utf8(name: &str, bytes: &[u8]) -> Result<String> {
    let text = validate_utf8(name, bytes)?;
    Ok(if text.contains('\r') {
        text.replace("\r\n", "\n").replace('\r', "\n")
    } else {
        text.to_string()
    })
}

/// `bytes` as UTF-8, without copying them (errors as [`decode_utf8`]'s).
pub(crate) fn validate_utf8<'b>(name: &str, bytes: &'b [u8]) -> Result<&'b str> {
    std::str::from_utf8(bytes).map_err(|e| {
        let at = e.valid_up_to();
        let line = 1 + bytes[..at].iter().filter(|&&b| b == b'\n').count();
        match e.error_len() {
            Some(_) => Error::data(format!(
                "{name}: not valid UTF-8: byte 0x{:02x} at byte offset {at} (line {line}) \
                 does not start a valid character",
                bytes[at]
            )),
            None => Error::data(format!(
                "{name}: not valid UTF-8: the file ends inside a character that starts at \
                 byte offset {at} (line {line})"
            )),
        }
    })
}

/// The characters of `text` as Python's text mode reads them: `\r\n` and a lone `\r` are
/// one `\n`.
fn universal_newlines(text: &str) -> impl Iterator<Item = char> + '_ {
    let mut chars = text.chars().peekable();
    std::iter::from_fn(move || {
        let c = chars.next()?;
        if c != '\r' {
            return Some(c);
        }
        if chars.peek() == Some(&'\n') {
            chars.next();
        }
        Some('\n')
    })
}

/// A text encoded with its own vocabulary, before it is cut into windows.
#[derive(Clone, Debug, PartialEq)]
pub struct TextCorpus {
    /// Where it came from (a file path, `shakespeare`, `hamlet`): names the data sets.
    pub name: String,
    vocab: Arc<Vocab>,
    ids: Arc<[u32]>,
}

impl TextCorpus {
    /// Encodes `text` with the vocabulary of its own characters. An empty text is an error.
    pub fn from_text(name: impl Into<String>, text: &str) -> Result<TextCorpus> {
        Self::encode(name.into(), || text.chars())
    }

    /// UTF-8 bytes of a text file (see [`decode_utf8`]), read in place: the text costs its
    /// bytes plus 4 bytes per character while it is encoded, and 4 bytes per character
    /// (its ids) after (README, Data).
    pub fn from_bytes(name: impl Into<String>, bytes: &[u8]) -> Result<TextCorpus> {
        let name = name.into();
        let text = validate_utf8(&name, bytes)?;
        Self::encode(name, || universal_newlines(text))
    }

    /// Encodes the characters `chars()` yields (walked three times: the vocabulary, the
    /// count, the ids), writing the ids straight into their shared buffer.
    fn encode<C: Iterator<Item = char>>(name: String, chars: impl Fn() -> C) -> Result<TextCorpus> {
        let n = chars().count();
        if n == 0 {
            return Err(Error::data(format!("{name}: the text is empty")));
        }
        let vocab = Vocab::from_chars_of(chars());
        let mut ids = Arc::<[u32]>::new_uninit_slice(n);
        let slots = Arc::get_mut(&mut ids).expect("a new Arc is unique");
        for (slot, c) in slots.iter_mut().zip(chars()) {
            slot.write(
                vocab
                    .id(c)
                    .expect("the vocabulary holds every character of its text"),
            );
        }
        // SAFETY: `chars()` yields the same `n` characters every walk, so every slot is written.
        let ids = unsafe { ids.assume_init() };
        Ok(TextCorpus {
            name,
            vocab: Arc::new(vocab),
            ids,
        })
    }

    /// Reads a UTF-8 text file (`--dataset text:FILE`).
    pub fn load(path: &Path) -> Result<TextCorpus> {
        let bytes = read_text_file(path)?;
        TextCorpus::from_bytes(path.display().to_string(), &bytes)
    }

    pub fn vocab(&self) -> &Arc<Vocab> {
        &self.vocab
    }

    /// The encoded text, one id per character.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    /// Characters in the text.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Characters of the training part: `int(n * 0.9)`, as Python computes it.
    pub fn train_len(&self) -> usize {
        (self.len() as f64 * TRAIN_FRACTION) as usize
    }

    /// Windows of `block_size + 1` characters over the training part (`{name}/train`) and the
    /// validation part (`{name}/validation`): see the module docs. Both parts must hold at
    /// least `block_size + 1` characters.
    pub fn split(&self, block_size: usize) -> Result<Split> {
        if block_size == 0 {
            return Err(Error::data(format!(
                "{}: the block size must be at least 1",
                self.name
            )));
        }
        let cut = self.train_len();
        let n = self.len();
        let need = block_size + 1;
        for (part, len) in [
            ("training part (the first 90%", cut),
            ("validation part (the last 10%", n - cut),
        ] {
            if len < need {
                return Err(Error::data(format!(
                    "{}: the {part}: {len} of {n} characters) is shorter than block_size + 1 = \
                     {need} characters; use a longer text or a model with a smaller block size",
                    self.name
                )));
            }
        }
        let set = |range: std::ops::Range<usize>, part: &str| -> Result<Dataset> {
            let (inputs, targets) = TokenSamples::windows(self.ids.clone(), range, block_size)?;
            Dataset::from_tokens(
                format!("{}/{part}", self.name),
                inputs,
                targets,
                self.vocab.len(),
                Some(self.vocab.clone()),
            )
        };
        Ok(Split {
            train: set(0..cut, "train")?,
            validation: Some(set(cut..n, "validation")?),
            test: None,
        })
    }
}
