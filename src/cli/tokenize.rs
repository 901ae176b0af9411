//! `webgpu-amp tokenize --tokenizer FILE [TEXT_FILE]`: the ids a Hugging Face
//! `tokenizer.json` gives a text (standard input when no file is named), as one JSON array:
//! what Python's `tokenizers.Tokenizer.from_file(FILE).encode(text).ids` gives, for a user
//! to check a tokenizer before training on it.

use std::io::Read;
use std::path::PathBuf;

use clap::Args;
use webgpu_amp::data::Tokenizer;
use webgpu_amp::data::file_caps::TEXT_FILE;
use webgpu_amp::{Error, Result};

use super::out::outln;

#[derive(Args)]
pub struct TokenizeArgs {
    /// A Hugging Face tokenizer.json (byte-level BPE as SmolLM2, GPT-2 and Llama 3 ship it).
    #[arg(long, value_name = "FILE")]
    tokenizer: PathBuf,
    /// The UTF-8 text to tokenize; standard input when absent.
    text_file: Option<PathBuf>,
}

pub fn run(args: &TokenizeArgs) -> Result<()> {
    let tokenizer = Tokenizer::from_file(&args.tokenizer)?;
    let (bytes, name) = match &args.text_file {
        Some(path) => (
            webgpu_amp::data::read_capped(path, TEXT_FILE).map_err(Error::Data)?,
            path.display().to_string(),
        ),
        None => (read_stdin()?, "standard input".to_string()),
    };
    let text = String::from_utf8(bytes).map_err(|e| {
        Error::Data(format!(
            "{name}: not UTF-8 (bad bytes at offset {})",
            e.utf8_error().valid_up_to()
        ))
    })?;
    let ids = tokenizer.encode(&text)?;
    outln!("{}", serde_json::to_string(&ids).expect("ids serialise"))
}

/// Standard input, at most the text cap.
fn read_stdin() -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    std::io::stdin()
        .lock()
        .take(TEXT_FILE.bytes + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::Data(format!("standard input: cannot read: {e}")))?;
    if bytes.len() as u64 > TEXT_FILE.bytes {
        return Err(Error::Data(format!(
            "standard input: more than the {} cap of {}",
            TEXT_FILE.what,
            TEXT_FILE.size()
        )));
    }
    Ok(bytes)
}
