//! Hugging Face `tokenizer.json` files, through Hugging Face's own `tokenizers` crate built
//! in pure Rust (no C regex library, so the browser build has it too): the byte-level BPE of
//! SmolLM2, GPT-2 and Llama 3, and whatever else such a file describes (normalizer,
//! pre-tokenizer, model, post-processor, decoder).
//!
//! [`Tokenizer::encode`] is Python's `tokenizers.Tokenizer.encode(text).ids`: special tokens
//! added as the file's post-processor says (Llama 3 puts `<|begin_of_text|>` first; SmolLM2
//! and GPT-2 add none). `webgpu-amp tokenize --tokenizer FILE [TEXT_FILE]` prints them.
//! [`Tokenizer::stream`] decodes ids that arrive in pieces (`sample`), never cutting a
//! character whose bytes span two byte-level tokens.

use std::path::Path;

use super::file_caps::{TOKENIZER_FILE, read_capped};
use crate::error::{Error, Result};

/// The `tokenizers` stream decoder over the concrete tokenizer type a `tokenizer.json` loads.
type Inner<'t> = tokenizers::DecodeStream<
    't,
    tokenizers::ModelWrapper,
    tokenizers::NormalizerWrapper,
    tokenizers::PreTokenizerWrapper,
    tokenizers::PostProcessorWrapper,
    tokenizers::DecoderWrapper,
>;

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

    /// The ids of `text`, special tokens added as the file's post-processor says (the ids
    /// of `encode`; no offsets are computed, so a large text costs its ids, not their spans).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let encoding = self
            .inner
            .encode_fast(text, true)
            .map_err(|e| Error::Data(format!("{}: cannot encode the text: {e}", self.name)))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// The text of `ids`, special tokens left out (Python's `decode(ids)`).
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner
            .decode(ids, true)
            .map_err(|e| Error::Data(format!("{}: cannot decode ids: {e}", self.name)))
    }

    /// A decoder of ids that arrive in pieces ([`TextStream`]).
    pub fn stream(&self) -> TextStream<'_> {
        TextStream {
            tokenizer: self,
            inner: self.inner.decode_stream(true),
            ids: Vec::new(),
            written: String::new(),
        }
    }

    /// Ids in the vocabulary, added tokens included: every id [`Tokenizer::encode`] gives is
    /// below it.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }
}

/// Text of ids that arrive in pieces (sampled tokens), written as it becomes final: a
/// character whose UTF-8 bytes span two byte-level tokens comes out whole once its last byte
/// is there (Hugging Face's `DecodeStream`, which transformers' streamers follow), and
/// [`TextStream::finish`] ends with what is left, so the pieces join into `decode` of the
/// whole id list (an incomplete character at the very end as U+FFFD, as `decode` gives it).
pub struct TextStream<'t> {
    tokenizer: &'t Tokenizer,
    inner: Inner<'t>,
    /// Every id pushed, for the final check against `decode` of them all.
    ids: Vec<u32>,
    written: String,
}

impl TextStream<'_> {
    /// The text `ids` complete (empty while a character waits for its next byte). An id
    /// outside the tokenizer's vocabulary is an error naming it.
    pub fn push(&mut self, ids: &[u32]) -> Result<String> {
        let name = &self.tokenizer.name;
        let vocab = self.tokenizer.vocab_size();
        let mut out = String::new();
        for &id in ids {
            if id as usize >= vocab {
                return Err(Error::Data(format!(
                    "{name}: id {id} is not in the tokenizer's vocabulary of {vocab} ids"
                )));
            }
            self.ids.push(id);
            let piece = self
                .inner
                .step(id)
                .map_err(|e| Error::Data(format!("{name}: cannot decode id {id}: {e}")))?;
            if let Some(piece) = piece {
                out.push_str(&piece);
            }
        }
        self.written.push_str(&out);
        Ok(out)
    }

    /// The rest of the text: `decode` of every id pushed, less what [`TextStream::push`]
    /// gave. A decoder whose text of the whole list does not start with the pieces already
    /// given (none of the byte-level ones) is an error, not a silently different text.
    pub fn finish(self) -> Result<String> {
        let all = self.tokenizer.decode(&self.ids)?;
        match all.strip_prefix(&self.written) {
            Some(rest) => Ok(rest.to_string()),
            None => Err(Error::Data(format!(
                "{}: the decoded text of all {} ids does not continue the text written as \
                 they came",
                self.tokenizer.name,
                self.ids.len()
            ))),
        }
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

    #[test]
    fn a_stream_never_cuts_a_character_whose_bytes_span_two_tokens() {
        // "é" is UTF-8 c3 a9: byte-level "Ã" (c3) and "©" (a9), two tokens here.
        // (The added token moves to id 7, after the vocabulary.)
        let json = TINY
            .replace(
                r#""vocab": {"a": 0, "b": 1, "Ġ": 2, "ab": 3, "Ġab": 4},"#,
                r#""vocab": {"a": 0, "b": 1, "Ġ": 2, "ab": 3, "Ġab": 4, "Ã": 5, "©": 6},"#,
            )
            .replace(r#""id": 5, "content""#, r#""id": 7, "content""#);
        let t = Tokenizer::from_bytes(json.as_bytes(), "tiny").unwrap();
        let ids = t.encode("ab é ab").unwrap();
        assert_eq!(ids, vec![3, 2, 5, 6, 4]);
        let mut stream = t.stream();
        let mut pieces: Vec<String> = ids.iter().map(|&id| stream.push(&[id]).unwrap()).collect();
        pieces.push(stream.finish().unwrap());
        // Nothing after "Ã" alone; "é" whole with "©".
        assert_eq!(pieces, ["ab", " ", "", "é", " ab", ""]);
        assert_eq!(pieces.concat(), t.decode(&ids).unwrap());
        // Cut inside the character: the end is U+FFFD, as decode gives it.
        let mut stream = t.stream();
        let head = stream.push(&[3, 2, 5]).unwrap();
        assert_eq!(
            head + &stream.finish().unwrap(),
            t.decode(&[3, 2, 5]).unwrap()
        );
        let e = t.stream().push(&[3, 99]).unwrap_err().to_string();
        assert!(e.contains("id 99") && e.contains("8 ids"), "{e}");
    }
}
