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

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

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
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum F16StorageChoice {
    #[default]
    Auto,
    Native,
    Packed,
}

impl F16StorageChoice {
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
}

impl AdapterReport {
    pub fn new(adapter: &wgpu::Adapter) -> Self {
        let info = adapter.get_info();
        let capabilities = Capabilities::from_adapter(adapter);
        let f16_storage = capabilities
            .resolve_f16_storage(F16StorageChoice::Auto)
            .unwrap_or(F16Storage::Packed);
        Self {
            name: info.name,
            backend: format!("{:?}", info.backend).to_lowercase(),
            device_type: format!("{:?}", info.device_type),
            driver: info.driver,
            driver_info: info.driver_info,
            capabilities,
            f16_storage,
        }
    }
}

fn new_instance(backend: BackendChoice) -> wgpu::Instance {
    wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends: backend.backends(),
        flags: wgpu::InstanceFlags::from_env_or_default(),
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    })
}

/// Every adapter the chosen backend(s) can see.
pub async fn enumerate_adapters(backend: BackendChoice) -> Vec<wgpu::Adapter> {
    new_instance(backend)
        .enumerate_adapters(backend.backends())
        .await
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
            device,
            queue,
            report,
            caps,
            f16_storage,
            allocator: Arc::new(Allocator::default()),
            pipelines: kernel::PipelineCache::default(),
            host_waits: AtomicU64::new(0),
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

    /// The storage a tensor of `dtype` gets on this context.
    pub fn storage_for(&self, dtype: DType) -> Storage {
        Storage::for_dtype(dtype, self.f16_storage)
    }

    /// Allocate a buffer through the counting allocator.
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
            .map(|_| ())
            .map_err(|e| Error::Gpu(e.to_string()))
    }

    /// Number of pipelines compiled so far (each is created once).
    pub fn pipeline_count(&self) -> usize {
        self.pipelines.len()
    }
}
