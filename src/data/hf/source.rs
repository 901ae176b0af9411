//! Where a folder's files come from: a directory on disk ([`DiskFolder`], `--model hf:DIR`)
//! or files already in memory ([`MemoryFolder`]: the browser hands the bytes of the folder
//! the user picked). [`super::read_from`] reads either through [`FolderSource`], so both give
//! the same tensors and the same messages, each naming the file (`FOLDER/config.json`).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::data::file_caps::{FileCap, read_capped};
use crate::error::{Error, Result};

/// A folder's files by name.
pub trait FolderSource: Send + Sync {
    /// The folder, for messages: a path, or the name of a folder picked in a page.
    fn location(&self) -> String;

    /// Whether the folder holds a file `name`.
    fn has(&self, name: &str) -> bool;

    /// The bytes of the file `name`, at most `cap`'s; an error names the file.
    fn read(&self, name: &str, cap: FileCap) -> Result<Cow<'_, [u8]>>;

    /// `name` as messages say it: `FOLDER/name`.
    fn file(&self, name: &str) -> String {
        format!("{}/{name}", self.location().trim_end_matches('/'))
    }

    /// The folder is one (a directory on disk; files in memory always are).
    fn is_folder(&self) -> bool {
        true
    }
}

/// A directory on disk.
pub struct DiskFolder {
    dir: PathBuf,
}

impl DiskFolder {
    pub fn new(dir: &Path) -> Self {
        Self {
            dir: dir.to_path_buf(),
        }
    }
}

impl FolderSource for DiskFolder {
    fn location(&self) -> String {
        self.dir.display().to_string()
    }

    fn has(&self, name: &str) -> bool {
        self.dir.join(name).is_file()
    }

    fn read(&self, name: &str, cap: FileCap) -> Result<Cow<'_, [u8]>> {
        let bytes = read_capped(&self.dir.join(name), cap).map_err(Error::Checkpoint)?;
        Ok(Cow::Owned(bytes))
    }

    fn file(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    fn is_folder(&self) -> bool {
        self.dir.is_dir()
    }
}

/// Files held in memory: a folder picked in a page, read by its JavaScript.
#[derive(Clone, Debug, Default)]
pub struct MemoryFolder {
    name: String,
    files: BTreeMap<String, Vec<u8>>,
}

