//! `train --export-hf DIR`: the trained model as a Hugging Face transformers folder that
//! `AutoModelForCausalLM.from_pretrained(DIR)` loads with no missing or unexpected keys
//! (`config.json`, `model.safetensors` in f32: the family writes them,
//! `FamilyModel::export_folder`), the run's `tokenizer.json` (`--tokenizer`, else the one of
//! the `--model hf:` folder the run started from when it has one), and our resume state beside them: the run's final
//! checkpoint (`--save`'s file; `DIR/webgpu-amp-state.safetensors` when `--save` is not
//! given), which `train --resume` continues.

use std::path::{Path, PathBuf};

use webgpu_amp::data::file_caps::{TOKENIZER_FILE, read_capped};
use webgpu_amp::data::hf::{HostTensor, TOKENIZER};
use webgpu_amp::nn::ModelSpec;
use webgpu_amp::train::checkpoint::{Checkpoint, save_file};
use webgpu_amp::{Error, Result};

use super::resolve::HF_PREFIX;

/// The resume state's file in an exported folder when `--save` names none.
pub const STATE_FILE: &str = "webgpu-amp-state.safetensors";

/// Before the run: a folder `DIR` can be made or is one (a file of that name is refused),
/// and the checkpoint the run saves for it: `save` when given, else `DIR/STATE_FILE`.
pub fn prepare(dir: &Path, save: Option<&Path>, spec: &ModelSpec) -> Result<PathBuf> {
    let refuse =
        |msg: String| Error::InvalidArgument(format!("--export-hf {}: {msg}", dir.display()));
    let Some(family) = &spec.family else {
        return Err(refuse(
            "a Hugging Face folder holds a model family's model (a Llama); this run's model \
             is none"
                .into(),
        ));
    };
    // A family without a folder form says so before any training.
    family
        .export_folder(&[])
        .map_err(|e| refuse(e.to_string()))?;
    if dir.exists() && !dir.is_dir() {
        return Err(refuse("exists and is not a folder".into()));
    }
    std::fs::create_dir_all(dir).map_err(|e| refuse(format!("cannot make the folder ({e})")))?;
    Ok(save.map_or_else(|| dir.join(STATE_FILE), Path::to_path_buf))
}

/// After the run: the folder from the checkpoint it saved at `state`, with the tokenizer of
/// `--tokenizer` or of the `--model hf:` folder (the flags `(model, tokenizer)`).
pub fn export(
    dir: &Path,
    state: &Path,
    spec: &ModelSpec,
    (model_flag, tokenizer_flag): (Option<&str>, Option<&Path>),
) -> Result<()> {
    let family = spec.family.as_ref().expect("checked by prepare");
    let ck = Checkpoint::load(state)?;
    // The checkpoint's tensors are under the family's names already (its table); the
    // model's buffers (none persistent in a Llama) are not the folder's.
    let buffers = spec.buffers();
    let tensors: Vec<HostTensor> = ck
        .params
        .into_iter()
        .filter(|t| !buffers.iter().any(|b| b.name == spec.import_name(&t.name)))
        .map(|t| HostTensor {
            name: t.name,
            shape: t.shape,
            values: t.values,
        })
        .collect();
    let flag = format!("--export-hf {}", dir.display());
    for (name, bytes) in family.export_folder(&tensors)? {
        save_file(&dir.join(name), &bytes, &flag)?;
    }
    // The run's tokenizer, or the one of the folder the run started from, as transformers
    // keeps it beside.
    let from_folder = model_flag
        .and_then(|m| m.strip_prefix(HF_PREFIX))
        .map(|from| Path::new(from).join(TOKENIZER));
    if let Some(tokenizer) = tokenizer_flag.map(Path::to_path_buf).or(from_folder)
        && tokenizer.is_file()
    {
        let bytes = read_capped(&tokenizer, TOKENIZER_FILE).map_err(Error::InvalidArgument)?;
        save_file(&dir.join(TOKENIZER), &bytes, &flag)?;
    }
    Ok(())
}
