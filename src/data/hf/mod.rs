//! Hugging Face transformers folders, as `save_pretrained` writes them: `config.json`
//! ([`LlamaConfig`]), the weights in `model.safetensors` or in shards listed by
//! `model.safetensors.index.json` (f32, f16 or bf16; read here as f32 host arrays, exactly),
//! and `tokenizer.json` when there is one. The files come from a directory or from memory (a
//! folder picked in a page): [`FolderSource`]. Writing goes the other way
//! ([`folder_files`]: the files' bytes, for the caller to save atomically): one
//! `model.safetensors` in f32, f16 or bf16 (rounded to nearest even) with the metadata
//! `{"format": "pt"}` transformers asks for, and the config as transformers 5 writes it.
//!
//! Names are the file's (`model.layers.0.self_attn.q_proj.weight`): mapping them to a
//! model's parameters is the family's table. Every error names the file, and the tensor
//! where there is one.

mod config;
mod source;

use std::collections::BTreeMap;
use std::path::Path;

use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};

pub use config::LlamaConfig;
pub use source::{DiskFolder, FolderSource, MemoryFolder};

use super::file_caps::{CHECKPOINT_FILE, MODEL_FILE};
use crate::error::{Error, Result};

/// The files of a folder, as transformers names them.
pub const CONFIG: &str = "config.json";
pub const WEIGHTS: &str = "model.safetensors";
pub const WEIGHTS_INDEX: &str = "model.safetensors.index.json";
pub const TOKENIZER: &str = "tokenizer.json";

/// One tensor on the host, as f32.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    pub name: String,
    pub shape: Vec<usize>,
    pub values: Vec<f32>,
}

/// A folder read: its config and every tensor by name.
#[derive(Debug)]
pub struct HfFolder {
    pub config: LlamaConfig,
    pub tensors: BTreeMap<String, HostTensor>,
    /// The dtypes the tensors were stored in (`BF16`, ...), for messages.
    pub stored_as: Vec<Dtype>,
}

/// How [`folder_files`] stores the weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SaveDtype {
    F32,
    F16,
    BF16,
}

impl SaveDtype {
    /// transformers' name of it (`config.json`'s `dtype`).
    pub fn torch_name(self) -> &'static str {
        match self {
            SaveDtype::F32 => "float32",
            SaveDtype::F16 => "float16",
            SaveDtype::BF16 => "bfloat16",
        }
    }
}

fn folder_error(file: &str, msg: impl std::fmt::Display) -> Error {
    Error::Checkpoint(format!("{file}: {msg}"))
}

/// Reads the folder at `dir`.
pub fn read_folder(dir: &Path) -> Result<HfFolder> {
    read_from(&DiskFolder::new(dir))
}

/// Reads the folder `source` holds: its config, then its tensors.
pub fn read_from(source: &dyn FolderSource) -> Result<HfFolder> {
    let config = read_config(source)?;
    let (tensors, stored_as) = read_tensors(source)?;
    Ok(HfFolder {
        config,
        tensors,
        stored_as,
    })
}

/// The folder's `config.json` (nothing else is read: a model's size is known from it
/// before its weights are).
pub fn read_config(source: &dyn FolderSource) -> Result<LlamaConfig> {
    if !source.is_folder() {
        return Err(folder_error(
            &source.location(),
            "not a folder (a Hugging Face model folder holds config.json and model.safetensors)",
        ));
    }
    let name = source.file(CONFIG);
    let text = source.read(CONFIG, MODEL_FILE)?;
    let text = std::str::from_utf8(&text).map_err(|_| folder_error(&name, "not UTF-8"))?;
    LlamaConfig::from_json(text, &name)
}

/// Every tensor of the folder's weight files by name, as f32, and the dtypes they were
/// stored in.
pub fn read_tensors(
    source: &dyn FolderSource,
) -> Result<(BTreeMap<String, HostTensor>, Vec<Dtype>)> {
    let mut tensors = BTreeMap::new();
    let mut stored_as = Vec::new();
    for (file, names) in weight_files(source)? {
        let bytes = source.read(&file, CHECKPOINT_FILE)?;
        let file = source.file(&file);
        let st = SafeTensors::deserialize(&bytes)
            .map_err(|e| folder_error(&file, format!("not a safetensors file: {e}")))?;
        let wanted: Vec<String> = match names {
            Some(names) => names,
            None => st.names().into_iter().map(str::to_string).collect(),
        };
        for name in wanted {
            let view = st.tensor(&name).map_err(|_| {
                folder_error(
                    &file,
                    format!("holds no tensor `{name}`, which {WEIGHTS_INDEX} places there"),
                )
            })?;
            if !stored_as.contains(&view.dtype()) {
                stored_as.push(view.dtype());
            }
            let values =
                f32_values(&view).map_err(|e| folder_error(&file, format!("{name}: {e}")))?;
            let tensor = HostTensor {
                name: name.clone(),
                shape: view.shape().to_vec(),
                values,
            };
            if tensors.insert(name.clone(), tensor).is_some() {
                return Err(folder_error(
                    &file,
                    format!("tensor `{name}` is in two shards"),
                ));
            }
        }
    }
    Ok((tensors, stored_as))
}