impl MemoryFolder {
    /// The folder `name` (for messages) with `files` (file name, bytes). A file in a
    /// subfolder (`sub/x.json`, as a page lists a folder's files) keeps its path; a name
    /// given twice is an error.
    pub fn new(name: &str, files: impl IntoIterator<Item = (String, Vec<u8>)>) -> Result<Self> {
        let mut held = BTreeMap::new();
        for (file, bytes) in files {
            if held.insert(file.clone(), bytes).is_some() {
                return Err(Error::Checkpoint(format!(
                    "{name}/{file}: the folder lists this file twice"
                )));
            }
        }
        Ok(Self {
            name: name.to_string(),
            files: held,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The files' names, in order.
    pub fn file_names(&self) -> impl Iterator<Item = &str> {
        self.files.keys().map(String::as_str)
    }
}

impl FolderSource for MemoryFolder {
    fn location(&self) -> String {
        self.name.clone()
    }

    fn has(&self, name: &str) -> bool {
        self.files.contains_key(name)
    }

    fn read(&self, name: &str, cap: FileCap) -> Result<Cow<'_, [u8]>> {
        let Some(bytes) = self.files.get(name) else {
            return Err(Error::Checkpoint(format!(
                "{}: cannot read: the folder has no such file (it has {})",
                self.file(name),
                list(self.file_names())
            )));
        };
        if bytes.len() as u64 > cap.bytes {
            return Err(Error::Checkpoint(format!(
                "{}: {} bytes, over the {} cap of a {}",
                self.file(name),
                bytes.len(),
                cap.size(),
                cap.what
            )));
        }
        Ok(Cow::Borrowed(bytes))
    }
}

/// `a, b and c` (`no files` for none).
fn list<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let names: Vec<&str> = names.collect();
    match names.as_slice() {
        [] => "no files".into(),
        [one] => (*one).into(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use safetensors::Dtype;
    use safetensors::tensor::TensorView;

    use super::super::{
        CONFIG, HostTensor, LlamaConfig, SaveDtype, WEIGHTS, WEIGHTS_INDEX, folder_files, read_from,
    };
    use super::*;

    const CONFIG_TEXT: &str = r#"{"vocab_size": 4, "hidden_size": 2, "intermediate_size": 3,
        "num_hidden_layers": 1, "num_attention_heads": 1, "model_type": "llama"}"#;

    fn tensor(name: &str, values: &[f32]) -> HostTensor {
        HostTensor {
            name: name.into(),
            shape: vec![values.len()],
            values: values.to_vec(),
        }
    }

    /// A safetensors file of `tensors` in f16 (transformers' weights for one shard).
    fn shard(tensors: &[HostTensor]) -> Vec<u8> {
        let config = LlamaConfig::from_json(CONFIG_TEXT, "c").unwrap();
        let files = folder_files(&config, tensors, SaveDtype::F16).unwrap();
        files.into_iter().find(|(n, _)| *n == WEIGHTS).unwrap().1
    }

    fn folder(files: &[(&str, Vec<u8>)]) -> MemoryFolder {
        let files = files.iter().map(|(n, b)| (n.to_string(), b.clone()));
        MemoryFolder::new("picked", files).unwrap()
    }

    fn err(source: &MemoryFolder) -> String {
        read_from(source).unwrap_err().to_string()
    }

    #[test]
    fn a_sharded_folder_in_memory_reads_as_on_disk() {
        let a = tensor("model.norm.weight", &[1.0, -0.5]);
        let b = tensor("lm_head.weight", &[0.25, 2.0, 3.0]);
        let index = r#"{"weight_map": {"model.norm.weight": "s1.safetensors",
            "lm_head.weight": "s2.safetensors"}}"#;
        let files = [
            (CONFIG, CONFIG_TEXT.as_bytes().to_vec()),
            (WEIGHTS_INDEX, index.as_bytes().to_vec()),
            ("s1.safetensors", shard(std::slice::from_ref(&a))),
            ("s2.safetensors", shard(std::slice::from_ref(&b))),
        ];
        let memory = read_from(&folder(&files)).unwrap();
        assert_eq!(memory.config.vocab_size, 4);
        assert_eq!(memory.tensors["model.norm.weight"], a);
        assert_eq!(memory.tensors["lm_head.weight"], b);
        assert_eq!(memory.stored_as, [Dtype::F16]);
        // The same files on disk read the same.
        let dir = std::env::temp_dir().join(format!("webgpu-amp-hf-mem-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for (name, bytes) in &files {
            std::fs::write(dir.join(name), bytes).unwrap();
        }
        let disk = read_from(&DiskFolder::new(&dir)).unwrap();
        assert_eq!(disk.tensors, memory.tensors);
        assert_eq!(disk.config, memory.config);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn missing_files_and_tensors_and_bad_dtypes_are_named() {
        let e = err(&folder(&[(WEIGHTS, shard(&[tensor("a", &[1.0])]))]));
        assert!(
            e.contains("picked/config.json: cannot read") && e.contains("model.safetensors"),
            "{e}"
        );
        let e = err(&folder(&[(CONFIG, b"{\"model_type\": \"gpt2\"}".to_vec())]));
        assert!(
            e.contains("picked/config.json") && e.contains("gpt2"),
            "{e}"
        );
        let e = err(&folder(&[(CONFIG, CONFIG_TEXT.as_bytes().to_vec())]));
        assert!(
            e.contains("picked: holds neither model.safetensors nor"),
            "{e}"
        );
        // A shard without the tensor the index places there.
        let index = br#"{"weight_map": {"b": "s.safetensors"}}"#.to_vec();
        let files = [
            (CONFIG, CONFIG_TEXT.as_bytes().to_vec()),
            (WEIGHTS_INDEX, index),
            ("s.safetensors", shard(&[tensor("a", &[1.0])])),
        ];
        let e = err(&folder(&files));
        assert!(
            e.contains("picked/s.safetensors") && e.contains("no tensor `b`"),
            "{e}"
        );
        // A shard the index names and the folder lacks.
        let index = br#"{"weight_map": {"b": "gone.safetensors"}}"#.to_vec();
        let e = err(&folder(&[
            (CONFIG, CONFIG_TEXT.as_bytes().to_vec()),
            (WEIGHTS_INDEX, index),
        ]));
        assert!(e.contains("picked/gone.safetensors: cannot read"), "{e}");
        // Integer weights.
        let ids = [1i64, 2, 3];
        let bytes: Vec<u8> = ids.iter().flat_map(|v| v.to_le_bytes()).collect();
        let view = TensorView::new(Dtype::I64, vec![3], &bytes).unwrap();
        let st = safetensors::serialize([("model.norm.weight", view)], None).unwrap();
        let e = err(&folder(&[
            (CONFIG, CONFIG_TEXT.as_bytes().to_vec()),
            (WEIGHTS, st),
        ]));
        assert!(
            e.contains("picked/model.safetensors: model.norm.weight: stored as I64"),
            "{e}"
        );
        // Not safetensors at all, and a file listed twice.
        let e = err(&folder(&[
            (CONFIG, CONFIG_TEXT.as_bytes().to_vec()),
            (WEIGHTS, b"xx".to_vec()),
        ]));
        assert!(
            e.contains("picked/model.safetensors: not a safetensors file"),
            "{e}"
        );
        let twice = [("a".to_string(), vec![]), ("a".to_string(), vec![1])];
        let e = MemoryFolder::new("picked", twice).unwrap_err().to_string();
        assert!(e.contains("picked/a") && e.contains("twice"), "{e}");
    }
}
