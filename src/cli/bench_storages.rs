//! `bench matmul --storages`: which storages to measure, so one path can be timed alone at
//! sizes where measuring every storage would take too long (8192³ on a GPU).

use webgpu_amp::{Error, GpuContext, Result, Storage};

/// The names `--storages` accepts, as the report prints them.
const NAMES: [(&str, Storage); 4] = [
    ("f32", Storage::F32),
    ("f16", Storage::F16),
    ("f16packed", Storage::F16Packed),
    ("bf16", Storage::BF16),
];

/// Keeps the runs whose storage is in `wanted` (all of them when `wanted` is empty), in the
/// order of `runs`. A name that is not a storage, or a storage this adapter and
/// `--f16-storage` do not offer, is an error: a benchmark never silently measures less.
pub fn keep<'a>(
    runs: Vec<(&'a GpuContext, Storage)>,
    wanted: &[String],
) -> Result<Vec<(&'a GpuContext, Storage)>> {
    if wanted.is_empty() {
        return Ok(runs);
    }
    let mut storages = Vec::new();
    for name in wanted {
        let storage = NAMES
            .iter()
            .find(|(n, _)| n == name)
            .map(|&(_, s)| s)
            .ok_or_else(|| {
                let names: Vec<&str> = NAMES.iter().map(|(n, _)| *n).collect();
                Error::InvalidArgument(format!(
                    "--storages: `{name}` is not one of {}",
                    names.join(", ")
                ))
            })?;
        if !runs.iter().any(|&(_, s)| s == storage) {
            return Err(Error::Unsupported(format!(
                "--storages {name}: not available here ({})",
                match storage {
                    Storage::F16 => "native f16 needs shader-f16 and --f16-storage auto or native",
                    Storage::F16Packed => "--f16-storage native leaves packed f16 out",
                    _ => "every adapter has it; this is a bug",
                }
            )));
        }
        storages.push(storage);
    }
    Ok(runs
        .into_iter()
        .filter(|(_, s)| storages.contains(s))
        .collect())
}
