//! Checkpoints as safetensors files.
//!
//! Tensors: the model's parameters only, under PyTorch's names and layouts, so
//! `model.load_state_dict(safetensors.torch.load_file(path))` works in PyTorch (strict).
//! Everything else — optimizer state (moments per parameter name, step), the GradScaler's
//! `state_dict` (PyTorch key names), progress (step, epoch, batch, seed), the precision, and
//! for models of text the vocabulary (`vocab`: a JSON array of one-character strings in id
//! order, so `sample` decodes without the data) and the model description (`model`, JSON) —
//! goes in the `__metadata__` string map as JSON, with moment vectors as base64 of
//! little-endian f32. (safetensors caps the header at 100 MB: enough for Adam on models up to
//! a few million parameters.) Files are written atomically: temp file, fsync, rename; temp
//! files a killed writer left behind are removed by the next save.

mod save_pause;
pub use save_pause::SAVE_PAUSE_ENV;
#[cfg(not(target_arch = "wasm32"))]
use save_pause::pause_before_rename;

use std::collections::HashMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use safetensors::tensor::{Dtype, TensorView};

use crate::amp::scaler::ScalerStateDict;
use crate::data::Vocab;
use crate::error::{Error, Result};
use crate::optim::{OptimizerConfig, OptimizerState};

pub const FORMAT: &str = "webgpu-amp/1";

/// A named parameter: name, PyTorch shape, f32 values.
#[derive(Clone, Debug, PartialEq)]
pub struct NamedTensor {
    pub name: String,
    pub shape: Vec<usize>,
    pub values: Vec<f32>,
}

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
    pub const MAX_COUNT: u64 = 1 << 53;

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

/// Optimizer state per parameter name (moments unflattened from the flat buffers).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NamedOptimizerState {
    pub config: OptimizerConfig,
    pub step: u32,
    /// Moment name (`momentum_buffer`, `exp_avg`, `exp_avg_sq`) → parameter name → base64 f32.
    pub moments: HashMap<String, HashMap<String, String>>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Checkpoint {
    pub params: Vec<NamedTensor>,
    pub optimizer: Option<NamedOptimizerState>,
    pub scaler: Option<ScalerStateDict>,
    pub progress: Progress,
    pub precision: Option<String>,
    /// The vocabulary of a model trained on text (metadata key `vocab`).
    pub vocab: Option<Vocab>,
    /// The model description (metadata key `model`, any JSON value).
    pub model: Option<serde_json::Value>,
}

pub fn encode_f32(values: &[f32]) -> String {
    B64.encode(bytemuck::cast_slice::<f32, u8>(values))
}

pub fn decode_f32(s: &str, what: &str) -> Result<Vec<f32>> {
    let bytes = B64
        .decode(s)
        .map_err(|e| Error::Checkpoint(format!("{what}: bad base64: {e}")))?;
    if bytes.len() % 4 != 0 {
        return Err(Error::Checkpoint(format!(
            "{what}: length is not a multiple of 4"
        )));
    }
    Ok(bytemuck::pod_collect_to_vec(&bytes))
}

impl NamedOptimizerState {
    /// Split a flat optimizer state into per-parameter moments using `(name, offset, len)`.
    pub fn from_flat(
        config: OptimizerConfig,
        state: &OptimizerState,
        slices: &[(String, usize, usize)],
    ) -> Self {
        let mut moments = HashMap::new();
        for (key, flat) in [
            ("momentum_buffer", &state.momentum_buffer),
            ("exp_avg", &state.exp_avg),
            ("exp_avg_sq", &state.exp_avg_sq),
        ] {
            if let Some(flat) = flat {
                let per: HashMap<String, String> = slices
                    .iter()
                    .map(|(n, off, len)| (n.clone(), encode_f32(&flat[*off..*off + *len])))
                    .collect();
                moments.insert(key.to_string(), per);
            }
        }
        Self {
            config,
            step: state.step,
            moments,
        }
    }

    /// Rebuild a flat state of `total` elements with the current layout.
    pub fn to_flat(
        &self,
        slices: &[(String, usize, usize)],
        total: usize,
    ) -> Result<OptimizerState> {
        let mut state = OptimizerState {
            step: self.step,
            ..Default::default()
        };
        for (key, per) in &self.moments {
            let mut flat = vec![0f32; total];
            for (name, off, len) in slices {
                let enc = per.get(name).ok_or_else(|| {
                    Error::Checkpoint(format!("optimizer {key} has no entry for `{name}`"))
                })?;
                let v = decode_f32(enc, &format!("optimizer {key}.{name}"))?;
                if v.len() != *len {
                    return Err(Error::Checkpoint(format!(
                        "optimizer {key}.{name} has {} values, the model has {len}",
                        v.len()
                    )));
                }
                flat[*off..*off + *len].copy_from_slice(&v);
            }
            match key.as_str() {
                "momentum_buffer" => state.momentum_buffer = Some(flat),
                "exp_avg" => state.exp_avg = Some(flat),
                "exp_avg_sq" => state.exp_avg_sq = Some(flat),
                other => {
                    return Err(Error::Checkpoint(format!(
                        "unknown optimizer state `{other}`"
                    )));
                }
            }
        }
        Ok(state)
    }
}

