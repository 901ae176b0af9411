//! The moments file: optimizer moments too big for the checkpoint's header.
//!
//! safetensors refuses headers over 100 MB, and Adam's two moments of a 10 M-parameter
//! model are 80 MB of f32 (107 MB as base64). Such moments go to a second safetensors file
//! beside the checkpoint, `NAME.optimizer-CRC.safetensors` (tensors `exp_avg.<param>`, ...,
//! in the parameter's shape), and the checkpoint's `optimizer` entry names it and its CRC-32.
//! The checkpoint itself keeps only the parameters as tensors, so PyTorch's strict
//! `load_state_dict` still reads it. The moments file is written (atomically) before the
//! checkpoint and under a name of its own, so a crash between the two leaves the previous
//! checkpoint with the moments file it names; files no checkpoint names are removed by the
//! next save, those a killed writer left before it writes its own (so a kill never leaves
//! more than two: the named one and the new one). Native only, as saving and loading files are.

use std::path::Path;

use safetensors::tensor::{Dtype, TensorView};

use super::NamedTensor;
use super::optimizer_state::{Moments, NamedOptimizerState};
use crate::data::file_caps::{MOMENTS_FILE, read_capped};
use crate::error::{Error, Result};

/// Test hook: the most moment bytes (raw f32) a save keeps in the header, so the tests can
/// use the moments file with small models. Unset, [`INLINE_MOMENTS_MAX`].
pub const INLINE_MOMENTS_MAX_ENV: &str = "WEBGPU_AMP_TEST_INLINE_MOMENTS_MAX";

/// The most moment bytes (raw f32) kept in the header: 48 MiB is 64 MiB of base64, which
/// leaves a third of safetensors' 100 MB header limit for the rest (vocabulary, model).
pub const INLINE_MOMENTS_MAX: usize = 48 << 20;

pub(super) const FORMAT: &str = "webgpu-amp/1 optimizer moments";

/// The limit in force: [`INLINE_MOMENTS_MAX`], or the test hook's value.
pub(super) fn inline_max() -> Result<usize> {
    match std::env::var(INLINE_MOMENTS_MAX_ENV) {
        Err(_) => Ok(INLINE_MOMENTS_MAX),
        Ok(v) => v.parse().map_err(|_| {
            Error::InvalidArgument(format!(
                "{INLINE_MOMENTS_MAX_ENV}={v}: expected a number of bytes"
            ))
        }),
    }
}

/// `NAME.optimizer-` for the checkpoint file `NAME`.
fn prefix(checkpoint_name: &str) -> String {
    format!("{checkpoint_name}.optimizer-")
}

/// The moments file's name for the checkpoint file `checkpoint_name` and contents' CRC.
pub(super) fn file_name(checkpoint_name: &str, crc32: u32) -> String {
    format!("{}{crc32:08x}.safetensors", prefix(checkpoint_name))
}

/// The moments as a safetensors file: `{moment}.{param}` in the parameter's shape (flat
/// where `params` has no such name).
pub(super) fn encode(
    state: &NamedOptimizerState,
    params: &[NamedTensor],
    checkpoint_name: &str,
) -> Result<Vec<u8>> {
    let mut views = Vec::new();
    for (moment, per) in &state.moments {
        for (name, values) in per {
            let shape = params
                .iter()
                .find(|p| p.name == *name && p.values.len() == values.len())
                .map_or_else(|| vec![values.len()], |p| p.shape.clone());
            let key = format!("{moment}.{name}");
            let view = TensorView::new(Dtype::F32, shape, bytemuck::cast_slice(values))
                .map_err(|e| Error::Checkpoint(format!("moments `{key}`: {e}")))?;
            views.push((key, view));
        }
    }
    let meta = std::collections::HashMap::from([
        ("format".to_string(), FORMAT.to_string()),
        ("checkpoint".to_string(), checkpoint_name.to_string()),
    ]);
    safetensors::serialize(views, Some(meta))
        .map_err(|e| Error::Checkpoint(format!("serialising the moments: {e}")))
}

