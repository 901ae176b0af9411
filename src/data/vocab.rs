//! A character vocabulary (nanoGPT's `stoi` / `itos`): ids in sorted character order, with its
//! JSON form for checkpoints.

use crate::{Error, Result};

/// A character vocabulary: token id `i` is `chars()[i]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vocab {
    chars: Vec<char>,
    /// `(char, id)` sorted by char, for encoding.
    index: Vec<(char, u32)>,
}

impl Vocab {
    /// The sorted set of the characters of `text` (nanoGPT: `sorted(list(set(data)))`).
    pub fn from_text(text: &str) -> Vocab {
        Vocab::from_chars_of(text.chars())
    }

    /// The sorted set of `chars`, in one pass and memory for the set only (ASCII in a
    /// bitmap, other characters in a sorted set).
    pub fn from_chars_of(chars: impl Iterator<Item = char>) -> Vocab {
        let mut ascii = [false; 128];
        let mut other = std::collections::BTreeSet::new();
        for c in chars {
            match ascii.get_mut(c as usize) {
                Some(seen) => *seen = true,
                None => {
                    other.insert(c);
                }
            }
        }
        let chars: Vec<char> = (0..128u8)
            .filter(|&b| ascii[b as usize])
            .map(char::from)
            .chain(other)
            .collect();
        let index = chars
            .iter()
            .enumerate()
            .map(|(i, &c)| (c, i as u32))
            .collect();
        Vocab { chars, index }
    }

    /// A vocabulary in the given id order. Characters must be distinct and there must be at
    /// least one (and fewer than 2^32).
    pub fn from_chars(chars: Vec<char>) -> Result<Vocab> {
        if chars.is_empty() {
            return Err(Error::data("a vocabulary needs at least one character"));
        }
        if u32::try_from(chars.len()).is_err() {
            return Err(Error::data(format!(
                "a vocabulary of {} characters does not fit u32 ids",
                chars.len()
            )));
        }
        let mut index: Vec<(char, u32)> = chars
            .iter()
            .enumerate()
            .map(|(i, &c)| (c, i as u32))
            .collect();
        index.sort_unstable();
        if let Some(w) = index.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(Error::data(format!(
                "the vocabulary lists {} twice (ids {} and {})",
                describe_char(w[0].0),
                w[0].1,
                w[1].1
            )));
        }
        Ok(Vocab { chars, index })
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.chars.len()
    }

    pub fn is_empty(&self) -> bool {
        self.chars.is_empty()
    }

    /// The characters in id order.
    pub fn chars(&self) -> &[char] {
        &self.chars
    }

    /// The id of one character.
    pub fn id(&self, c: char) -> Option<u32> {
        self.index
            .binary_search_by_key(&c, |&(k, _)| k)
            .ok()
            .map(|i| self.index[i].1)
    }

    /// Ids of every character of `text`. A character outside the vocabulary is an error
    /// naming it and its position (in characters).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        text.chars()
            .enumerate()
            .map(|(i, c)| {
                self.id(c).ok_or_else(|| {
                    Error::data(format!(
                        "{} at character {i} is not in the vocabulary of {} characters",
                        describe_char(c),
                        self.len()
                    ))
                })
            })
            .collect()
    }

    /// The text of `ids`. An id outside the vocabulary is an error naming it and its position.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        ids.iter()
            .enumerate()
            .map(|(i, &id)| {
                self.chars.get(id as usize).copied().ok_or_else(|| {
                    Error::data(format!(
                        "token {id} at position {i} is not below the vocabulary size {}",
                        self.len()
                    ))
                })
            })
            .collect()
    }

    /// JSON form, for checkpoint metadata: an array of one-character strings in id order
    /// (`["\n", " ", "!", ...]`).
    pub fn to_json(&self) -> String {
        let strings: Vec<String> = self.chars.iter().map(|c| c.to_string()).collect();
        serde_json::Value::from(strings).to_string()
    }

    /// Parses [`Vocab::to_json`]'s form. Each entry must be exactly one character.
    pub fn from_json(json: &str) -> Result<Vocab> {
        let strings: Vec<String> = serde_json::from_str(json).map_err(|e| {
            Error::data(format!(
                "a vocabulary is a JSON array of one-character strings: {e}"
            ))
        })?;
        let chars = strings
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let mut it = s.chars();
                match (it.next(), it.next()) {
                    (Some(c), None) => Ok(c),
                    _ => Err(Error::data(format!(
                        "vocabulary entry {i} is {s:?}, not one character"
                    ))),
                }
            })
            .collect::<Result<Vec<char>>>()?;
        Vocab::from_chars(chars)
    }
}

/// A character for messages: `'a' (U+0061)`, with escapes for control characters.
pub(super) fn describe_char(c: char) -> String {
    format!("character {:?} (U+{:04X})", c, c as u32)
}
