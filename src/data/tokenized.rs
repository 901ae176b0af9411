//! A text through a Hugging Face tokenizer, cut into a language model's windows:
//! `--dataset text:FILE --tokenizer tokenizer.json`, and the browser's Hugging Face folder
//! ([`token_windows`]).
//!
//! - The text is encoded once, whole, on the host, exactly as `webgpu-amp tokenize` and
//!   Python's `Tokenizer.encode(text).ids` encode it: special tokens added as the file's
//!   post-processor says, line endings as written. (Not in pieces: a piece boundary would
//!   change the ids of a whitespace run, a prefix space or a post-processor's tokens.)
//! - The first `int(n · 0.9)` tokens train, the rest validate, as a character-level text
//!   splits its characters ([`super::text::TRAIN_FRACTION`]).
//! - A sample is a window of `seq_len + 1` tokens: inputs `ids[i .. i + T]`, targets
//!   `ids[i + 1 .. i + T + 1]`, for every offset `i` of its part (the `x`, `y` of a token
//!   safetensors file, shifted by one).

use std::sync::Arc;

use super::text::TRAIN_FRACTION;
use super::tokens::TokenSamples;
use super::{Dataset, Split, Tokenizer};
use crate::{Error, Result};

/// A text's token ids under a tokenizer, before they are cut into windows (the tokenizer's
/// counterpart of [`super::TextCorpus`]).
#[derive(Clone, Debug, PartialEq)]
pub struct TokenizedText {
    /// Where the text came from: names the data sets (`{name}/train`, `{name}/validation`).
    pub name: String,
    ids: Arc<[u32]>,
}

impl TokenizedText {
    /// `text` encoded by `tokenizer` (its whole id list, as [`Tokenizer::encode`]). An empty
    /// text, or one that encodes to no token, is an error.
    pub fn encode(name: impl Into<String>, text: &str, tokenizer: &Tokenizer) -> Result<Self> {
        let name = name.into();
        if text.is_empty() {
            return Err(Error::data(format!("{name}: the text is empty")));
        }
        let ids = tokenizer.encode(text)?;
        Self::from_ids(name, ids)
    }

    /// Ids already encoded (a test's, or a tokenizer run elsewhere).
    pub fn from_ids(name: impl Into<String>, ids: Vec<u32>) -> Result<Self> {
        let name = name.into();
        if ids.is_empty() {
            return Err(Error::data(format!("{name}: the text encodes to no token")));
        }
        Ok(TokenizedText {
            name,
            ids: ids.into(),
        })
    }

    /// The text's ids, in order.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    /// Tokens in the text.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Tokens of the training part: `int(n * 0.9)`, as Python computes it.
    pub fn train_len(&self) -> usize {
        (self.len() as f64 * TRAIN_FRACTION) as usize
    }

    /// Windows of `seq_len + 1` tokens over the training part and the validation part, with
    /// `vocab_size` classes (the model's vocabulary). Errors: an id at or above `vocab_size`
    /// (naming the id, its position and the vocabulary), and a part shorter than one window.
    pub fn split(&self, seq_len: usize, vocab_size: usize) -> Result<Split> {
        if seq_len == 0 {
            return Err(Error::data(format!(
                "{}: the window must be at least 1 token",
                self.name
            )));
        }
        if let Some(at) = self.ids.iter().position(|&id| id as usize >= vocab_size) {
            return Err(Error::data(format!(
                "{}: token {at} of the text is id {}, not below the model's vocab_size \
                 {vocab_size}: the tokenizer's vocabulary is larger than the model's; use the \
                 model's own tokenizer, or a model whose vocab_size holds every id",
                self.name, self.ids[at]
            )));
        }
        let cut = self.train_len();
        let n = self.len();
        let need = seq_len + 1;
        for (part, len) in [
            ("training part (the first 90%", cut),
            ("validation part (the last 10%", n - cut),
        ] {
            if len < need {
                return Err(Error::data(format!(
                    "{}: the {part}: {len} of {n} tokens) is shorter than one window of \
                     seq_len + 1 = {need} tokens; use a longer text (at least {} tokens) or a \
                     smaller window (a Llama's --seq-len)",
                    self.name,
                    shortest_text(need)
                )));
            }
        }
        let set = |range: std::ops::Range<usize>, part: &str| -> Result<Dataset> {
            let (inputs, targets) = TokenSamples::windows(self.ids.clone(), range, seq_len)?;
            Dataset::from_tokens(
                format!("{}/{part}", self.name),
                inputs,
                targets,
                vocab_size,
                None,
            )
        };
        Ok(Split {
            train: set(0..cut, "train")?,
            validation: Some(set(cut..n, "validation")?),
            test: None,
        })
    }
}

/// The fewest tokens whose training and validation parts both hold `need` tokens.
fn shortest_text(need: usize) -> usize {
    let fits = |n: usize| {
        let cut = (n as f64 * TRAIN_FRACTION) as usize;
        cut >= need && n - cut >= need
    };
    (2 * need..)
        .find(|&n| fits(n))
        .expect("10·need + 10 tokens fit")
}

/// The training and validation windows of `text` under `tokenizer`, for a model of
/// `vocab_size` ids trained on `seq_len` tokens: [`TokenizedText::encode`] then
/// [`TokenizedText::split`]. `name` names the data sets and the errors.
pub fn token_windows(
    name: &str,
    text: &str,
    tokenizer: &Tokenizer,
    seq_len: usize,
    vocab_size: usize,
) -> Result<Split> {
    TokenizedText::encode(name, text, tokenizer)?.split(seq_len, vocab_size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{Inputs, Labels};

    fn ids_of(set: &Dataset, i: usize) -> (Vec<u32>, Vec<u32>) {
        match (&set.x, &set.y) {
            (Inputs::Tokens { ids, .. }, Labels::Tokens { targets, .. }) => (
                ids.sample(i).unwrap().to_vec(),
                targets.sample(i).unwrap().to_vec(),
            ),
            _ => panic!("not a token set"),
        }
    }

    #[test]
    fn windows_shift_by_one_and_hold_out_the_last_tenth() {
        let text = TokenizedText::from_ids("t", (0..50).collect()).unwrap();
        let split = text.split(4, 60).unwrap();
        // 45 training tokens make 41 windows of 4; 5 validation tokens make one.
        assert_eq!(split.train.n, 41);
        assert_eq!(
            ids_of(&split.train, 3),
            (vec![3, 4, 5, 6], vec![4, 5, 6, 7])
        );
        assert_eq!(split.train.output_dim(), 60);
        let v = split.validation.unwrap();
        assert_eq!(v.n, 1);
        assert_eq!(ids_of(&v, 0), (vec![45, 46, 47, 48], vec![46, 47, 48, 49]));
        assert_eq!(shortest_text(5), 41);
    }

    #[test]
    fn an_id_outside_the_vocabulary_and_a_short_text_are_named() {
        let text = TokenizedText::from_ids("t.txt", (0..40).collect()).unwrap();
        let e = text.split(2, 30).unwrap_err().to_string();
        assert!(
            e.contains("token 30 of the text is id 30") && e.contains("vocab_size 30"),
            "{e}"
        );
        let e = text.split(8, 40).unwrap_err().to_string();
        assert!(e.contains("t.txt") && e.contains("seq_len + 1 = 9"), "{e}");
        assert!(TokenizedText::from_ids("e", vec![]).is_err());
    }
}
