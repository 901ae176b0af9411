//! Hugging Face `tokenizer.json` files, through Hugging Face's own `tokenizers` crate built
//! in pure Rust (no C regex library, so the browser build has it too): the byte-level BPE of
//! SmolLM2, GPT-2 and Llama 3, and whatever else such a file describes (normalizer,
//! pre-tokenizer, model, post-processor, decoder).
//!
//! [`Tokenizer::encode`] is Python's `tokenizers.Tokenizer.encode(text).ids`: special tokens
//! added as the file's post-processor says (Llama 3 puts `<|begin_of_text|>` first; SmolLM2
//! and GPT-2 add none). `webgpu-amp tokenize --tokenizer FILE [TEXT_FILE]` prints them.

use std::path::Path;

use super::file_caps::{TOKENIZER_FILE, read_capped};
use crate::error::{Error, Result};

/// A loaded `tokenizer.json`.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    /// Where it came from, for messages.
    name: String,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("name", &self.name)
            .field("vocab_size", &self.vocab_size())
            .finish()
    }
}

impl Tokenizer {
    /// The tokenizer in the file at `path` (read against its cap, [`TOKENIZER_FILE`]).
    pub fn from_file(path: &Path) -> Result<Self> {
        let bytes = read_capped(path, TOKENIZER_FILE).map_err(Error::Data)?;
        Self::from_bytes(&bytes, &path.display().to_string())
    }

    /// The tokenizer in a `tokenizer.json`'s bytes (the browser hands the file's contents);
    /// `name` says where they came from in errors.
    pub fn from_bytes(bytes: &[u8], name: &str) -> Result<Self> {
        let inner = tokenizers::Tokenizer::from_bytes(bytes).map_err(|e| {
            Error::Data(format!(
                "{name}: not a Hugging Face tokenizer.json this build reads: {e}"
            ))
        })?;
        Ok(Tokenizer {
            inner,
            name: name.to_string(),
        })
    }

    /// The ids of `text`, special tokens added as the file's post-processor says.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let encoding = self
            .inner
            .encode(text, true)
            .map_err(|e| Error::Data(format!("{}: cannot encode the text: {e}", self.name)))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// The text of `ids`, special tokens left out (Python's `decode(ids)`).
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner
            .decode(ids, true)
            .map_err(|e| Error::Data(format!("{}: cannot decode ids: {e}", self.name)))
    }

    /// Ids in the vocabulary, added tokens included: every id [`Tokenizer::encode`] gives is
    /// below it.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A byte-level BPE in the shape transformers saves GPT-2's: two merges over the byte
    /// alphabet's "a", "b", "Ġ".
    const TINY: &str = r#"{
      "version": "1.0", "truncation": null, "padding": null,
      "added_tokens": [{"id": 5, "content": "<|endoftext|>", "single_word": false,
        "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
      "normalizer": null,
      "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true,
        "use_regex": true},
      "post_processor": null,
      "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true,
        "use_regex": true},
      "model": {"type": "BPE", "dropout": null, "unk_token": null,
        "continuing_subword_prefix": null, "end_of_word_suffix": null, "fuse_unk": false,
        "byte_fallback": false, "ignore_merges": false,
        "vocab": {"a": 0, "b": 1, "Ġ": 2, "ab": 3, "Ġab": 4},
        "merges": [["a", "b"], ["Ġ", "ab"]]}
    }"#;

    #[test]
    fn a_byte_level_bpe_encodes_and_decodes() {
        let t = Tokenizer::from_bytes(TINY.as_bytes(), "tiny").unwrap();
        assert_eq!(t.encode("ab ab a").unwrap(), vec![3, 4, 2, 0]);
        assert_eq!(t.decode(&[3, 4, 2, 0]).unwrap(), "ab ab a");
        assert_eq!(t.vocab_size(), 6);
        let e = Tokenizer::from_bytes(b"{\"model\": 3}", "broken.json").unwrap_err();
        assert!(e.to_string().contains("broken.json"), "{e}");
    }
}