impl Checkpoint {
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut meta = HashMap::new();
        meta.insert("format".to_string(), FORMAT.to_string());
        meta.insert("progress".into(), to_json(&self.progress)?);
        if let Some(o) = &self.optimizer {
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
        let views: Vec<(String, TensorView<'_>)> = self
            .params
            .iter()
            .map(|t| {
                TensorView::new(Dtype::F32, t.shape.clone(), bytemuck::cast_slice(&t.values))
                    .map(|v| (t.name.clone(), v))
                    .map_err(|e| Error::Checkpoint(format!("tensor `{}`: {e}", t.name)))
            })
            .collect::<Result<_>>()?;
        safetensors::serialize(views, Some(meta))
            .map_err(|e| Error::Checkpoint(format!("serialising: {e}")))
    }

    /// Parse a checkpoint (or a plain PyTorch state_dict file: then only `params` is set).
    pub fn from_bytes(bytes: &[u8], what: &str) -> Result<Self> {
        let params = read_params(bytes, what)?;
        let (_, metadata) = safetensors::SafeTensors::read_metadata(bytes)
            .map_err(|e| Error::Checkpoint(format!("{what}: not a safetensors file: {e}")))?;
        let meta = metadata.metadata().clone().unwrap_or_default();
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
            optimizer: parse("optimizer")?
                .map(|v| from(v, what, "optimizer"))
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
        })
    }

    /// The vocabulary that decodes the model's token ids (text models).
    pub fn vocab(&self) -> Option<&Vocab> {
        self.vocab.as_ref()
    }

    /// Write atomically: a temp file beside the target, fsync, then rename over it. A crash
    /// at any point leaves either the old file or the new one, never a torn one.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn save(&self, path: &std::path::Path) -> Result<()> {
        use std::io::Write;
        let bytes = self.to_bytes()?;
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(std::path::Path::new("."));
        let file_name = path
            .file_name()
            .ok_or_else(|| Error::Checkpoint(format!("{}: not a file path", path.display())))?;
        let tmp = dir.join(format!(
            ".{}.tmp-{}",
            file_name.to_string_lossy(),
            std::process::id()
        ));
        let io = |e: std::io::Error, what: &str| {
            Error::Checkpoint(format!("{}: {what}: {e}", path.display()))
        };
        let prefix = format!(".{}.tmp-", file_name.to_string_lossy());
        // The temp file stays locked until it is renamed: a lock a later save can take
        // belongs to a writer that died (the OS drops locks with the process).
        let mut f = std::fs::File::create(&tmp).map_err(|e| io(e, "creating temp file"))?;
        let _ = f.try_lock();
        f.write_all(&bytes).map_err(|e| io(e, "writing"))?;
        f.sync_all().map_err(|e| io(e, "syncing"))?;
        pause_before_rename(&tmp)?;
        std::fs::rename(&tmp, path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            io(e, "renaming into place")
        })?;
        drop(f);
        remove_stale_temp_files(dir, &prefix);
        // Make the rename itself durable.
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    }

    #[cfg(not(target_arch = "wasm32"))]
    pub fn load(path: &std::path::Path) -> Result<Self> {
        let bytes = std::fs::read(path)
            .map_err(|e| Error::Checkpoint(format!("{}: {e}", path.display())))?;
        Self::from_bytes(&bytes, &path.display().to_string())
    }

    /// Check the parameters against the model's `(name, shape)` list and return them in the
    /// model's order. Missing, unexpected and mis-shaped names are listed in the error.
    pub fn params_for(
        &self,
        expected: &[(String, Vec<usize>)],
        what: &str,
    ) -> Result<Vec<(String, Vec<f32>)>> {
        self.params_for_tied(expected, &[], what)
    }

    /// The parameters of `spec` (see [`Checkpoint::params_for_tied`]: tied weights may
    /// appear under both names, as PyTorch's `state_dict` has them, or under either one).
    pub fn params_for_model(
        &self,
        spec: &crate::nn::ModelSpec,
        what: &str,
    ) -> Result<Vec<(String, Vec<f32>)>> {
        let expected: Vec<(String, Vec<usize>)> = spec
            .parameters()
            .into_iter()
            .map(|p| (p.name, p.shape))
            .collect();
        self.params_for_tied(&expected, &spec.tied_parameters(), what)
    }

    /// Like [`Checkpoint::params_for`], with tied weights `(alias, owner)` (GPT's
    /// `("lm_head.weight", "transformer.wte.weight")`): a file may hold the owner, the alias
    /// (what `safetensors.torch.save_model` keeps of a shared tensor may be either) or both
    /// (PyTorch's `state_dict`, and our checkpoints). Both must then hold the same values.
    pub fn params_for_tied(
        &self,
        expected: &[(String, Vec<usize>)],
        tied: &[(String, String)],
        what: &str,
    ) -> Result<Vec<(String, Vec<f32>)>> {
        let mut problems = Vec::new();
        let mut out = Vec::new();
        let find = |name: &str| self.params.iter().find(|t| t.name == name);
        for (name, shape) in expected {
            // The owner, or else one of its aliases.
            let aliases: Vec<&NamedTensor> = tied
                .iter()
                .filter(|(_, owner)| owner == name)
                .filter_map(|(alias, _)| find(alias))
                .collect();
            let found = find(name).or(aliases.first().copied());
            match found {
                None => problems.push(format!("missing `{name}` {shape:?}")),
                Some(t) if &t.shape != shape => problems.push(format!(
                    "`{}` has shape {:?}, the model needs {shape:?}",
                    t.name, t.shape
                )),
                Some(t) => {
                    for a in aliases.iter().filter(|a| a.name != t.name) {
                        if let Some(problem) = tied_mismatch(t, a) {
                            problems.push(problem);
                        }
                    }
                    out.push((name.clone(), t.values.clone()));
                }
            }
        }
        for t in &self.params {
            let known = expected.iter().any(|(n, _)| *n == t.name)
                || tied.iter().any(|(alias, _)| *alias == t.name);
            if !known {
                problems.push(format!("unexpected `{}` {:?}", t.name, t.shape));
            }
        }
        if problems.is_empty() {
            Ok(out)
        } else {
            Err(Error::Checkpoint(format!(
                "{what}: parameters do not match the model: {}",
                problems.join("; ")
            )))
        }
    }
}

