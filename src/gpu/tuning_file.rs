//! Where an adapter's kernel table comes from: a tuning file the user names (`--tuning FILE`,
//! env `WEBGPU_AMP_TUNING`), else a tuned file committed for this adapter's name (`tuning/`),
//! else its class's defaults ([`KernelTable::defaults`]). `webgpu-amp bench tune` writes the
//! files; a file for another adapter, of another format or with shapes this adapter cannot
//! run is a one-line error, never silently ignored.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::kernel_rules::KernelLimits;
use super::kernel_table::{AdapterClass, KernelTable};
use crate::data::file_caps::{TUNING_FILE, read_capped};
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

    /// The table, if this file was measured on this adapter (its name, backend and class)
    /// and its shapes keep the kernels' rules under its limits (`gpu::kernel_rules`).
    pub fn table_for(
        &self,
        origin: &str,
        info: &wgpu::AdapterInfo,
        limits: &KernelLimits,
    ) -> Result<KernelTable> {
        let origin = escaped(origin);
        let backend = format!("{:?}", info.backend).to_lowercase();
        let class = AdapterClass::of(info);
        let remedy =
            format!("run `webgpu-amp bench tune` on it, or leave out --tuning / {TUNING_ENV}");
        if self.adapter != info.name || self.backend != backend {
            return Err(Error::InvalidArgument(format!(
                "tuning file {origin} was measured on `{}` over {}, but this adapter is `{}` \
                 over {backend}; {remedy}",
                escaped(&self.adapter),
                escaped(&self.backend),
                escaped(&info.name)
            )));
        }
        if self.table.class != class {
            return Err(Error::InvalidArgument(format!(
                "tuning file {origin}: its table is for the {} class, but `{}` is of the {} \
                 class; {remedy}",
                self.table.class.name(),
                escaped(&info.name),
                class.name()
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
    pub origin: TableOrigin,
}

/// Where a table came from: what decides whether its tiles are checked by running them
/// before the first product uses them (`ops::table_check`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub enum TableOrigin {
    /// An adapter class's defaults (checked against the CPU reference by the test suite).
    Defaults,
    /// A tuned table committed with the project for this adapter's name (`tuning/`).
    Committed(String),
    /// A tuning file the user named (`--tuning`, `WEBGPU_AMP_TUNING`): its path.
    File(String),
    /// Given by the program ([`crate::gpu::GpuContext::with_kernel_table`]: `bench tune`'s
    /// candidates, tests, the numeric check's own contexts).
    Given,
}

impl TableOrigin {
    /// Whether its tiles are run against a reference before first use: tables read from a
    /// file, which a tuner on another machine, a hand edit or a bad merge may have made.
    pub fn is_loaded(&self) -> bool {
        matches!(self, TableOrigin::Committed(_) | TableOrigin::File(_))
    }

    /// How an error names it: `tuning file t.json`, `the committed table for NVIDIA H200`.
    pub fn name(&self) -> String {
        match self {
            TableOrigin::Defaults => "the class defaults".to_string(),
            TableOrigin::Committed(adapter) => {
                format!("the committed table for {}", escaped(adapter))
            }
            TableOrigin::File(path) => format!("tuning file {}", escaped(path)),
            TableOrigin::Given => "the kernel table given".to_string(),
        }
    }
}

/// Text from a file or the command line as one printable line: control characters escaped
/// (`\n`, `\u{1b}`), so a name or date cannot rewrite the terminal or split a message.
pub fn escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Which table contexts made from now on load.
enum TuningRequest {
    /// The file the environment names ([`TUNING_ENV`]), else the built-in table.
    Environment,
    /// `--tuning FILE`.
    File(PathBuf),
    /// The built-in table whatever the environment says (`bench tune` starts from it).
    BuiltIn,
}

static REQUESTED: Mutex<TuningRequest> = Mutex::new(TuningRequest::Environment);

/// Name the tuning file every context made from now on loads (`--tuning FILE`); None goes
/// back to the environment's ([`TUNING_ENV`]).
pub fn set_tuning_file(path: Option<PathBuf>) {
    *REQUESTED.lock().expect("tuning file choice") = match path {
        Some(p) => TuningRequest::File(p),
        None => TuningRequest::Environment,
    };
}

/// Every context made from now on runs its adapter's built-in table, whatever `--tuning` or
/// the environment named ([`set_tuning_file`] undoes it).
pub fn use_builtin_table() {
    *REQUESTED.lock().expect("tuning file choice") = TuningRequest::BuiltIn;
}

/// The tuning file asked for: `--tuning`, else the environment's, else none.
pub fn requested_tuning_file() -> Option<PathBuf> {
    match &*REQUESTED.lock().expect("tuning file choice") {
        TuningRequest::File(p) => return Some(p.clone()),
        TuningRequest::BuiltIn => return None,
        TuningRequest::Environment => {}
    }
    #[cfg(not(target_arch = "wasm32"))]
    if let Ok(p) = std::env::var(TUNING_ENV)
        && !p.is_empty()
    {
        return Some(PathBuf::from(p));
    }
    None
}

/// The text of the tuning file at `path` (at most [`TUNING_FILE`]), read once per process:
/// every context made from it (`info` makes one per adapter) sees the same table, and a FIFO
/// is read once, not waited on again for each adapter.
fn read_once(path: &Path) -> Result<String> {
    type Read = Option<(PathBuf, std::result::Result<String, String>)>;
    static READ: Mutex<Read> = Mutex::new(None);
    let mut read = READ.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((p, text)) = &*read
        && p == path
    {
        return text.clone().map_err(Error::InvalidArgument);
    }
    let cannot = |e: String| format!("tuning file {}", escaped(&e));
    let text = read_capped(path, TUNING_FILE)
        .map_err(cannot)
        .and_then(|bytes| {
            String::from_utf8(bytes).map_err(|e| {
                cannot(format!(
                    "{}: not UTF-8 text ({e}); `webgpu-amp bench tune` writes them",
                    path.display()
                ))
            })
        });
    *read = Some((path.to_path_buf(), text.clone()));
    text.map_err(Error::InvalidArgument)
}

impl AdapterKernels {
    /// The built-in table: a committed tuned file for this adapter's name, else its class's
    /// defaults, else (where those need more than the adapter gives) the `other` class's.
    pub fn builtin(info: &wgpu::AdapterInfo, limits: &KernelLimits) -> AdapterKernels {
        let mut none_yet = "no tuned table committed for this adapter".to_string();
        for (name, text) in COMMITTED.iter().filter(|(name, _)| *name == info.name) {
            let file = TuningFile::parse(name, text);
            match file.and_then(|f| Ok((f.table_for(name, info, limits)?, f.date))) {
                Ok((table, date)) => {
                    return AdapterKernels {
                        table,
                        source: format!("tuned for this adapter (committed, {})", escaped(&date)),
                        origin: TableOrigin::Committed(name.to_string()),
                    };
                }
                // Said where the table shows (`info`), never silently passed over.
                Err(e) => none_yet = format!("the committed table does not apply: {e}"),
            }
        }
        let class = AdapterClass::of(info);
        let defaults = KernelTable::defaults(class);
        match defaults.check(limits) {
            Ok(()) => AdapterKernels {
                table: defaults,
                source: format!("defaults for {} ({none_yet})", class.name()),
                origin: TableOrigin::Defaults,
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
                origin: TableOrigin::Defaults,
            },
        }
    }

    /// The table the user's tuning file gives this adapter, or the built-in one when no file
    /// is asked for. A file that cannot be used is an error.
    pub fn resolve(info: &wgpu::AdapterInfo, limits: &KernelLimits) -> Result<AdapterKernels> {
        match requested_tuning_file() {
            Some(path) => Self::from_file(&path, info, limits),
            None => Ok(Self::builtin(info, limits)),
        }
    }

    /// The table of the tuning file at `path` for the adapter `info` describes. The file is
    /// read under its cap ([`TUNING_FILE`]): `/dev/zero` is an error, not all of memory.
    pub fn from_file(
        path: &Path,
        info: &wgpu::AdapterInfo,
        limits: &KernelLimits,
    ) -> Result<AdapterKernels> {
        let origin = path.display().to_string();
        let text = read_once(path)?;
        let file = TuningFile::parse(&escaped(&origin), &text)?;
        Ok(AdapterKernels {
            table: file.table_for(&origin, info, limits)?,
            source: format!("tuning file {} ({})", escaped(&origin), escaped(&file.date)),
            origin: TableOrigin::File(origin),
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
            size_x: 1024,
            size_y: 1024,
            subgroup: 32,
        }
    }

    /// An NVIDIA discrete GPU named `name` on `backend`.
    fn gpu(name: &str, backend: wgpu::Backend) -> wgpu::AdapterInfo {
        wgpu::AdapterInfo {
            name: name.into(),
            vendor: 0x10de,
            device: 0,
            device_type: wgpu::DeviceType::DiscreteGpu,
            device_pci_bus_id: String::new(),
            driver: String::new(),
            driver_info: String::new(),
            backend,
            subgroup_min_size: 32,
            subgroup_max_size: 32,
            transient_saves_memory: None,
            limit_bucket: None,
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
    fn a_file_round_trips_and_applies_only_to_its_adapter_backend_and_class() {
        let text = serde_json::to_string_pretty(&file("GPU A")).unwrap();
        let parsed = TuningFile::parse("f.json", &text).unwrap();
        assert_eq!(parsed, file("GPU A"));
        let vulkan = gpu("GPU A", wgpu::Backend::Vulkan);
        parsed.table_for("f.json", &vulkan, &limits()).unwrap();
        let other = gpu("GPU B", wgpu::Backend::Vulkan);
        let e = parsed
            .table_for("f.json", &other, &limits())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("measured on `GPU A`") && e.contains("`GPU B`"),
            "{e}"
        );
        // The same GPU's GL adapter is not the one the file was measured on.
        let gl = gpu("GPU A", wgpu::Backend::Gl);
        let e = parsed
            .table_for("f.json", &gl, &limits())
            .unwrap_err()
            .to_string();
        assert!(e.contains("over vulkan") && e.contains("over gl"), "{e}");
        let mut amd = parsed.clone();
        amd.table.class = AdapterClass::Amd;
        let e = amd
            .table_for("f.json", &vulkan, &limits())
            .unwrap_err()
            .to_string();
        assert!(e.contains("amd class") && e.contains("nvidia class"), "{e}");
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
        let info = gpu("GPU A", wgpu::Backend::Vulkan);
        let e = big
            .table_for("f.json", &info, &small)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("workgroup memory") && e.contains("simt_f32"),
            "{e}"
        );
        let missing = AdapterKernels::from_file(Path::new("/nonexistent/t.json"), &info, &limits());
        assert!(missing.unwrap_err().to_string().contains("cannot read"));
        #[cfg(unix)]
        {
            let zero = AdapterKernels::from_file(Path::new("/dev/zero"), &info, &limits());
            let e = zero.unwrap_err().to_string();
            assert!(
                e.contains("/dev/zero: more than the tuning file cap"),
                "{e}"
            );
        }
    }

    /// Names and dates from a file print as one line of visible text.
    #[test]
    fn control_characters_from_a_file_are_escaped() {
        let mut f = file("GPU\u{1b}[2J A\nB");
        f.backend = "vulkan".into();
        let info = gpu("GPU A", wgpu::Backend::Vulkan);
        let e = f
            .table_for("t\n.json", &info, &limits())
            .unwrap_err()
            .to_string();
        assert!(!e.contains('\n') && !e.contains('\u{1b}'), "{e}");
        assert!(
            e.contains("GPU\\u{1b}[2J A\\nB") && e.contains("t\\n.json"),
            "{e}"
        );
    }

    /// Every committed file parses, is for the adapter it is listed under and keeps the
    /// kernels' rules under the limits of its class.
    #[test]
    fn committed_files_are_valid_for_their_adapters() {
        for (name, text) in COMMITTED {
            let file = TuningFile::parse(name, text).unwrap();
            assert_eq!(file.adapter, *name);
            let info = gpu(name, wgpu::Backend::Vulkan);
            file.table_for(name, &info, &limits()).unwrap();
        }
    }
}
