//! The context: device, queue, what they can do, the f16 storage in use, the counting
//! allocator, the pipeline cache and the host-wait count. Every op plans through it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::adapter::{F16StorageChoice, GpuOptions, choose_adapter};
use super::capabilities::{AdapterDescription, Capabilities};
use super::faults::Faults;
use super::kernel::{Kernel, PipelineCache};
use super::{Allocator, GpuBuffer, MemoryStats};
use crate::dtype::{DType, F16Storage, Storage};
use crate::error::{Error, Result};

/// The device, its queue, what it can do, and the shared allocator and pipeline cache.
pub struct GpuContext {
    pub adapter: wgpu::Adapter,
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub report: AdapterDescription,
    pub caps: Capabilities,
    /// The f16 storage chosen for this context (may be forced to packed).
    pub f16_storage: F16Storage,
    pub allocator: Arc<Allocator>,
    pub(super) pipelines: PipelineCache,
    host_waits: AtomicU64,
    pub(super) faults: Arc<Faults>,
}

impl GpuContext {
    /// Pick an adapter and create the device (async: the only form that works on the web).
    pub async fn new_async(options: &GpuOptions) -> Result<Self> {
        let adapter = choose_adapter(options).await?;
        Self::from_adapter(adapter, options.f16_storage).await
    }

    /// Blocking constructor for native code (CLI, tests, benchmarks).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn new(options: &GpuOptions) -> Result<Self> {
        pollster::block_on(Self::new_async(options))
    }

    /// Create the device on a chosen adapter, requesting the optional features we use.
    pub async fn from_adapter(adapter: wgpu::Adapter, f16: F16StorageChoice) -> Result<Self> {
        let report = AdapterDescription::new(&adapter);
        let caps = report.capabilities.clone();
        let f16_storage = caps.resolve_f16_storage(f16)?;
        let (device, queue) = adapter
            .request_device(&Self::device_descriptor(&adapter))
            .await
            .map_err(|e| Error::Device {
                adapter: report.name.clone(),
                reason: e.to_string(),
            })?;
        Ok(Self::assemble(
            adapter,
            device,
            queue,
            report,
            caps,
            f16_storage,
        ))
    }

    /// Wrap a device someone else created (the app's renderer device). Capabilities are
    /// the features the *device* got, so native f16 is used only where it was requested.
    pub fn from_device(
        adapter: wgpu::Adapter,
        device: wgpu::Device,
        queue: wgpu::Queue,
        f16: F16StorageChoice,
    ) -> Result<Self> {
        let mut report = AdapterDescription::new(&adapter);
        let caps = Capabilities::from_device(&device);
        let f16_storage = caps.resolve_f16_storage(f16)?;
        report.f16_storage = caps.auto_f16_storage();
        report.capabilities = caps.clone();
        Ok(Self::assemble(
            adapter,
            device,
            queue,
            report,
            caps,
            f16_storage,
        ))
    }

    fn assemble(
        adapter: wgpu::Adapter,
        device: wgpu::Device,
        queue: wgpu::Queue,
        report: AdapterDescription,
        caps: Capabilities,
        f16_storage: F16Storage,
    ) -> Self {
        Self {
            adapter,
            queue,
            report,
            caps,
            f16_storage,
            allocator: Arc::new(Allocator::default()),
            pipelines: PipelineCache::default(),
            host_waits: AtomicU64::new(0),
            faults: Faults::install(&device),
            device,
        }
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

    /// What kind of adapter this is (discrete or integrated GPU, CPU, ...).
    pub fn device_type(&self) -> wgpu::DeviceType {
        self.adapter.get_info().device_type
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
}
