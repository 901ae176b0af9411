//! The context: device, queue, what they can do, the f16 storage in use, the counting
//! allocator, the pipeline cache and the host-wait count. Every op plans through it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::adapter::{F16StorageChoice, GpuOptions, choose_adapter};
use super::capabilities::{AdapterDescription, Capabilities};
use super::faults::Faults;
use super::tensor_cores::{TensorCoreChoice, TensorCores};
use super::{Allocator, GpuBuffer, MemoryStats};
use crate::dtype::{DType, F16Storage, Storage};
use crate::error::{Error, Result};
use crate::shader::Variant;

/// A compiled pipeline and what its entry point binds, cached per variant and entry point
/// (`GpuContext::kernel`).
pub(super) struct CachedPipeline {
    /// The source it was compiled from: two shaders declared under one name must not share.
    pub(super) source: &'static str,
    /// None on a dry context (nothing planned there runs).
    pub(super) pipeline: Option<wgpu::ComputePipeline>,
    /// Name → binding index of every resource the entry point actually uses.
    pub(super) used_bindings: Vec<(String, u32)>,
    /// The storage buffers among them it may write.
    pub(super) writable: Vec<String>,
    /// What was compiled: the variant and its entry point.
    pub(super) variant: Variant,
    pub(super) entry: String,
    /// Built without wgpu's runtime checks (`KernelDesc::trusted`).
    pub(super) trusted: bool,
}

/// One entry point a context compiled, with the names of the resources it uses: what the
/// declared variant grids must cover ([`crate::variants::undeclared`]), since the browser's
/// shader compiler is only ever shown the declared ones.
#[derive(Clone, Debug)]
pub struct CompiledEntry {
    pub variant: Variant,
    pub entry: String,
    pub used: Vec<String>,
    /// Built without wgpu's runtime checks (the trusted kernels, natively).
    pub trusted: bool,
}

