//! GPU runtime: instance, adapter and device selection, capabilities, the one buffer
//! allocator, the pipeline cache and readbacks.
//!
//! Everything that touches `wgpu` directly at the device level lives here; ops only ask the
//! context for buffers ([`GpuContext::alloc`]) and kernels ([`GpuContext::kernel`]).

mod alloc;
mod kernel;
mod readback;

pub use alloc::{Allocator, GpuBuffer, MemoryStats};
pub use kernel::{Arg, Kernel, KernelDesc};
pub use readback::ReadbackRing;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};
use crate::tensor::{DType, Storage};

/// Which wgpu backend to use. `Auto` lets wgpu pick among every backend compiled in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendChoice {
    #[default]
    Auto,
    Vulkan,
    Metal,
    Dx12,
    Gl,
    Webgpu,
}

impl BackendChoice {
    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "auto" | "" => Self::Auto,
            "vulkan" | "vk" => Self::Vulkan,
            "metal" | "mtl" => Self::Metal,
            "dx12" | "d3d12" => Self::Dx12,
            "gl" | "gles" | "opengl" => Self::Gl,
            "webgpu" | "browser" => Self::Webgpu,
            other => return Err(Error::UnknownBackend(other.to_string())),
        })
    }

    pub fn backends(self) -> wgpu::Backends {
        match self {
            Self::Auto => wgpu::Backends::all(),
            Self::Vulkan => wgpu::Backends::VULKAN,
            Self::Metal => wgpu::Backends::METAL,
            Self::Dx12 => wgpu::Backends::DX12,
            Self::Gl => wgpu::Backends::GL,
            Self::Webgpu => wgpu::Backends::BROWSER_WEBGPU,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Vulkan => "vulkan",
            Self::Metal => "metal",
            Self::Dx12 => "dx12",
            Self::Gl => "gl",
            Self::Webgpu => "webgpu",
        }
    }
}

/// How f16 tensors are stored on the GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum F16Storage {
    /// `array<f16>` through the `shader-f16` feature.
    Native,
    /// Two halves per `u32`, math in f32: runs on every WebGPU device.
    Packed,
}

/// What the user asked for; resolved against the adapter into an [`F16Storage`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum F16StorageChoice {
    #[default]
    Auto,
    Native,
    Packed,
}

impl F16StorageChoice {
    pub fn name(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Native => "native",
            Self::Packed => "packed",
        }
    }

    pub fn parse(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "auto" | "" => Ok(Self::Auto),
            "native" => Ok(Self::Native),
            "packed" => Ok(Self::Packed),
            other => Err(Error::InvalidArgument(format!(
                "unknown f16 storage `{other}` (expected auto, native or packed)"
            ))),
        }
    }
}

/// How to pick the device. Fields left at their default can be set from the environment
/// (`WEBGPU_AMP_BACKEND`, `WEBGPU_AMP_ADAPTER`, `WEBGPU_AMP_F16_STORAGE`).
#[derive(Clone, Debug, Default)]
pub struct GpuOptions {
    pub backend: BackendChoice,
    /// Case-insensitive substring of the adapter name.
    pub adapter: Option<String>,
    pub f16_storage: F16StorageChoice,
}

impl GpuOptions {
    /// Options from the environment only (used by tests and as CLI defaults).
    pub fn from_env() -> Result<Self> {
        let mut o = Self::default();
        o.apply_env()?;
        Ok(o)
    }

    /// Fill fields still at their defaults from the environment.
    pub fn apply_env(&mut self) -> Result<()> {
        #[cfg(not(target_arch = "wasm32"))]
        {
            if self.backend == BackendChoice::Auto
                && let Ok(b) = std::env::var("WEBGPU_AMP_BACKEND")
            {
                self.backend = BackendChoice::parse(&b)?;
            }
            if self.adapter.is_none()
                && let Ok(a) = std::env::var("WEBGPU_AMP_ADAPTER")
                && !a.is_empty()
            {
                self.adapter = Some(a);
            }
            if self.f16_storage == F16StorageChoice::Auto
                && let Ok(s) = std::env::var("WEBGPU_AMP_F16_STORAGE")
            {
                self.f16_storage = F16StorageChoice::parse(&s)?;
            }
        }
        Ok(())
    }
}

