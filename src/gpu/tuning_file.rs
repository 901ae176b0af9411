//! Where an adapter's kernel table comes from: a tuning file the user names (`--tuning FILE`,
//! env `WEBGPU_AMP_TUNING`), else a tuned file committed for this adapter's name (`tuning/`),
//! else its class's defaults ([`KernelTable::defaults`]). `webgpu-amp bench tune` writes the
//! files; a file for another adapter, of another format or with shapes this adapter cannot
//! run is a one-line error, never silently ignored.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::kernel_table::{AdapterClass, KernelLimits, KernelTable};
use crate::error::{Error, Result};

/// The `format` every tuning file carries.
pub const TUNING_FORMAT: &str = "webgpu-amp kernel tuning 1";
/// The environment variable naming a tuning file (`--tuning` wins over it).
pub const TUNING_ENV: &str = "WEBGPU_AMP_TUNING";

/// Tuned tables committed with the project, by the adapter name they were measured on
/// (`tuning/*.json`, written by `bench tune` and `scripts/gpu-report.sh`); every other adapter
/// runs its class's defaults.
pub const COMMITTED: &[(&str, &str)] =
    &[("NVIDIA H200", include_str!("../../tuning/nvidia-h200.json"))];

/// One timed candidate of a tuning run.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Measurement {
    /// What was timed: `matmul f16 coop`, `matmul f32 simt`, `conv ...`.
    pub kernel: String,
    /// `MxNxK` (or a convolution's description).
    pub shape: String,
    /// The candidate's shape as the table writes it.
    pub candidate: String,
    /// Median seconds of one run; TFLOP/s beside it.
    pub seconds: f64,
    pub tflops: f64,
}

/// A tuning file: the table, and where and how it was measured.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TuningFile {
    pub format: String,
    /// The adapter's name exactly as `info` prints it: the file applies to that adapter only.
    pub adapter: String,
    pub backend: String,
    pub driver: String,
    /// UTC date of the run (`YYYY-MM-DD`) and the command that made it.
    pub date: String,
    pub command: String,
    pub table: KernelTable,
    pub measurements: Vec<Measurement>,
}

impl TuningFile {
    /// Parse a file's text (`origin` names it in errors).
    pub fn parse(origin: &str, text: &str) -> Result<TuningFile> {
        let file: TuningFile = serde_json::from_str(text).map_err(|e| {
            Error::InvalidArgument(format!(
                "tuning file {origin}: not a webgpu-amp tuning file ({e}); `webgpu-amp bench tune` writes them"
            ))
        })?;
        if file.format != TUNING_FORMAT {
            return Err(Error::InvalidArgument(format!(
                "tuning file {origin}: format `{}`, this build reads `{TUNING_FORMAT}`; run `webgpu-amp bench tune` again",
                file.format
            )));
        }
        Ok(file)
    }

    /// The table, if this file is for `adapter` and fits its limits.
    pub fn table_for(
        &self,
        origin: &str,
        adapter: &str,
        limits: &KernelLimits,
    ) -> Result<KernelTable> {
        if self.adapter != adapter {
            return Err(Error::InvalidArgument(format!(
                "tuning file {origin} was measured on `{}`, but this adapter is `{adapter}`; \
                 run `webgpu-amp bench tune` on it, or leave out --tuning / {TUNING_ENV}",
                self.adapter
            )));
        }
        self.table
            .check(limits)
            .map_err(|e| Error::InvalidArgument(format!("tuning file {origin}: {e}")))?;
        Ok(self.table.clone())
    }
}

/// The table an adapter runs with, and where it came from (for `info`).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct AdapterKernels {
    pub table: KernelTable,
    /// `defaults for nvidia`, `tuned for <adapter> (committed, <date>)`, `tuning file <path>`.
    pub source: String,
}

static REQUESTED: Mutex<Option<PathBuf>> = Mutex::new(None);

/// Name the tuning file every context made from now on loads (`--tuning FILE`); None goes
/// back to the environment's ([`TUNING_ENV`]).
pub fn set_tuning_file(path: Option<PathBuf>) {
    *REQUESTED.lock().expect("tuning file choice") = path;
}

/// The tuning file asked for: `--tuning`, else the environment's, else none.
pub fn requested_tuning_file() -> Option<PathBuf> {
    if let Some(p) = REQUESTED.lock().expect("tuning file choice").clone() {
        return Some(p);
    }
    #[cfg(not(target_arch = "wasm32"))]
    if let Ok(p) = std::env::var(TUNING_ENV)
        && !p.is_empty()
    {
        return Some(PathBuf::from(p));
    }
    None
}