/// The weight files of the folder and, for shards, the tensors the index places in each.
fn weight_files(source: &dyn FolderSource) -> Result<Vec<(String, Option<Vec<String>>)>> {
    if source.has(WEIGHTS) {
        return Ok(vec![(WEIGHTS.to_string(), None)]);
    }
    if !source.has(WEIGHTS_INDEX) {
        let hint = if source.has("pytorch_model.bin") {
            " (it has pytorch_model.bin: save it as safetensors, e.g. \
             `model.save_pretrained(dir, safe_serialization=True)`)"
        } else {
            ""
        };
        return Err(folder_error(
            &source.location(),
            format!("holds neither {WEIGHTS} nor {WEIGHTS_INDEX}{hint}"),
        ));
    }
    let index = source.file(WEIGHTS_INDEX);
    let text = source.read(WEIGHTS_INDEX, MODEL_FILE)?;
    let value: serde_json::Value = serde_json::from_slice(&text)
        .map_err(|e| folder_error(&index, format!("not JSON: {e}")))?;
    let Some(map) = value.get("weight_map").and_then(|m| m.as_object()) else {
        return Err(folder_error(&index, "has no `weight_map` object"));
    };
    let mut shards: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, file) in map {
        let Some(file) = file.as_str().filter(|f| is_plain_file_name(f)) else {
            return Err(folder_error(
                &index,
                format!("tensor `{name}`: its shard {file} is not a file name in the folder"),
            ));
        };
        shards
            .entry(file.to_string())
            .or_default()
            .push(name.clone());
    }
    Ok(shards
        .into_iter()
        .map(|(file, names)| (file, Some(names)))
        .collect())
}

/// A shard's name must stay inside the folder.
fn is_plain_file_name(name: &str) -> bool {
    let path = Path::new(name);
    !name.is_empty() && path.file_name().is_some_and(|f| f == path.as_os_str())
}

