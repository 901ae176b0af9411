//! What an adapter can do (features and limits this crate cares about), the f16 storage that
//! follows from it, and a description of the adapter for people: why f16 is stored as it is
//! and what would change that.

use super::F16StorageChoice;
use super::kernel_rules::KernelLimits;
use super::kernel_table::AdapterClass;
use super::tensor_cores::{TensorCoreChoice, TensorCores};
use super::tuning_file::AdapterKernels;
use crate::dtype::F16Storage;
use crate::error::{Error, Result};

/// What the adapter can do, as far as this project cares.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Capabilities {
    pub shader_f16: bool,
    pub subgroups: bool,
    /// `subgroupBarrier()` (wgpu's SUBGROUP_BARRIER: Vulkan and Metal with subgroups):
    /// per-subgroup scratch (tensor-core epilogues, attention) synchronises one subgroup
    /// instead of the workgroup.
    pub subgroup_barrier: bool,
    pub timestamp_query: bool,
    /// A CPU adapter (lavapipe, llvmpipe, SwiftShader, WARP): matmuls run the direct body.
    pub cpu_adapter: bool,
    /// The family of adapter, which keys the kernel table.
    pub class: AdapterClass,
    /// How the heavy kernels are shaped here, and where that table came from.
    pub kernels: AdapterKernels,
    /// Whether f16 matmuls and convolutions run on cooperative matrices (tensor cores) here,
    /// on which fragment shape, and why not.
    pub tensor_cores: TensorCores,
    pub max_buffer_size: u64,
    pub max_storage_buffer_binding_size: u64,
    pub max_storage_buffers_per_shader_stage: u32,
    pub max_compute_workgroup_storage_size: u32,
    pub max_compute_invocations_per_workgroup: u32,
    pub max_compute_workgroup_size_x: u32,
    pub max_compute_workgroup_size_y: u32,
    pub max_compute_workgroups_per_dimension: u32,
    pub min_storage_buffer_offset_alignment: u32,
}

impl Capabilities {
    /// What `adapter` can do, with tensor cores as `choice` decides.
    pub fn from_adapter(adapter: &wgpu::Adapter, choice: TensorCoreChoice) -> Self {
        let tensor_cores = TensorCores::of_adapter(adapter, choice);
        Self::from_parts(adapter, adapter.features(), &adapter.limits(), tensor_cores)
    }