#[derive(Default)]
pub(crate) struct PipelineCache {
    pub(super) map: Mutex<HashMap<String, Arc<CachedPipeline>>>,
    /// Pipelines (and their shader modules) compiled: cache misses.
    pub(super) created: AtomicU64,
}

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
    /// Every entry point compiled so far (each variant once per entry and build), sorted by
    /// label.
    pub fn compiled_entries(&self) -> Vec<CompiledEntry> {
        let map = self.pipelines.map.lock().expect("pipeline cache");
        let mut seen = std::collections::BTreeMap::new();
        for p in map.values() {
            let key = format!("{}#{}#{}", p.variant.key(), p.entry, p.trusted);
            seen.entry(key).or_insert_with(|| CompiledEntry {
                variant: p.variant.clone(),
                entry: p.entry.clone(),
                used: p.used_bindings.iter().map(|(n, _)| n.clone()).collect(),
                trusted: p.trusted,
            });
        }
        seen.into_values().collect()
    }

    /// Pick an adapter and create the device (async: the only form that works on the web).
    pub async fn new_async(options: &GpuOptions) -> Result<Self> {
        let adapter = choose_adapter(options).await?;
        Self::from_adapter(adapter, options.f16_storage, options.tensor_cores).await
    }

    /// Blocking constructor for native code (CLI, tests, benchmarks).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn new(options: &GpuOptions) -> Result<Self> {
        pollster::block_on(Self::new_async(options))
    }

    /// Create the device on a chosen adapter, requesting the optional features we use.
    /// `--tensor-cores on` where they cannot run, or with f16 stored packed (which cooperative
    /// matrices cannot load), fails here with one line.
    pub async fn from_adapter(
        adapter: wgpu::Adapter,
        f16: F16StorageChoice,
        tensor_cores: TensorCoreChoice,
    ) -> Result<Self> {
        let mut report = AdapterDescription::new(&adapter, tensor_cores);
        report.capabilities.apply_tuning_file(&adapter.get_info())?;
        let f16_storage = Self::f16_storage(&report, f16, tensor_cores)?;
        let (device, queue) = adapter
            .request_device(&Self::device_descriptor(&adapter, tensor_cores))
            .await
            .map_err(|e| Error::Device {
                adapter: report.name.clone(),
                reason: e.to_string(),
            })?;
        Ok(Self::assemble(adapter, device, queue, report, f16_storage))
    }

    /// Wrap a device someone else created (the app's renderer device). Capabilities are
    /// the features the *device* got, so native f16 is used only where it was requested.
    pub fn from_device(
        adapter: wgpu::Adapter,
        device: wgpu::Device,
        queue: wgpu::Queue,
        f16: F16StorageChoice,
        tensor_cores: TensorCoreChoice,
    ) -> Result<Self> {
        let mut report = AdapterDescription::new(&adapter, tensor_cores);
        report.capabilities = Capabilities::from_device(&adapter, &device, tensor_cores);
        report.capabilities.apply_tuning_file(&adapter.get_info())?;
        report.f16_storage = report.capabilities.auto_f16_storage();
        let f16_storage = Self::f16_storage(&report, f16, tensor_cores)?;
        Ok(Self::assemble(adapter, device, queue, report, f16_storage))
    }

    /// The f16 storage `f16` asks for on the adapter `report` describes. `--tensor-cores on`
    /// must get them: an adapter that cannot run them, or f16 stored packed, is a one-line
    /// error rather than a silent SIMT run.
    fn f16_storage(
        report: &AdapterDescription,
        f16: F16StorageChoice,
        tensor_cores: TensorCoreChoice,
    ) -> Result<F16Storage> {
        let caps = &report.capabilities;
        let f16_storage = caps.resolve_f16_storage(f16)?;
        caps.tensor_cores.require(tensor_cores, &report.name)?;
        if matches!(tensor_cores, TensorCoreChoice::On(_)) && f16_storage == F16Storage::Packed {
            return Err(Error::Unsupported(format!(
                "tensor cores asked for ({}) with f16 stored packed, which cooperative matrices \
                 cannot load; store f16 natively (or let auto pick)",
                tensor_cores.name()
            )));
        }
        Ok(f16_storage)
    }

    fn assemble(
        adapter: wgpu::Adapter,
        device: wgpu::Device,
        queue: wgpu::Queue,
        report: AdapterDescription,
        f16_storage: F16Storage,
    ) -> Self {
        Self {
            adapter,
            queue,
            caps: report.capabilities.clone(),
            report,
            f16_storage,
            allocator: Arc::new(Allocator::default()),
            pipelines: PipelineCache::default(),
            host_waits: AtomicU64::new(0),
            faults: Faults::install(&device),
            device,
        }
    }

    /// A context on the same device whose allocator is dry: every buffer is counted at its
    /// full size but backed by 4 bytes, kernels get no pipeline or bind group, and writes
    /// are dropped. Planning a step on it costs nothing on the device and shows what the
    /// step would allocate and bind ([`Allocator::live_by_label`],
    /// [`Allocator::largest_binding`]); nothing planned on it may run.
    pub fn dry_twin(&self) -> GpuContext {
        self.twin(self.report.clone(), Arc::new(Allocator::dry()))
    }

    /// A context on the same device and queue with `report`'s capabilities and `allocator`,
    /// and a pipeline cache of its own.
    fn twin(&self, report: AdapterDescription, allocator: Arc<Allocator>) -> GpuContext {
        Self {
            adapter: self.adapter.clone(),
            device: self.device.clone(),
            queue: self.queue.clone(),
            caps: report.capabilities.clone(),
            report,
            f16_storage: self.f16_storage,
            allocator,
            pipelines: PipelineCache::default(),
            host_waits: AtomicU64::new(0),
            faults: self.faults.clone(),
        }
    }

    /// A context on the same device, queue and allocator whose kernels take their shapes from
    /// `table` (`bench tune` times candidate tables this way; `source` says where it came
    /// from). Its pipeline cache is its own. A table that breaks a rule of the kernels
    /// (`gpu::kernel_rules`) under this adapter's limits is an error.
    pub fn with_kernel_table(&self, table: super::KernelTable, source: &str) -> Result<GpuContext> {
        table.check(&self.caps.kernel_limits())?;
        Ok(self.twin_with(table, source, self.allocator.clone()))
    }

    /// A context on the same device with its own allocator and pipeline cache, running the
    /// same table marked as given: the numeric check of a loaded table runs on it, so its
    /// buffers are not counted in this context's memory and its products do not check again.
    pub fn table_check_twin(&self) -> GpuContext {
        let table = self.caps.kernels.table.clone();
        self.twin_with(table, "kernel table check", Arc::new(Allocator::default()))
    }

    fn twin_with(
        &self,
        table: super::KernelTable,
        source: &str,
        allocator: Arc<Allocator>,
    ) -> Self {
        let mut report = self.report.clone();
        report.capabilities.kernels = super::AdapterKernels {
            table,
            source: source.to_string(),
            origin: super::TableOrigin::Given,
        };
        self.twin(report, allocator)
    }

    /// A context on the same device whose tensor-core kernels are laid out for subgroups of
    /// `lanes` (a multiple of the adapter's size) as if its size varied up to there: how the
    /// tests run, on an adapter of fixed size, what RDNA3 does when a driver picks 32 lanes
    /// for kernels laid out for 64 (more subgroups than the tile has; the rest only stage).
    /// Its pipeline cache is its own. Unchanged where tensor cores are not used.
    pub fn with_coop_subgroup_layout(&self, lanes: u32) -> GpuContext {
        let mut report = self.report.clone();
        if let super::TensorCores::Used(c) = &mut report.capabilities.tensor_cores {
            c.subgroup = lanes;
        }
        self.twin(report, self.allocator.clone())
    }

    /// A context on the same device whose storage bindings are held to at most `bytes`
    /// (never more than the adapter allows): every kernel made on it binds within that, the
    /// flat parameter buffers in more pieces ([`GpuContext::flat_pieces`]). How the tests
    /// check, on a tiny model, the piecewise path a model over 128 MiB per flat buffer takes.
    /// Its allocator and pipeline cache are its own.
    pub fn with_binding_limit(&self, bytes: u64) -> GpuContext {
        let mut report = self.report.clone();
        let limit = &mut report.capabilities.max_storage_buffer_binding_size;
        *limit = (*limit).min(bytes);
        self.twin(report, Arc::new(Allocator::default()))
    }

    /// Whether this is a [`GpuContext::dry_twin`].
    pub fn is_dry(&self) -> bool {
        self.allocator.is_dry()
    }

    /// Queue a write of `data` at `offset` of `buffer` (dropped on a dry context).
    pub fn write_buffer(&self, buffer: &GpuBuffer, offset: u64, data: &[u8]) {
        if !self.is_dry() {
            self.queue.write_buffer(buffer.raw(), offset, data);
        }
    }

    /// The device features and limits [`GpuContext::from_adapter`] requests on `adapter`:
    /// every optional feature this crate uses that the adapter has, and its full limits.
    /// The app hands this to its renderer so one device serves both.
    pub fn device_descriptor(
        adapter: &wgpu::Adapter,
        tensor_cores: TensorCoreChoice,
    ) -> wgpu::DeviceDescriptor<'static> {
        let mut wanted = wgpu::Features::SHADER_F16
            | wgpu::Features::SUBGROUP
            | wgpu::Features::SUBGROUP_BARRIER
            | wgpu::Features::TIMESTAMP_QUERY
            | wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS;
        // Cooperative matrices are experimental in wgpu 30: requested (with experimental
        // features enabled) only where the f16 kernels will use them, so every other adapter
        // gets exactly the device it got before.
        let tensor_cores = TensorCores::of_adapter(adapter, tensor_cores)
            .config()
            .is_some();
        let experimental_features = if tensor_cores {
            wanted |= wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX;
            // SAFETY: wgpu asks callers to acknowledge that experimental features may hold
            // bugs. Only cooperative matrices are requested, where the tensor-core choice
            // uses them (gpu::TensorCores); every other path is unchanged.
            unsafe { wgpu::ExperimentalFeatures::enabled() }
        } else {
            wgpu::ExperimentalFeatures::disabled()
        };
        wgpu::DeviceDescriptor {
            label: Some("webgpu-amp"),
            required_features: adapter.features() & wanted,
            required_limits: adapter.limits(),
            experimental_features,
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

    /// Turns a recorded device loss or uncaptured GPU error into an error (and forgets the
    /// errors, so each is reported once; a loss is reported every time). Cheap when nothing
    /// happened: one atomic load. Call it at safe points: after planning, after submits.
    pub fn check(&self) -> Result<()> {
        self.faults.check()
    }

    /// Forgets recorded GPU errors (not a device loss): for when an error already returned
    /// explains them, e.g. the invalid buffer behind a limit error.
    pub fn clear_errors(&self) {
        self.faults.clear_errors()
    }

    /// Why the device was lost, if it was.
    pub fn device_lost(&self) -> Option<String> {
        self.faults.device_lost()
    }

    /// Whether the device was lost because this process destroyed it (`Device::destroy`, as
    /// the test hooks do), rather than by the driver, the browser or the GPU.
    pub fn device_destroyed(&self) -> bool {
        self.faults.device_destroyed()
    }

    /// `Device::destroy`, remembered as this process's doing ([`GpuContext::device_destroyed`]):
    /// the device-loss test hooks call it.
    pub fn destroy_device(&self) {
        self.faults.mark_destroyed();
        self.device.destroy();
    }

    /// A failed poll: the device loss behind it when there is one.
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))]
    pub(crate) fn poll_error(&self, e: wgpu::PollError) -> Error {
        self.faults.poll_error(e)
    }
}
