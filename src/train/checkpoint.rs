//! Checkpoints as safetensors files.
//!
//! Tensors: the model's parameters and buffers (running statistics, counters: in their own
//! dtype, `checkpoint/buffers.rs`), under PyTorch's names and layouts, so
//! `model.load_state_dict(safetensors.torch.load_file(path))` works in PyTorch (strict).
//! Everything else — optimizer state (moments per parameter name, step), the GradScaler's
//! `state_dict` (PyTorch key names), progress (step, epoch, batch, seed), the precision, and
//! for models of text the vocabulary (`vocab`: a JSON array of one-character strings in id
//! order, so `sample` decodes without the data) and the model description (`model`, JSON) —
//! goes in the `__metadata__` string map as JSON, with moment vectors as base64 of
//! little-endian f32 — or, when they are too big for safetensors' 100 MB header, in a
//! moments file beside the checkpoint (`moments_file.rs`). Files are written atomically:
//! temp file, fsync, rename; temp files a killed writer left behind are removed by the next
//! save.

#[cfg(not(target_arch = "wasm32"))]
mod atomic;
mod buffers;
#[cfg(not(target_arch = "wasm32"))]
mod disk_full;
mod finite;
mod hf;
mod metadata;
mod model_buffers;
mod model_params;
#[cfg(not(target_arch = "wasm32"))]
mod moments_file;
mod named_tensor;
mod optimizer_state;
mod save_pause;
#[cfg(not(target_arch = "wasm32"))]
mod save_target;
#[cfg(not(target_arch = "wasm32"))]
pub use atomic::save_file;
pub use buffers::NamedBuffer;
#[cfg(not(target_arch = "wasm32"))]
pub use disk_full::DISK_FULL_ENV;
pub use model_params::add_tied_aliases;
#[cfg(not(target_arch = "wasm32"))]
pub use moments_file::{INLINE_MOMENTS_MAX, INLINE_MOMENTS_MAX_ENV};
pub use named_tensor::NamedTensor;
pub use optimizer_state::{MomentsFileRef, NamedOptimizerState, decode_f32, encode_f32};
pub use save_pause::SAVE_PAUSE_ENV;
#[cfg(not(target_arch = "wasm32"))]
use save_pause::pause_before_rename;
#[cfg(not(target_arch = "wasm32"))]
pub use save_target::check_save_target;

use std::collections::HashMap;

use safetensors::tensor::{Dtype, SafeTensorError, TensorView};

use crate::amp::scaler::ScalerStateDict;
use crate::data::Vocab;
#[cfg(not(target_arch = "wasm32"))]
use crate::data::file_caps::{CHECKPOINT_FILE, read_capped};
use crate::error::{Error, Result};
use metadata::check_format_and_precision;
pub use metadata::{DataOrder, FORMAT};
use optimizer_state::OptimizerMeta;

/// Where training stands, so a resumed run continues exactly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Progress {
    /// Optimizer steps done.
    pub step: u64,
    /// Current epoch (0-based) and the next batch within it.
    pub epoch: u64,
    pub batch_in_epoch: u64,
    /// The seed the data order derives from (with the epoch).
    pub seed: u64,
}

impl Progress {
    /// Most steps, epochs or batches a progress may count: counters only ever grow by one,
    /// so more than 2^53 (beyond any run, and beyond exact f64 for metrics) means a corrupt
    /// file, and this bound keeps every later `+ 1` far from overflow.
    pub const MAX_COUNT: u64 = super::settings::MAX_COUNT;