/// A tensor's values as f32: f32 as stored, f16 and bf16 widened (exact).
fn f32_values(view: &TensorView<'_>) -> std::result::Result<Vec<f32>, String> {
    let data = view.data();
    Ok(match view.dtype() {
        Dtype::F32 => data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        Dtype::F16 => data
            .chunks_exact(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        Dtype::BF16 => data
            .chunks_exact(2)
            .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        other => {
            return Err(format!(
                "stored as {other:?}; model weights are read from F32, F16 or BF16"
            ));
        }
    })
}

/// The files of a folder that `LlamaForCausalLM.from_pretrained` loads: `config.json` and
/// `model.safetensors` (the tensors in `dtype`, sorted by name), as (file name, bytes).
pub fn folder_files(
    config: &LlamaConfig,
    tensors: &[HostTensor],
    dtype: SaveDtype,
) -> Result<Vec<(&'static str, Vec<u8>)>> {
    let encoded: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
        .iter()
        .map(|t| {
            if t.values.len() != t.shape.iter().product::<usize>() {
                return Err(Error::Checkpoint(format!(
                    "tensor `{}`: {} values for shape {:?}",
                    t.name,
                    t.values.len(),
                    t.shape
                )));
            }
            Ok((t.name.clone(), t.shape.clone(), encode(&t.values, dtype)))
        })
        .collect::<Result<_>>()?;
    let st_dtype = match dtype {
        SaveDtype::F32 => Dtype::F32,
        SaveDtype::F16 => Dtype::F16,
        SaveDtype::BF16 => Dtype::BF16,
    };
    let views = encoded
        .iter()
        .map(|(name, shape, bytes)| {
            TensorView::new(st_dtype, shape.clone(), bytes)
                .map(|v| (name.as_str(), v))
                .map_err(|e| Error::Checkpoint(format!("tensor `{name}`: {e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    let meta = [("format".to_string(), "pt".to_string())].into();
    let weights = safetensors::serialize(views, Some(meta))
        .map_err(|e| Error::Checkpoint(format!("{WEIGHTS}: {e}")))?;
    let config = config.to_json(dtype.torch_name()).into_bytes();
    Ok(vec![(CONFIG, config), (WEIGHTS, weights)])
}

/// Little-endian bytes of `values` in `dtype` (round to nearest even).
fn encode(values: &[f32], dtype: SaveDtype) -> Vec<u8> {
    match dtype {
        SaveDtype::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        SaveDtype::F16 => values
            .iter()
            .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
            .collect(),
        SaveDtype::BF16 => values
            .iter()
            .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("webgpu-amp-hf-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    const CONFIG_TEXT: &str = r#"{"vocab_size": 4, "hidden_size": 2, "intermediate_size": 3,
        "num_hidden_layers": 1, "num_attention_heads": 1, "model_type": "llama"}"#;

    #[test]
    fn a_written_folder_reads_back_in_every_dtype() {
        let config = LlamaConfig::from_json(CONFIG_TEXT, "c").unwrap();
        let tensors = vec![
            HostTensor {
                name: "model.norm.weight".into(),
                shape: vec![2],
                values: vec![1.0, -0.333_333_34],
            },
            HostTensor {
                name: "lm_head.weight".into(),
                shape: vec![4, 2],
                values: (0..8).map(|i| i as f32 * 0.1).collect(),
            },
        ];
        for dtype in [SaveDtype::F32, SaveDtype::F16, SaveDtype::BF16] {
            let d = dir(dtype.torch_name());
            for (name, bytes) in folder_files(&config, &tensors, dtype).unwrap() {
                std::fs::write(d.join(name), bytes).unwrap();
            }
            let read = read_folder(&d).unwrap();
            assert_eq!(read.config.hidden_size, 2);
            for t in &tensors {
                let got = &read.tensors[&t.name];
                assert_eq!(got.shape, t.shape);
                let round = |v: f32| match dtype {
                    SaveDtype::F32 => v,
                    SaveDtype::F16 => half::f16::from_f32(v).to_f32(),
                    SaveDtype::BF16 => half::bf16::from_f32(v).to_f32(),
                };
                let want: Vec<f32> = t.values.iter().map(|v| round(*v)).collect();
                assert_eq!(got.values, want, "{dtype:?} {}", t.name);
            }
            let _ = std::fs::remove_dir_all(&d);
        }
    }

    #[test]
    fn missing_and_bad_files_are_named() {
        let d = dir("bad");
        let e = read_folder(&d).unwrap_err().to_string();
        assert!(
            e.contains("config.json") && e.contains("cannot read"),
            "{e}"
        );
        std::fs::write(d.join(CONFIG), CONFIG_TEXT).unwrap();
        let e = read_folder(&d).unwrap_err().to_string();
        assert!(e.contains("holds neither model.safetensors nor"), "{e}");
        std::fs::write(
            d.join(WEIGHTS_INDEX),
            r#"{"weight_map": {"model.norm.weight": "model-00001-of-00001.safetensors"}}"#,
        )
        .unwrap();
        let e = read_folder(&d).unwrap_err().to_string();
        assert!(e.contains("model-00001-of-00001.safetensors"), "{e}");
        std::fs::write(
            d.join(WEIGHTS_INDEX),
            r#"{"weight_map": {"x": "../elsewhere.safetensors"}}"#,
        )
        .unwrap();
        let e = read_folder(&d).unwrap_err().to_string();
        assert!(
            e.contains("tensor `x`") && e.contains("not a file name"),
            "{e}"
        );
        // A shard without the tensor its index names.
        let config = LlamaConfig::from_json(CONFIG_TEXT, "c").unwrap();
        let t = HostTensor {
            name: "a".into(),
            shape: vec![1],
            values: vec![1.0],
        };
        let files = folder_files(&config, &[t], SaveDtype::F32).unwrap();
        std::fs::write(d.join("s.safetensors"), &files[1].1).unwrap();
        std::fs::write(
            d.join(WEIGHTS_INDEX),
            r#"{"weight_map": {"b": "s.safetensors"}}"#,
        )
        .unwrap();
        let e = read_folder(&d).unwrap_err().to_string();
        assert!(
            e.contains("s.safetensors") && e.contains("no tensor `b`"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&d);
    }
}