/// What the adapter can do, as far as this project cares.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Capabilities {
    pub shader_f16: bool,
    pub subgroups: bool,
    pub timestamp_query: bool,
    pub max_buffer_size: u64,
    pub max_storage_buffer_binding_size: u64,
    pub max_storage_buffers_per_shader_stage: u32,
    pub max_compute_workgroup_storage_size: u32,
    pub max_compute_invocations_per_workgroup: u32,
    pub max_compute_workgroups_per_dimension: u32,
    pub min_storage_buffer_offset_alignment: u32,
}

impl Capabilities {
    pub fn from_adapter(adapter: &wgpu::Adapter) -> Self {
        let f = adapter.features();
        let l = adapter.limits();
        Self {
            shader_f16: f.contains(wgpu::Features::SHADER_F16),
            subgroups: f.contains(wgpu::Features::SUBGROUP),
            timestamp_query: f.contains(wgpu::Features::TIMESTAMP_QUERY),
            max_buffer_size: l.max_buffer_size,
            max_storage_buffer_binding_size: l.max_storage_buffer_binding_size,
            max_storage_buffers_per_shader_stage: l.max_storage_buffers_per_shader_stage,
            max_compute_workgroup_storage_size: l.max_compute_workgroup_storage_size,
            max_compute_invocations_per_workgroup: l.max_compute_invocations_per_workgroup,
            max_compute_workgroups_per_dimension: l.max_compute_workgroups_per_dimension,
            min_storage_buffer_offset_alignment: l.min_storage_buffer_offset_alignment,
        }
    }

    /// The f16 storage training would use on this adapter for a given request.
    pub fn resolve_f16_storage(&self, choice: F16StorageChoice) -> Result<F16Storage> {
        match choice {
            F16StorageChoice::Auto if self.shader_f16 => Ok(F16Storage::Native),
            F16StorageChoice::Auto | F16StorageChoice::Packed => Ok(F16Storage::Packed),
            F16StorageChoice::Native if self.shader_f16 => Ok(F16Storage::Native),
            F16StorageChoice::Native => Err(Error::Unsupported(
                "native f16 storage requested but the adapter has no shader-f16; use --f16-storage packed or auto"
                    .into(),
            )),
        }
    }
}

/// The precision modes training offers (`--precision`), in the order `webgpu-amp info` lists
/// them.
pub const PRECISION_MODES: [&str; 4] = ["f32", "amp-f16", "amp-bf16", "f16"];

/// Each mode with the dtype it computes in at low precision and which tensors that covers.
const MODE_TABLE: [(&str, DType, &str); 4] = [
    ("f32", DType::F32, "every tensor"),
    (
        "amp-f16",
        DType::F16,
        "autocast activations and weight copies (f32 master weights)",
    ),
    (
        "amp-bf16",
        DType::BF16,
        "autocast activations and weight copies (f32 master weights)",
    ),
    (
        "f16",
        DType::F16,
        "weights, activations and gradients (no master weights)",
    ),
];

/// Whether one precision mode runs on an adapter, and how its low-precision tensors are stored.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ModeSupport {
    /// `f32`, `amp-f16`, `amp-bf16` or `f16`.
    pub mode: &'static str,
    /// False only when the f16 storage asked for cannot be had (native without shader-f16).
    pub runs: bool,
    /// [`Storage::name`] of the mode's low-precision tensors: `f32`, `f16` (`array<f16>`),
    /// `f16packed` or `bf16` (both two per `u32`).
    pub storage: &'static str,
    /// One line for people.
    pub detail: String,
}

impl Capabilities {
    /// What each precision mode would do on this adapter with `--f16-storage choice`.
    pub fn mode_support(&self, choice: F16StorageChoice) -> Vec<ModeSupport> {
        let f16 = self.resolve_f16_storage(choice);
        MODE_TABLE
            .iter()
            .map(|&(mode, dtype, tensors)| {
                let storage = match (dtype, &f16) {
                    (DType::F16, Err(e)) => {
                        return ModeSupport {
                            mode,
                            runs: false,
                            storage: Storage::F16.name(),
                            detail: e.to_string(),
                        };
                    }
                    (_, Ok(f16)) => Storage::for_dtype(dtype, *f16),
                    (_, Err(_)) => Storage::for_dtype(dtype, F16Storage::Packed),
                };
                let layout = match storage {
                    Storage::F32 => "f32",
                    Storage::F16 => "f16 as array<f16> (shader-f16)",
                    Storage::F16Packed => "f16 packed two per u32, math in f32",
                    Storage::BF16 => "bf16 packed two per u32 (WGSL has no bf16), math in f32",
                };
                ModeSupport {
                    mode,
                    runs: true,
                    storage: storage.name(),
                    detail: format!("{tensors}: {layout}"),
                }
            })
            .collect()
    }
}