    /// `Err` naming the counter that is out of range.
    pub fn check(&self) -> std::result::Result<(), String> {
        for (name, v) in [
            ("step", self.step),
            ("epoch", self.epoch),
            ("batch_in_epoch", self.batch_in_epoch),
        ] {
            if v > Self::MAX_COUNT {
                return Err(format!(
                    "{name} {v} is out of range (at most 2^53); the file is corrupt"
                ));
            }
        }
        Ok(())
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Checkpoint {
    pub params: Vec<NamedTensor>,
    /// Integer buffers (int64, PyTorch's `num_batches_tracked`); f32 buffers are among
    /// `params` by name until the model says which they are ([`Checkpoint::buffers_for_model`]).
    pub buffers: Vec<NamedBuffer>,
    pub optimizer: Option<NamedOptimizerState>,
    pub scaler: Option<ScalerStateDict>,
    pub progress: Progress,
    pub precision: Option<String>,
    /// The vocabulary of a model trained on text (metadata key `vocab`).
    pub vocab: Option<Vocab>,
    /// The model description (metadata key `model`, any JSON value).
    pub model: Option<serde_json::Value>,
    /// How the run that wrote it cut its data into batches (metadata key `data`): a resume
    /// that cut them otherwise would continue from another position in the data.
    pub data: Option<DataOrder>,
}

impl Checkpoint {
    /// The checkpoint as one safetensors file, moments in the header (see [`Checkpoint::save`]
    /// for models whose moments do not fit there).
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let optimizer = self.optimizer_meta(None)?;
        self.encode(optimizer.as_ref())
    }

    /// The header's `optimizer` entry, moments inline or in the moments file `file`.
    fn optimizer_meta(&self, file: Option<MomentsFileRef>) -> Result<Option<OptimizerMeta>> {
        let Some(o) = &self.optimizer else {
            return Ok(None);
        };
        if let Some(why) = &o.unavailable {
            // Writing it would drop the moments it never had.
            return Err(Error::Checkpoint(format!(
                "cannot save an optimizer state whose moments were not read: {why}"
            )));
        }
        Ok(Some(o.to_meta(file)))
    }

    fn encode(&self, optimizer: Option<&OptimizerMeta>) -> Result<Vec<u8>> {
        let mut meta = HashMap::new();
        meta.insert("format".to_string(), FORMAT.to_string());
        meta.insert("progress".into(), to_json(&self.progress)?);
        if let Some(o) = optimizer {
            meta.insert("optimizer".into(), to_json(o)?);
        }
        if let Some(s) = &self.scaler {
            meta.insert("scaler".into(), to_json(s)?);
        }
        if let Some(p) = &self.precision {
            meta.insert("precision".into(), p.clone());
        }
        if let Some(v) = &self.vocab {
            meta.insert("vocab".into(), v.to_json());
        }
        if let Some(m) = &self.model {
            meta.insert("model".into(), m.to_string());
        }
        if let Some(d) = &self.data {
            meta.insert("data".into(), to_json(d)?);
        }
        let views: Vec<(String, TensorView<'_>)> = self
            .params
            .iter()
            .map(|t| {
                TensorView::new(Dtype::F32, t.shape.clone(), bytemuck::cast_slice(&t.values))
                    .map(|v| (t.name.clone(), v))
                    .map_err(|e| Error::Checkpoint(format!("tensor `{}`: {e}", t.name)))
            })
            .chain(self.buffers.iter().map(NamedBuffer::view))
            .collect::<Result<_>>()?;
        let moments_inline = optimizer.is_some_and(|o| o.moments_file.is_none());
        safetensors::serialize(views, Some(meta)).map_err(|e| match e {
            SafeTensorError::HeaderTooLarge if moments_inline => Error::Checkpoint(format!(
                "serialising: header too large: the optimizer moments ({} values) do not fit \
                 in the header; `save` puts them in a moments file",
                self.optimizer.as_ref().map_or(0, |o| o.moment_values())
            )),
            e => Error::Checkpoint(format!("serialising: {e}")),
        })
    }

    /// Parse a checkpoint (or a plain PyTorch state_dict file: then only `params` is set).
    pub fn from_bytes(bytes: &[u8], what: &str) -> Result<Self> {
        let (params, buffers) = read_params(bytes, what)?;
        finite::check_params(&params, what)?;
        let (_, metadata) = safetensors::SafeTensors::read_metadata(bytes)
            .map_err(|e| Error::Checkpoint(format!("{what}: not a safetensors file: {e}")))?;
        let meta = metadata.metadata().clone().unwrap_or_default();
        check_format_and_precision(&meta, what)?;
        let parse = |key: &str| -> Result<Option<serde_json::Value>> {
            meta.get(key)
                .map(|s| {
                    serde_json::from_str(s)
                        .map_err(|e| Error::Checkpoint(format!("{what}: metadata `{key}`: {e}")))
                })
                .transpose()
        };
        fn from<T: serde::de::DeserializeOwned>(
            v: serde_json::Value,
            what: &str,
            key: &str,
        ) -> Result<T> {
            serde_json::from_value(v)
                .map_err(|e| Error::Checkpoint(format!("{what}: metadata `{key}`: {e}")))
        }
        let progress: Progress = parse("progress")?
            .map(|v| from(v, what, "progress"))
            .transpose()?
            .unwrap_or_default();
        progress
            .check()
            .map_err(|m| Error::Checkpoint(format!("{what}: metadata `progress`: {m}")))?;
        Ok(Self {
            params,
            buffers,
            optimizer: parse("optimizer")?
                .map(|v| from::<OptimizerMeta>(v, what, "optimizer"))
                .transpose()?
                .map(|m| NamedOptimizerState::from_meta(m, what))
                .transpose()?,
            scaler: parse("scaler")?
                .map(|v| from(v, what, "scaler"))
                .transpose()?,
            progress,
            precision: meta.get("precision").cloned(),
            vocab: meta
                .get("vocab")
                .map(|s| {
                    Vocab::from_json(s).map_err(|e| {
                        let msg = match e {
                            Error::Data(m) => m,
                            other => other.to_string(),
                        };
                        Error::Checkpoint(format!("{what}: metadata `vocab`: {msg}"))
                    })
                })
                .transpose()?,
            model: parse("model")?,
            data: parse("data")?.map(|v| from(v, what, "data")).transpose()?,
        })
    }

    /// The vocabulary that decodes the model's token ids (text models).
    pub fn vocab(&self) -> Option<&Vocab> {
        self.vocab.as_ref()
    }

    /// Write atomically: a temp file beside the target, fsync, then rename over it. A crash
    /// at any point leaves either the old file or the new one, never a torn one. Moments too
    /// big for the header go first to their own file (see `moments_file.rs`). A save that
    /// fails at any stage (a full disk: the error names the file and the bytes the save
    /// needs) leaves the previous checkpoint and its moments file as they were, and no
    /// partial file.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn save(&self, path: &std::path::Path) -> Result<()> {
        self.save_with_inline_limit(path, moments_file::inline_max()?)
    }

    /// [`Checkpoint::save`] with moments of up to `inline_max` bytes (raw f32) in the header
    /// and bigger ones in a moments file ([`INLINE_MOMENTS_MAX`] in `save`).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn save_with_inline_limit(&self, path: &std::path::Path, inline_max: usize) -> Result<()> {
        // Through a symlink: the moments file goes beside the file the link points to.
        let path = &save_target::resolve_save_target(path, "save to")?;
        let name = path
            .file_name()
            .ok_or_else(|| Error::Checkpoint(format!("{}: not a file path", path.display())))?
            .to_string_lossy()
            .into_owned();
        let moment_bytes = self.optimizer.as_ref().map_or(0, |o| 4 * o.moment_values());
        // Everything is encoded before anything is written, so a failed write can say what
        // the whole save needs.
        let mut moments = None;
        if moment_bytes > inline_max
            && let Some(o) = &self.optimizer
        {
            let bytes = moments_file::encode(o, &self.params, &name)?;
            let crc32 = crc32fast::hash(&bytes);
            let file = moments_file::file_name(&name, crc32);
            moments = Some((MomentsFileRef { file, crc32 }, bytes));
        }
        let optimizer = self.optimizer_meta(moments.as_ref().map(|(f, _)| f.clone()))?;
        let bytes = self.encode(optimizer.as_ref())?;
        let needs = (bytes.len() + moments.as_ref().map_or(0, |(_, b)| b.len())) as u64;
        let mut written_moments = None;
        if let Some((file, moment_bytes)) = &moments {
            moments_file::remove_unnamed(path);
            let path = save_target::parent_dir(path).join(&file.file);
            // Same name, same CRC: the previous save's file, which its checkpoint still names.
            let existed = path.symlink_metadata().is_ok();
            atomic::write_atomic(&path, moment_bytes, needs, |_| Ok(()))?;
            written_moments = (!existed).then_some(path);
        }
        if let Err(e) = atomic::write_atomic(path, &bytes, needs, pause_before_rename) {
            // The previous checkpoint names its own moments file; this one is nobody's.
            if let Some(orphan) = written_moments {
                let _ = std::fs::remove_file(orphan);
            }
            return Err(e);
        }
        moments_file::remove_others(path, moments.as_ref().map(|(f, _)| f.file.as_str()));
        Ok(())
    }

