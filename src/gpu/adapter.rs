//! Choosing the device: which backend (`BackendChoice`), which adapter, which f16 storage
//! (`F16StorageChoice`), from options or the environment, and the wgpu instance that lists
//! the adapters.

use super::tensor_cores::TensorCoreChoice;
use crate::error::{Error, Result};

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

/// What the user asked for; resolved against the adapter into an
/// [`F16Storage`](crate::dtype::F16Storage).
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
/// (`WEBGPU_AMP_BACKEND`, `WEBGPU_AMP_ADAPTER`, `WEBGPU_AMP_F16_STORAGE`,
/// `WEBGPU_AMP_TENSOR_CORES`).
#[derive(Clone, Debug, Default)]
pub struct GpuOptions {
    pub backend: BackendChoice,
    /// Case-insensitive substring of the adapter name.
    pub adapter: Option<String>,
    pub f16_storage: F16StorageChoice,
    /// Whether f16 matmuls and convolutions run on cooperative matrices.
    pub tensor_cores: TensorCoreChoice,
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
            if self.tensor_cores == TensorCoreChoice::Auto
                && let Ok(s) = std::env::var("WEBGPU_AMP_TENSOR_CORES")
            {
                self.tensor_cores = TensorCoreChoice::parse(&s)?;
            }
        }
        Ok(())
    }
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

/// Every adapter the chosen backend(s) can see.
pub async fn enumerate_adapters(backend: BackendChoice) -> Vec<wgpu::Adapter> {
    new_instance(backend)
        .enumerate_adapters(backend.backends())
        .await
}

/// The adapter `options` ask for: the first whose name contains `options.adapter`, else the
/// one wgpu prefers for high performance.
pub(super) async fn choose_adapter(options: &GpuOptions) -> Result<wgpu::Adapter> {
    let instance = new_instance(options.backend);
    match &options.adapter {
        Some(want) => {
            let needle = want.to_lowercase();
            let adapters = instance
                .enumerate_adapters(options.backend.backends())
                .await;
            let present: Vec<String> = adapters
                .iter()
                .map(|a| {
                    let info = a.get_info();
                    format!(
                        "`{}` ({:?}, {:?})",
                        info.name, info.backend, info.device_type
                    )
                })
                .collect();
            match adapters
                .into_iter()
                .find(|a| a.get_info().name.to_lowercase().contains(&needle))
            {
                Some(a) => Ok(a),
                None if present.is_empty() => Err(Error::NoAdapter {
                    backend: options.backend.name().into(),
                    adapter: format!(", adapter name containing `{want}`"),
                }),
                None => Err(Error::NoMatchingAdapter(format!(
                    "no adapter's name contains `{want}` (backend {}); the adapters present: \
                     {}; name one of them (--adapter, WEBGPU_AMP_ADAPTER) or leave the filter \
                     out",
                    options.backend.name(),
                    present.join(", ")
                ))),
            }
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
            }),
    }
}