/// A description of one adapter, for `webgpu-amp info`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct AdapterReport {
    pub name: String,
    pub backend: String,
    pub device_type: String,
    pub driver: String,
    pub driver_info: String,
    pub capabilities: Capabilities,
    /// The f16 storage that `--f16-storage auto` picks here.
    pub f16_storage: F16Storage,
    /// The `--f16-storage` request that [`Self::modes`] answers.
    pub f16_storage_requested: F16StorageChoice,
    /// Every precision mode (see [`PRECISION_MODES`]): whether it runs and with which storage.
    pub modes: Vec<ModeSupport>,
    /// What a user should know about this adapter before training (why f16 is packed, what
    /// would enable native f16).
    pub notes: Vec<String>,
}

impl AdapterReport {
    pub fn new(adapter: &wgpu::Adapter) -> Self {
        Self::with_f16_choice(adapter, F16StorageChoice::Auto)
    }

    /// The report, with [`Self::modes`] answering for `--f16-storage choice`.
    pub fn with_f16_choice(adapter: &wgpu::Adapter, choice: F16StorageChoice) -> Self {
        Self::from_parts(
            adapter.get_info(),
            Capabilities::from_adapter(adapter),
            choice,
        )
    }

    /// The report from what an adapter says about itself (separate from the adapter so the
    /// reasoning for other backends can be checked on this machine).
    pub fn from_parts(
        info: wgpu::AdapterInfo,
        capabilities: Capabilities,
        choice: F16StorageChoice,
    ) -> Self {
        let f16_storage = capabilities
            .resolve_f16_storage(F16StorageChoice::Auto)
            .unwrap_or(F16Storage::Packed);
        Self {
            notes: adapter_notes(&info, &capabilities),
            modes: capabilities.mode_support(choice),
            name: info.name,
            backend: format!("{:?}", info.backend).to_lowercase(),
            device_type: format!("{:?}", info.device_type),
            driver: info.driver,
            driver_info: info.driver_info,
            capabilities,
            f16_storage,
            f16_storage_requested: choice,
        }
    }
}

/// Why an adapter stores f16 the way it does, and what would change it.
fn adapter_notes(info: &wgpu::AdapterInfo, caps: &Capabilities) -> Vec<String> {
    let mut notes = Vec::new();
    if !caps.shader_f16 {
        notes.push(
            "no shader-f16: f16 tensors are stored packed, two per u32, and converted to f32 \
             for math as native f16 is; `--f16-storage native` fails here"
                .to_string(),
        );
        match info.backend {
            wgpu::Backend::Dx12 => notes.push(dx12_f16_note(find_dxcompiler())),
            wgpu::Backend::Gl => notes.push(
                "wgpu's GL backend never offers shader-f16; use Vulkan, Metal or DX12 on this \
                 GPU for native f16"
                    .to_string(),
            ),
            wgpu::Backend::BrowserWebGpu => notes.push(
                "the browser did not expose shader-f16 (Chrome and Edge 120+ do where the GPU \
                 supports it)"
                    .to_string(),
            ),
            _ => {}
        }
    }
    if info.device_type == wgpu::DeviceType::Cpu {
        notes.push("software adapter: correct results, slow training".to_string());
    }
    notes
}

/// DX12 reports shader-f16 only when wgpu compiles HLSL with DXC at shader model 6.2 or later
/// on a GPU with native 16-bit shader ops. wgpu loads `dxcompiler.dll` at run time and falls
/// back to FXC (shader model 5.1, no 16-bit types) when it is missing; we then store f16
/// packed, so training runs either way.
fn dx12_f16_note(dxcompiler: Option<std::path::PathBuf>) -> String {
    match dxcompiler {
        None => "DX12 without DXC: dxcompiler.dll is not next to the executable, in the working \
                 directory, in System32 or on PATH, so wgpu compiles shaders with FXC, which has \
                 no 16-bit types. For native f16 put dxcompiler.dll (DirectX Shader Compiler \
                 v1.8.2502 or later) next to webgpu-amp.exe or on PATH"
            .to_string(),
        Some(path) => format!(
            "DX12 with dxcompiler.dll at {}: shader-f16 is still missing, so the GPU or driver \
             lacks native 16-bit shader ops, or that DXC is older than v1.8.2502 or failed to \
             load (with WGPU_DX12_COMPILER=dxc a DXC that fails to load hides the DX12 adapter \
             and wgpu logs why, instead of falling back to FXC)",
            path.display()
        ),
    }
}