impl AdapterKernels {
    /// The built-in table: a committed tuned file for this adapter's name, else its class's
    /// defaults, else (where those need more than the adapter gives) the `other` class's.
    pub fn builtin(info: &wgpu::AdapterInfo, limits: &KernelLimits) -> AdapterKernels {
        for (name, text) in COMMITTED {
            if *name == info.name
                && let Ok(file) = TuningFile::parse(name, text)
                && let Ok(table) = file.table_for(name, &info.name, limits)
            {
                return AdapterKernels {
                    table,
                    source: format!("tuned for this adapter (committed, {})", file.date),
                };
            }
        }
        let class = AdapterClass::of(info);
        let defaults = KernelTable::defaults(class);
        let none_yet = "no tuned table committed for this adapter";
        match defaults.check(limits) {
            Ok(()) => AdapterKernels {
                table: defaults,
                source: format!("defaults for {} ({none_yet})", class.name()),
            },
            Err(e) => AdapterKernels {
                table: KernelTable {
                    class,
                    ..KernelTable::defaults(AdapterClass::Other)
                },
                source: format!(
                    "defaults for other GPUs: the {} defaults do not fit ({e}); {none_yet}",
                    class.name()
                ),
            },
        }
    }

    /// The table the user's tuning file gives this adapter, or the built-in one when no file
    /// is asked for. A file that cannot be used is an error.
    pub fn resolve(info: &wgpu::AdapterInfo, limits: &KernelLimits) -> Result<AdapterKernels> {
        match requested_tuning_file() {
            Some(path) => Self::from_file(&path, &info.name, limits),
            None => Ok(Self::builtin(info, limits)),
        }
    }

    /// The table of the tuning file at `path` for the adapter named `adapter`.
    pub fn from_file(path: &Path, adapter: &str, limits: &KernelLimits) -> Result<AdapterKernels> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::InvalidArgument(format!("tuning file {origin}: cannot read it: {e}"))
        })?;
        let file = TuningFile::parse(&origin, &text)?;
        Ok(AdapterKernels {
            table: file.table_for(&origin, adapter, limits)?,
            source: format!("tuning file {origin} ({})", file.date),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> KernelLimits {
        KernelLimits {
            workgroup_bytes: 48 * 1024,
            invocations: 1024,
            subgroup: 32,
        }
    }

    fn file(adapter: &str) -> TuningFile {
        TuningFile {
            format: TUNING_FORMAT.into(),
            adapter: adapter.into(),
            backend: "vulkan".into(),
            driver: "test".into(),
            date: "2025-01-01".into(),
            command: "webgpu-amp bench tune".into(),
            table: KernelTable::defaults(AdapterClass::Nvidia),
            measurements: vec![],
        }
    }

    #[test]
    fn a_file_round_trips_and_applies_only_to_its_adapter() {
        let text = serde_json::to_string_pretty(&file("GPU A")).unwrap();
        let parsed = TuningFile::parse("f.json", &text).unwrap();
        assert_eq!(parsed, file("GPU A"));
        parsed.table_for("f.json", "GPU A", &limits()).unwrap();
        let e = parsed
            .table_for("f.json", "GPU B", &limits())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("measured on `GPU A`") && e.contains("`GPU B`"),
            "{e}"
        );
    }

    #[test]
    fn bad_files_are_clear_errors() {
        let e = TuningFile::parse("f.json", "{\"format\": 1}")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a webgpu-amp tuning file"), "{e}");
        let mut old = file("GPU A");
        old.format = "webgpu-amp kernel tuning 0".into();
        let text = serde_json::to_string(&old).unwrap();
        let e = TuningFile::parse("f.json", &text).unwrap_err().to_string();
        assert!(e.contains("this build reads"), "{e}");
        let mut big = file("GPU A");
        big.table.simt_f32.bk = 64;
        let small = KernelLimits {
            workgroup_bytes: 16 * 1024,
            ..limits()
        };
        let e = big
            .table_for("f.json", "GPU A", &small)
            .unwrap_err()
            .to_string();
        assert!(e.contains("workgroup memory"), "{e}");
        let missing =
            AdapterKernels::from_file(Path::new("/nonexistent/t.json"), "GPU A", &limits());
        assert!(missing.unwrap_err().to_string().contains("cannot read"));
    }

    /// Every committed file parses, is for the adapter it is listed under and fits the
    /// limits of its class (none is committed yet: the list is empty until a GPU is tuned).
    #[test]
    fn committed_files_are_valid_for_their_adapters() {
        for (name, text) in COMMITTED {
            let file = TuningFile::parse(name, text).unwrap();
            assert_eq!(file.adapter, *name);
            file.table_for(name, name, &limits()).unwrap();
        }
    }
}