    /// Read a checkpoint, and its moments file if it names one. A moments file that is
    /// missing or does not match leaves the optimizer state `unavailable` (resuming says
    /// why), not the whole file unreadable: the weights still serve `--init` and `sample`.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn load(path: &std::path::Path) -> Result<Self> {
        let bytes = read_capped(path, CHECKPOINT_FILE).map_err(Error::Checkpoint)?;
        let mut ck = Self::from_bytes(&bytes, &path.display().to_string())?;
        if let Some(o) = &mut ck.optimizer
            && let Some(f) = &o.moments_file
        {
            // Beside the file itself, where a save through a symlink put it.
            let file = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
            let read = moments_file::read(&file, &f.file, f.crc32).and_then(|moments| {
                finite::check_moments(&moments, &f.file)?;
                Ok(moments)
            });
            match read {
                Ok(moments) => {
                    o.moments = moments;
                    o.unavailable = None;
                }
                Err(why) => o.unavailable = Some(why),
            }
        }
        Ok(ck)
    }
}

/// Every floating-point tensor of a safetensors file as f32 (f32, f16, bf16 and f64
/// accepted), and every integer one (int64, int32) as a buffer.
fn read_params(bytes: &[u8], what: &str) -> Result<(Vec<NamedTensor>, Vec<NamedBuffer>)> {
    let st = safetensors::SafeTensors::deserialize(bytes)
        .map_err(|e| Error::Checkpoint(format!("{what}: not a safetensors file: {e}")))?;
    let mut out = Vec::new();
    let mut buffers = Vec::new();
    for (name, view) in st.iter() {
        if let Some(b) = buffers::read_integer(name, &view) {
            buffers.push(b);
            continue;
        }
        let data = view.data();
        let values: Vec<f32> = match view.dtype() {
            Dtype::F32 => bytemuck::pod_collect_to_vec(data),
            Dtype::F64 => bytemuck::pod_collect_to_vec::<u8, f64>(data)
                .into_iter()
                .map(|v| v as f32)
                .collect(),
            Dtype::F16 => bytemuck::pod_collect_to_vec::<u8, u16>(data)
                .into_iter()
                .map(|b| half::f16::from_bits(b).to_f32())
                .collect(),
            Dtype::BF16 => bytemuck::pod_collect_to_vec::<u8, u16>(data)
                .into_iter()
                .map(|b| half::bf16::from_bits(b).to_f32())
                .collect(),
            other => {
                return Err(Error::Checkpoint(format!(
                    "{what}: tensor `{name}` has dtype {other:?}; parameters must be floating \
                     point, buffers floating point or int64"
                )));
            }
        };
        out.push(NamedTensor {
            name: name.to_string(),
            shape: view.shape().to_vec(),
            values,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    buffers.sort_by(|a, b| a.name.cmp(&b.name));
    Ok((out, buffers))
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<String> {
    serde_json::to_string(value).map_err(|e| Error::Checkpoint(format!("metadata: {e}")))
}