/// Where Windows' DLL search would find `dxcompiler.dll`: the executable's folder, the working
/// directory, System32, then PATH. A hint for the user, not what wgpu loaded.
fn find_dxcompiler() -> Option<std::path::PathBuf> {
    if !cfg!(windows) {
        return None;
    }
    let exe_dir = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.to_path_buf()));
    let system32 =
        std::env::var_os("SystemRoot").map(|r| std::path::PathBuf::from(r).join("System32"));
    let path_dirs: Vec<std::path::PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    exe_dir
        .into_iter()
        .chain(std::env::current_dir().ok())
        .chain(system32)
        .chain(path_dirs)
        .map(|d| d.join("dxcompiler.dll"))
        .find(|p| p.is_file())
}

fn new_instance(backend: BackendChoice) -> wgpu::Instance {
    // DX12: DXC when `dxcompiler.dll` can be loaded (needed for shader-f16: shader model 6.2
    // with 16-bit types), else FXC, where the adapter reports no shader-f16 and f16 is stored
    // packed. Static DXC is not used: its crate downloads a binary at build time. wgpu's own
    // variables (WGPU_DX12_COMPILER=dxc|fxc|auto, WGPU_GL_*) still override these defaults.
    let mut backend_options = wgpu::BackendOptions::default();
    backend_options.dx12.shader_compiler = wgpu::Dx12Compiler::Auto;
    wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends: backend.backends(),
        flags: wgpu::InstanceFlags::from_env_or_default(),
        backend_options: backend_options.with_env(),
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    })
}

/// wgpu's error texts span lines; the CLI prints errors as one.
fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Every adapter the chosen backend(s) can see.
pub async fn enumerate_adapters(backend: BackendChoice) -> Vec<wgpu::Adapter> {
    new_instance(backend)
        .enumerate_adapters(backend.backends())
        .await
}

/// Record uncaptured GPU errors and device loss instead of panicking (wgpu's default), so
/// they surface as [`Error`]s at safe points ([`GpuContext::check`]).
fn install_fault_handlers(device: &wgpu::Device) -> Arc<Faults> {
    let faults = Arc::new(Faults::default());
    let on_error = faults.clone();
    device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
        on_error.record_error(one_line(&e.to_string()));
    }));
    let on_lost = faults.clone();
    device.set_device_lost_callback(move |reason, message| {
        let message = one_line(&message);
        on_lost.record_lost(if message.is_empty() {
            format!("{reason:?}")
        } else {
            format!("{reason:?}: {message}")
        });
    });
    faults
}

/// The device, its queue, what it can do, and the shared allocator and pipeline cache.
pub struct GpuContext {
    pub adapter: wgpu::Adapter,
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub report: AdapterReport,
    pub caps: Capabilities,
    /// The f16 storage chosen for this context (may be forced to packed).
    pub f16_storage: F16Storage,
    pub allocator: Arc<Allocator>,
    pipelines: kernel::PipelineCache,
    host_waits: AtomicU64,
    faults: Arc<Faults>,
}

/// GPU errors that arrive outside any error scope, and device loss. wgpu's default handler
/// panics; ours records, and [`GpuContext::check`] turns the record into an [`Error`] at safe
/// points (after planning, after a step's submit, on readbacks).
#[derive(Default)]
struct Faults {
    /// Set when anything is recorded, so the per-step check is one atomic load.
    any: AtomicBool,
    errors: Mutex<Vec<String>>,
    lost: Mutex<Option<String>>,
}

impl Faults {
    /// Errors kept per check; later ones are usually consequences of the first.
    const KEEP: usize = 4;

    fn record_error(&self, message: String) {
        let mut errors = self.errors.lock().unwrap_or_else(|e| e.into_inner());
        if errors.len() < Self::KEEP {
            errors.push(message);
        }
        self.any.store(true, Ordering::Release);
    }

    fn record_lost(&self, message: String) {
        let mut lost = self.lost.lock().unwrap_or_else(|e| e.into_inner());
        lost.get_or_insert(message);
        self.any.store(true, Ordering::Release);
    }
}

/// Bytes for people: `313.6 MB`, `2.1 GB`.
pub fn human_bytes(bytes: u64) -> String {
    match bytes {
        b if b >= 1_000_000_000 => format!("{:.1} GB", b as f64 / 1e9),
        b if b >= 1_000_000 => format!("{:.1} MB", b as f64 / 1e6),
        b if b >= 1_000 => format!("{:.1} kB", b as f64 / 1e3),
        b => format!("{b} bytes"),
    }
}