/// Adds the tied weights' second names `(alias, owner)` to `params`, each a copy of its
/// owner, so the file has every key of PyTorch's `state_dict` (nanoGPT's has both
/// `transformer.wte.weight` and `lm_head.weight`) and loads there with `strict=True`.
pub fn add_tied_aliases(params: &mut Vec<NamedTensor>, tied: &[(String, String)]) -> Result<()> {
    for (alias, owner) in tied {
        let t = params.iter().find(|t| t.name == *owner).ok_or_else(|| {
            Error::Checkpoint(format!(
                "`{alias}` is tied to `{owner}`, which is not saved"
            ))
        })?;
        let copy = NamedTensor {
            name: alias.clone(),
            ..t.clone()
        };
        params.push(copy);
    }
    Ok(())
}

/// Why a tied weight's two copies in a file disagree, if they do.
fn tied_mismatch(owner: &NamedTensor, alias: &NamedTensor) -> Option<String> {
    if alias.shape != owner.shape {
        return Some(format!(
            "`{}` {:?} is tied to `{}` {:?} but their shapes differ",
            alias.name, alias.shape, owner.name, owner.shape
        ));
    }
    let i = owner
        .values
        .iter()
        .zip(&alias.values)
        .position(|(a, b)| a.to_bits() != b.to_bits())?;
    Some(format!(
        "`{}` is tied to `{}` but holds other values (element {i}: {} vs {})",
        alias.name, owner.name, alias.values[i], owner.values[i]
    ))
}

/// Deletes temp files of killed writers (`.{name}.tmp-{pid}` beside the checkpoint): those
/// whose lock can be taken. Files still being written by a live process stay.
#[cfg(not(target_arch = "wasm32"))]
fn remove_stale_temp_files(dir: &std::path::Path, prefix: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if !entry.file_name().to_string_lossy().starts_with(prefix) {
            continue;
        }
        if let Ok(f) = std::fs::OpenOptions::new().write(true).open(&path)
            && f.try_lock().is_ok()
        {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// Every tensor of a safetensors file as f32 (f32, f16, bf16 and f64 accepted).
fn read_params(bytes: &[u8], what: &str) -> Result<Vec<NamedTensor>> {
    let st = safetensors::SafeTensors::deserialize(bytes)
        .map_err(|e| Error::Checkpoint(format!("{what}: not a safetensors file: {e}")))?;
    let mut out = Vec::new();
    for (name, view) in st.iter() {
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
                    "{what}: tensor `{name}` has dtype {other:?}; parameters must be floating point"
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
    Ok(out)
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<String> {
    serde_json::to_string(value).map_err(|e| Error::Checkpoint(format!("metadata: {e}")))
}
