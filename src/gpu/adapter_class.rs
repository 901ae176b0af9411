//! Which family of adapter this is (NVIDIA, AMD, Apple, Intel, CPU, other), from what the
//! adapter says about itself: the key of the kernel tables (`gpu::kernel_table`).

/// Which family of adapter a table is for, from what the adapter says about itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AdapterClass {
    Nvidia,
    Amd,
    Apple,
    Intel,
    /// Software adapters (lavapipe, llvmpipe, SwiftShader, WARP).
    Cpu,
    /// Any other GPU (ARM, Qualcomm, ...): conservative shapes within WebGPU's default limits.
    Other,
}

impl AdapterClass {
    pub const ALL: [AdapterClass; 6] = [
        Self::Nvidia,
        Self::Amd,
        Self::Apple,
        Self::Intel,
        Self::Cpu,
        Self::Other,
    ];

    /// The class of an adapter: a CPU adapter by its type, GPUs by PCI vendor id, Apple also
    /// by name (Metal reports no vendor id).
    pub fn of(info: &wgpu::AdapterInfo) -> Self {
        if info.device_type == wgpu::DeviceType::Cpu {
            return Self::Cpu;
        }
        let name = info.name.to_ascii_lowercase();
        match info.vendor {
            0x10de => Self::Nvidia,
            0x1002 | 0x1022 => Self::Amd,
            0x106b => Self::Apple,
            0x8086 => Self::Intel,
            _ if name.starts_with("apple") => Self::Apple,
            _ if name.contains("nvidia") || name.contains("geforce") => Self::Nvidia,
            _ if name.contains("radeon") || name.contains("amd") => Self::Amd,
            _ if name.contains("intel") => Self::Intel,
            _ => Self::Other,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Nvidia => "nvidia",
            Self::Amd => "amd",
            Self::Apple => "apple",
            Self::Intel => "intel",
            Self::Cpu => "cpu",
            Self::Other => "other",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(name: &str, vendor: u32, device_type: wgpu::DeviceType) -> wgpu::AdapterInfo {
        wgpu::AdapterInfo {
            name: name.into(),
            vendor,
            device: 0,
            device_type,
            driver: String::new(),
            driver_info: String::new(),
            backend: wgpu::Backend::Vulkan,
            device_pci_bus_id: String::new(),
            subgroup_min_size: 32,
            subgroup_max_size: 32,
            transient_saves_memory: None,
            limit_bucket: None,
        }
    }

    #[test]
    fn classes_come_from_vendor_ids_names_and_the_device_type() {
        use wgpu::DeviceType::{Cpu, DiscreteGpu, IntegratedGpu};
        let class = |n, v, t| AdapterClass::of(&info(n, v, t));
        assert_eq!(
            class("NVIDIA H100", 0x10de, DiscreteGpu),
            AdapterClass::Nvidia
        );
        assert_eq!(class("Radeon", 0x1002, DiscreteGpu), AdapterClass::Amd);
        assert_eq!(class("Apple M2 Max", 0, IntegratedGpu), AdapterClass::Apple);
        assert_eq!(class("Intel Arc", 0x8086, DiscreteGpu), AdapterClass::Intel);
        assert_eq!(class("llvmpipe", 0x10005, Cpu), AdapterClass::Cpu);
        assert_eq!(
            class("Mali-G710", 0x13b5, IntegratedGpu),
            AdapterClass::Other
        );
    }
}