impl GpuContext {
    /// Pick an adapter and create the device (async: the only form that works on the web).
    pub async fn new_async(options: &GpuOptions) -> Result<Self> {
        let instance = new_instance(options.backend);
        let adapter = match &options.adapter {
            Some(want) => {
                let needle = want.to_lowercase();
                let adapters = instance
                    .enumerate_adapters(options.backend.backends())
                    .await;
                adapters
                    .into_iter()
                    .find(|a| a.get_info().name.to_lowercase().contains(&needle))
                    .ok_or_else(|| Error::NoAdapter {
                        backend: options.backend.name().into(),
                        adapter: format!(", adapter name containing `{want}`"),
                    })?
            }
            None => instance
                .request_adapter(&wgpu::RequestAdapterOptions {
                    power_preference: wgpu::PowerPreference::HighPerformance,
                    force_fallback_adapter: false,
                    compatible_surface: None,
                    apply_limit_buckets: false,
                })
                .await
                .map_err(|_| Error::NoAdapter {
                    backend: options.backend.name().into(),
                    adapter: String::new(),
                })?,
        };
        Self::from_adapter(adapter, options.f16_storage).await
    }

    /// Blocking constructor for native code (CLI, tests, benchmarks).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn new(options: &GpuOptions) -> Result<Self> {
        pollster::block_on(Self::new_async(options))
    }

    /// Create the device on a chosen adapter, requesting the optional features we use.
    pub async fn from_adapter(adapter: wgpu::Adapter, f16: F16StorageChoice) -> Result<Self> {
        let report = AdapterReport::new(&adapter);
        let caps = report.capabilities.clone();
        let f16_storage = caps.resolve_f16_storage(f16)?;
        let (device, queue) = adapter
            .request_device(&Self::device_descriptor(&adapter))
            .await
            .map_err(|e| Error::Device {
                adapter: report.name.clone(),
                reason: e.to_string(),
            })?;
        let faults = install_fault_handlers(&device);
        Ok(Self {
            adapter,
            device,
            queue,
            report,
            caps,
            f16_storage,
            allocator: Arc::new(Allocator::default()),
            pipelines: kernel::PipelineCache::default(),
            host_waits: AtomicU64::new(0),
            faults,
        })
    }

    /// Wrap a device someone else created (the app's renderer device). Capabilities are
    /// the features the *device* got, so native f16 is used only where it was requested.
    pub fn from_device(
        adapter: wgpu::Adapter,
        device: wgpu::Device,
        queue: wgpu::Queue,
        f16: F16StorageChoice,
    ) -> Result<Self> {
        let mut report = AdapterReport::new(&adapter);
        let features = device.features();
        let caps = &mut report.capabilities;
        caps.shader_f16 &= features.contains(wgpu::Features::SHADER_F16);
        caps.subgroups &= features.contains(wgpu::Features::SUBGROUP);
        caps.timestamp_query &= features.contains(wgpu::Features::TIMESTAMP_QUERY);
        let limits = device.limits();
        caps.max_buffer_size = limits.max_buffer_size;
        caps.max_storage_buffer_binding_size = limits.max_storage_buffer_binding_size;
        caps.max_storage_buffers_per_shader_stage = limits.max_storage_buffers_per_shader_stage;
        caps.max_compute_workgroup_storage_size = limits.max_compute_workgroup_storage_size;
        caps.max_compute_invocations_per_workgroup = limits.max_compute_invocations_per_workgroup;
        caps.max_compute_workgroups_per_dimension = limits.max_compute_workgroups_per_dimension;
        caps.min_storage_buffer_offset_alignment = limits.min_storage_buffer_offset_alignment;
        let caps = caps.clone();
        let f16_storage = caps.resolve_f16_storage(f16)?;
        report.f16_storage = caps
            .resolve_f16_storage(F16StorageChoice::Auto)
            .unwrap_or(F16Storage::Packed);
        Ok(Self {
            adapter,
            queue,
            report,
            caps,
            f16_storage,
            allocator: Arc::new(Allocator::default()),
            pipelines: kernel::PipelineCache::default(),
            host_waits: AtomicU64::new(0),
            faults: install_fault_handlers(&device),
            device,
        })
    }

    /// The device features and limits [`GpuContext::from_adapter`] requests on `adapter`:
    /// every optional feature this crate uses that the adapter has, and its full limits.
    /// The app hands this to its renderer so one device serves both.
    pub fn device_descriptor(adapter: &wgpu::Adapter) -> wgpu::DeviceDescriptor<'static> {
        let wanted = wgpu::Features::SHADER_F16
            | wgpu::Features::SUBGROUP
            | wgpu::Features::TIMESTAMP_QUERY
            | wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS;
        wgpu::DeviceDescriptor {
            label: Some("webgpu-amp"),
            required_features: adapter.features() & wanted,
            required_limits: adapter.limits(),
            experimental_features: wgpu::ExperimentalFeatures::disabled(),
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        }
    }

    /// Turns a recorded device loss or uncaptured GPU error into an error (and forgets the
    /// errors, so each is reported once; a loss is reported every time). Cheap when nothing
    /// happened: one atomic load. Call it at safe points: after planning, after submits.
    pub fn check(&self) -> Result<()> {
        if !self.faults.any.load(Ordering::Acquire) {
            return Ok(());
        }
        if let Some(reason) = self.device_lost() {
            return Err(Error::DeviceLost(reason));
        }
        let errors =
            std::mem::take(&mut *self.faults.errors.lock().unwrap_or_else(|e| e.into_inner()));
        self.faults.any.store(false, Ordering::Release);
        match errors.first() {
            None => Ok(()),
            Some(first) if errors.len() == 1 => Err(Error::Gpu(first.clone())),
            Some(first) => Err(Error::Gpu(format!(
                "{first} (and {} more error(s))",
                errors.len() - 1
            ))),
        }
    }

    /// Forgets recorded GPU errors (not a device loss): for when an error already returned
    /// explains them, e.g. the invalid buffer behind a limit error.
    pub fn clear_errors(&self) {
        self.faults
            .errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        if self.device_lost().is_none() {
            self.faults.any.store(false, Ordering::Release);
        }
    }

    /// Why the device was lost, if it was.
    pub fn device_lost(&self) -> Option<String> {
        self.faults
            .lost
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The storage a tensor of `dtype` gets on this context.
    pub fn storage_for(&self, dtype: DType) -> Storage {
        Storage::for_dtype(dtype, self.f16_storage)
    }

    /// Allocate a buffer through the counting allocator.
    // On the web wgpu handles are neither Send nor Sync (one thread); the Arc is only for
    // shared ownership there, and is what native threads need.
    #[cfg_attr(target_arch = "wasm32", allow(clippy::arc_with_non_send_sync))]
    pub fn alloc(&self, label: &str, size: u64, usage: wgpu::BufferUsages) -> Arc<GpuBuffer> {
        Arc::new(self.allocator.create(&self.device, label, size, usage))
    }

    /// Allocate a storage buffer usable by kernels, uploads and readbacks.
    pub fn alloc_storage(&self, label: &str, size: u64) -> Arc<GpuBuffer> {
        self.alloc(
            label,
            size,
            wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
        )
    }

    pub fn memory(&self) -> MemoryStats {
        self.allocator.stats()
    }

    /// Record `kernels` into one compute pass of one command buffer and submit it.
    pub fn run(&self, kernels: &[&Kernel]) {
        let mut encoder = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("run") });
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("run"),
                timestamp_writes: None,
            });
            for k in kernels {
                k.encode(&mut pass);
            }
        }
        self.queue.submit([encoder.finish()]);
    }

    /// Blocking waits the host made on the GPU so far (readbacks, syncs). The training loop
    /// asserts this does not grow inside a step.
    pub fn host_waits(&self) -> u64 {
        self.host_waits.load(Ordering::Relaxed)
    }

    #[cfg_attr(target_arch = "wasm32", allow(dead_code))]
    pub(crate) fn count_host_wait(&self) {
        self.host_waits.fetch_add(1, Ordering::Relaxed);
    }

    /// Block until all submitted work is done (native only; tests and end of run).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn sync(&self) -> Result<()> {
        self.count_host_wait();
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| self.poll_error(e))?;
        self.check()
    }

    /// A failed poll: the device loss behind it when there is one.
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))]
    pub(crate) fn poll_error(&self, e: wgpu::PollError) -> Error {
        match self.device_lost() {
            Some(reason) => Error::DeviceLost(reason),
            None => Error::Gpu(e.to_string()),
        }
    }

    /// Number of pipelines compiled so far (each is created once).
    pub fn pipeline_count(&self) -> usize {
        self.pipelines.len()
    }
}