    /// What a device someone else created on `adapter` got: only the features it was given
    /// (tensor cores only where the device has cooperative matrices).
    pub fn from_device(
        adapter: &wgpu::Adapter,
        device: &wgpu::Device,
        choice: TensorCoreChoice,
    ) -> Self {
        let features = device.features();
        let tensor_cores = if features.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX) {
            TensorCores::of_adapter(adapter, choice)
        } else {
            match TensorCores::of_adapter(adapter, choice) {
                TensorCores::Used(_) => TensorCores::NotUsed(
                    "the device was created without cooperative matrices".to_string(),
                ),
                not_used => not_used,
            }
        };
        Self::from_parts(adapter, features, &device.limits(), tensor_cores)
    }

    fn from_parts(
        adapter: &wgpu::Adapter,
        f: wgpu::Features,
        l: &wgpu::Limits,
        tensor_cores: TensorCores,
    ) -> Self {
        let info = adapter.get_info();
        let kernel_limits = kernel_limits(l, &tensor_cores);
        Self {
            shader_f16: f.contains(wgpu::Features::SHADER_F16),
            subgroups: f.contains(wgpu::Features::SUBGROUP),
            subgroup_barrier: f
                .contains(wgpu::Features::SUBGROUP | wgpu::Features::SUBGROUP_BARRIER),
            timestamp_query: f.contains(wgpu::Features::TIMESTAMP_QUERY),
            cpu_adapter: info.device_type == wgpu::DeviceType::Cpu,
            class: AdapterClass::of(&info),
            kernels: AdapterKernels::builtin(&info, &kernel_limits),
            tensor_cores,
            max_buffer_size: l.max_buffer_size,
            max_storage_buffer_binding_size: l.max_storage_buffer_binding_size,
            max_storage_buffers_per_shader_stage: l.max_storage_buffers_per_shader_stage,
            max_compute_workgroup_storage_size: l.max_compute_workgroup_storage_size,
            max_compute_invocations_per_workgroup: l.max_compute_invocations_per_workgroup,
            max_compute_workgroup_size_x: l.max_compute_workgroup_size_x,
            max_compute_workgroup_size_y: l.max_compute_workgroup_size_y,
            max_compute_workgroups_per_dimension: l.max_compute_workgroups_per_dimension,
            min_storage_buffer_offset_alignment: l.min_storage_buffer_offset_alignment,
        }
    }

    /// The limits the kernel table is checked against here.
    pub fn kernel_limits(&self) -> KernelLimits {
        KernelLimits {
            workgroup_bytes: self.max_compute_workgroup_storage_size,
            invocations: self.max_compute_invocations_per_workgroup,
            size_x: self.max_compute_workgroup_size_x,
            size_y: self.max_compute_workgroup_size_y,
            subgroup: self.tensor_cores.config().map_or(0, |c| c.subgroup),
        }
    }

    /// Load the tuning file the user asked for (`--tuning`, `WEBGPU_AMP_TUNING`) for the
    /// adapter `info` describes; without one the built-in table stays.
    pub fn apply_tuning_file(&mut self, info: &wgpu::AdapterInfo) -> Result<()> {
        self.kernels = AdapterKernels::resolve(info, &self.kernel_limits())?;
        Ok(())
    }

    /// The f16 storage training would use on this adapter for a given request.
    pub fn resolve_f16_storage(&self, choice: F16StorageChoice) -> Result<F16Storage> {
        match choice {
            F16StorageChoice::Auto if self.shader_f16 => Ok(F16Storage::Native),
            F16StorageChoice::Auto | F16StorageChoice::Packed => Ok(F16Storage::Packed),
            F16StorageChoice::Native if self.shader_f16 => Ok(F16Storage::Native),
            F16StorageChoice::Native => Err(Error::Unsupported(
                "native f16 storage requested but the adapter has no shader-f16; store f16 packed \
                 (or let auto pick)"
                    .into(),
            )),
        }
    }

    /// The storage `F16StorageChoice::Auto` picks: native where shader-f16 exists.
    pub fn auto_f16_storage(&self) -> F16Storage {
        if self.shader_f16 {
            F16Storage::Native
        } else {
            F16Storage::Packed
        }
    }
}

fn kernel_limits(l: &wgpu::Limits, tensor_cores: &TensorCores) -> KernelLimits {
    KernelLimits::of(l, tensor_cores.config().map_or(0, |c| c.subgroup))
}

/// One adapter as people see it (`webgpu-amp info`, the app, run summaries): its name,
/// backend, type and driver, what it can do, and notes on its f16 storage.
#[derive(Clone, Debug, serde::Serialize)]
pub struct AdapterDescription {
    pub name: String,
    /// wgpu's backend in lower case: `vulkan`, `metal`, `dx12`, `gl`, `browserwebgpu`.
    pub backend: String,
    /// wgpu's device type as written by `Debug` (`DiscreteGpu`, `Cpu`, ...); compare
    /// [`crate::gpu::GpuContext::device_type`] instead of this text.
    pub device_type: String,
    pub driver: String,
    pub driver_info: String,
    pub capabilities: Capabilities,
    /// The f16 storage that automatic f16 storage picks here.
    pub f16_storage: F16Storage,
    /// What a user should know about this adapter before training (why f16 is packed, what
    /// would enable native f16).
    pub notes: Vec<String>,
}

impl AdapterDescription {
    pub fn new(adapter: &wgpu::Adapter, tensor_cores: TensorCoreChoice) -> Self {
        Self::from_parts(
            adapter.get_info(),
            Capabilities::from_adapter(adapter, tensor_cores),
        )
    }

    /// The description from what an adapter says about itself (separate from the adapter so
    /// the reasoning for other backends can be checked on this machine).
    pub fn from_parts(info: wgpu::AdapterInfo, capabilities: Capabilities) -> Self {
        Self {
            notes: adapter_notes(&info, &capabilities),
            f16_storage: capabilities.auto_f16_storage(),
            name: info.name,
            backend: format!("{:?}", info.backend).to_lowercase(),
            device_type: format!("{:?}", info.device_type),
            driver: info.driver,
            driver_info: info.driver_info,
            capabilities,
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