/// The moments of the file a checkpoint names, or why they cannot be had.
pub(super) fn decode(bytes: &[u8], what: &str) -> std::result::Result<Moments, String> {
    let st = safetensors::SafeTensors::deserialize(bytes)
        .map_err(|e| format!("{what}: not a safetensors file: {e}"))?;
    let mut moments = Moments::new();
    for (key, view) in st.iter() {
        let (moment, name) = key
            .split_once('.')
            .ok_or_else(|| format!("{what}: tensor `{key}` is not MOMENT.PARAMETER"))?;
        if view.dtype() != Dtype::F32 {
            return Err(format!(
                "{what}: tensor `{key}` is {:?}, not F32",
                view.dtype()
            ));
        }
        let values: Vec<f32> = bytemuck::pod_collect_to_vec(view.data());
        moments
            .entry(moment.to_string())
            .or_default()
            .insert(name.to_string(), values);
    }
    Ok(moments)
}

/// Read and check the moments file `file` named by the checkpoint at `checkpoint`.
pub(super) fn read(
    checkpoint: &Path,
    file: &str,
    crc32: u32,
) -> std::result::Result<Moments, String> {
    let what = checkpoint.display();
    // Only a plain name beside the checkpoint: a header never points elsewhere.
    if file.is_empty() || file.starts_with('.') || file.contains(['/', '\\']) {
        return Err(format!(
            "{what}: moments file `{file}` is not a plain file name"
        ));
    }
    let path = super::save_target::parent_dir(checkpoint).join(file);
    let bytes = read_capped(&path, MOMENTS_FILE).map_err(|e| {
        format!(
            "{what}: its optimizer state is in `{}`, which cannot be read ({e}); copy that \
             file beside the checkpoint to resume (the weights alone load with --init)",
            path.display()
        )
    })?;
    let found = crc32fast::hash(&bytes);
    if found != crc32 {
        return Err(format!(
            "{what}: `{}` has CRC-32 {found:08x}, the checkpoint names {crc32:08x}: it is \
             damaged or from another save",
            path.display()
        ));
    }
    decode(&bytes, &path.display().to_string())
}

/// Remove the checkpoint's moments files other than `keep`, and their writers' stale temp
/// files (after a save: the previous save's file, and any a crash left unnamed).
pub(super) fn remove_others(checkpoint: &Path, keep: Option<&str>) {
    let dir = super::save_target::parent_dir(checkpoint);
    let name = checkpoint.file_name().unwrap_or_default().to_string_lossy();
    let prefix = prefix(&name);
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let file = entry.file_name().to_string_lossy().into_owned();
            if file.starts_with(&prefix) && file.ends_with(".safetensors") && Some(&*file) != keep {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
    super::atomic::remove_stale_temp_files(dir, &format!(".{prefix}"));
}

/// Before a save: removes the moments files a killed writer left that the checkpoint on
/// disk does not name, so that a kill at any later moment of this save leaves at most two,
/// the named one and this save's own. (Without this, a kill between this save's rename and
/// its clean-up left three.) Nothing is removed when the checkpoint's header cannot be read.
pub(super) fn remove_unnamed(checkpoint: &Path) {
    let dir = super::save_target::parent_dir(checkpoint);
    let name = checkpoint.file_name().unwrap_or_default().to_string_lossy();
    let prefix = prefix(&name);
    let count = std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
            .count()
    });
    // The usual case, one named file (or none): nothing to read.
    if count < 2 {
        return;
    }
    if let Some(named) = named_file(checkpoint) {
        remove_others(checkpoint, named.as_deref());
    }
}

/// The moments file the checkpoint at `path` names (`Some(None)`: none, its moments are
/// inline or it has no optimizer), from its header alone; `None` if that cannot be read.
fn named_file(path: &Path) -> Option<Option<String>> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).ok()?;
    let mut len = [0u8; 8];
    f.read_exact(&mut len).ok()?;
    // safetensors' own limit on a header.
    let len = u64::from_le_bytes(len).min(100_000_001);
    let mut header = Vec::new();
    f.take(len).read_to_end(&mut header).ok()?;
    let header: serde_json::Value = serde_json::from_slice(&header).ok()?;
    let Some(optimizer) = header["__metadata__"]["optimizer"].as_str() else {
        return Some(None);
    };
    let optimizer: serde_json::Value = serde_json::from_str(optimizer).ok()?;
    Some(
        optimizer["moments_file"]["file"]
            .as_str()
            .map(str::to_string),
    )
}
