//! Tensor cores from WGSL: whether an adapter's cooperative matrices (wgpu's experimental
//! `EXPERIMENTAL_COOPERATIVE_MATRIX`: Vulkan `VK_KHR_cooperative_matrix`, Metal simdgroup
//! matrices) offer the configuration `shaders/matmul_coop.wgsl` needs, and why not when they
//! do not. The choice is made once per adapter, before the device is created, because the
//! feature must be requested (with experimental features enabled) at device creation.

/// The cooperative-matrix configuration the f16 matmul runs on: 16×16×16 tiles of f16
/// inputs accumulated in f32, on subgroups of a fixed size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TensorCoreConfig {
    pub m: u32,
    pub n: u32,
    pub k: u32,
    /// Input type (`f16`) and accumulator type (`f32`).
    pub inputs: &'static str,
    pub accumulator: &'static str,
    /// The adapter's subgroup size (min = max); a workgroup is four subgroups.
    pub subgroup: u32,
}

impl TensorCoreConfig {
    /// `16x16x16 f16*f16->f32, subgroup 32`.
    pub fn describe(&self) -> String {
        format!(
            "{}x{}x{} {}*{}->{}, subgroup {}",
            self.m, self.n, self.k, self.inputs, self.inputs, self.accumulator, self.subgroup
        )
    }
}

/// Workgroup memory the cooperative kernel stages through: f16 tiles of 64×32 and 32×64,
/// and the 64×64 f32 results (`shaders/matmul_coop.wgsl`).
pub const COOP_WORKGROUP_BYTES: u32 = 2 * 64 * 32 * 2 + 4 * 64 * 64;

/// Whether tensor cores are used on an adapter: the configuration, or why not.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub enum TensorCores {
    Used(TensorCoreConfig),
    NotUsed(String),
}

impl TensorCores {
    pub fn config(&self) -> Option<TensorCoreConfig> {
        match self {
            TensorCores::Used(c) => Some(*c),
            TensorCores::NotUsed(_) => None,
        }
    }

    /// One line for `info`.
    pub fn describe(&self) -> String {
        match self {
            TensorCores::Used(c) => format!("used: {}", c.describe()),
            TensorCores::NotUsed(why) => format!("not used: {why}"),
        }
    }

    /// What this adapter reports, decided as [`TensorCores::choose`] does.
    pub fn of_adapter(adapter: &wgpu::Adapter) -> Self {
        let info = adapter.get_info();
        let features = adapter.features();
        let props = if features.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX) {
            adapter.cooperative_matrix_properties()
        } else {
            Vec::new()
        };
        Self::choose(&info, features, &adapter.limits(), &props)
    }

    /// The choice from what an adapter says about itself (separate from the adapter so the
    /// reasoning is tested on any machine).
    pub fn choose(
        info: &wgpu::AdapterInfo,
        features: wgpu::Features,
        limits: &wgpu::Limits,
        props: &[wgpu::CooperativeMatrixProperties],
    ) -> Self {
        use wgpu::CooperativeScalarType as S;
        let not = |why: &str| TensorCores::NotUsed(why.to_string());
        if info.device_type == wgpu::DeviceType::Cpu {
            return not("CPU adapter");
        }
        if !features.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX) {
            return not("the adapter exposes no cooperative matrices");
        }
        if !features.contains(wgpu::Features::SHADER_F16 | wgpu::Features::SUBGROUP) {
            return not("cooperative matrices need shader-f16 and subgroups here");
        }
        let wanted = props.iter().any(|p| {
            (p.m_size, p.n_size, p.k_size) == (16, 16, 16)
                && p.ab_type == S::F16
                && p.cr_type == S::F32
        });
        if !wanted {
            let listed: Vec<String> = props
                .iter()
                .map(|p| {
                    format!(
                        "{}x{}x{} {:?}->{:?}",
                        p.m_size, p.n_size, p.k_size, p.ab_type, p.cr_type
                    )
                })
                .collect();
            return TensorCores::NotUsed(format!(
                "no 16x16x16 f16->f32 configuration (the adapter lists: {})",
                if listed.is_empty() {
                    "none".to_string()
                } else {
                    listed.join(", ")
                }
            ));
        }
        let subgroup = info.subgroup_max_size;
        if info.subgroup_min_size != subgroup || subgroup == 0 {
            return TensorCores::NotUsed(format!(
                "subgroup size varies ({}..{}); the kernel needs a fixed one",
                info.subgroup_min_size, info.subgroup_max_size
            ));
        }
        if 4 * subgroup > limits.max_compute_invocations_per_workgroup
            || COOP_WORKGROUP_BYTES > limits.max_compute_workgroup_storage_size
        {
            return not("workgroup limits too small for the cooperative kernel");
        }
        TensorCores::Used(TensorCoreConfig {
            m: 16,
            n: 16,
            k: 16,
            inputs: "f16",
            accumulator: "f32",
            subgroup,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wgpu::CooperativeScalarType as S;

    fn prop(m: u32, n: u32, k: u32, ab: S, cr: S) -> wgpu::CooperativeMatrixProperties {
        wgpu::CooperativeMatrixProperties {
            m_size: m,
            n_size: n,
            k_size: k,
            ab_type: ab,
            cr_type: cr,
            saturating_accumulation: false,
        }
    }

    fn info(device_type: wgpu::DeviceType, sub: (u32, u32)) -> wgpu::AdapterInfo {
        wgpu::AdapterInfo {
            name: "test".into(),
            vendor: 0,
            device: 0,
            device_type,
            device_pci_bus_id: String::new(),
            driver: String::new(),
            driver_info: String::new(),
            backend: wgpu::Backend::Vulkan,
            subgroup_min_size: sub.0,
            subgroup_max_size: sub.1,
            transient_saves_memory: None,
            limit_bucket: None,
        }
    }

    /// An NVIDIA GPU's limits: 48 KiB of workgroup memory (WebGPU's default is 16 KiB).
    fn gpu_limits() -> wgpu::Limits {
        wgpu::Limits {
            max_compute_workgroup_storage_size: 48 * 1024,
            ..wgpu::Limits::default()
        }
    }

    const COOP: wgpu::Features = wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX
        .union(wgpu::Features::SHADER_F16)
        .union(wgpu::Features::SUBGROUP);

    #[test]
    fn an_h100_like_adapter_uses_16x16x16_f16_to_f32() {
        // What the issue reports for an H100 on Vulkan.
        let props = [
            prop(16, 16, 16, S::F16, S::F32),
            prop(16, 8, 16, S::F16, S::F32),
            prop(16, 8, 8, S::F16, S::F32),
            prop(16, 16, 16, S::F16, S::F16),
        ];
        let gpu = info(wgpu::DeviceType::DiscreteGpu, (32, 32));
        let tc = TensorCores::choose(&gpu, COOP, &gpu_limits(), &props);
        let c = tc.config().expect("tensor cores");
        assert_eq!((c.m, c.n, c.k, c.subgroup), (16, 16, 16, 32));
        assert_eq!(tc.describe(), "used: 16x16x16 f16*f16->f32, subgroup 32");
    }

    #[test]
    fn everything_else_says_why_not() {
        let good = [prop(16, 16, 16, S::F16, S::F32)];
        let gpu = info(wgpu::DeviceType::DiscreteGpu, (32, 32));
        let limits = gpu_limits();
        let why = |tc: TensorCores| match tc {
            TensorCores::NotUsed(w) => w,
            TensorCores::Used(c) => panic!("unexpectedly used: {c:?}"),
        };
        let cpu = info(wgpu::DeviceType::Cpu, (8, 8));
        assert!(why(TensorCores::choose(&cpu, COOP, &limits, &good)).contains("CPU"));
        let plain = wgpu::Features::SHADER_F16 | wgpu::Features::SUBGROUP;
        assert!(why(TensorCores::choose(&gpu, plain, &limits, &good)).contains("no cooperative"));
        let only_f32 = [prop(8, 8, 8, S::F32, S::F32)];
        let w = why(TensorCores::choose(&gpu, COOP, &limits, &only_f32));
        assert!(w.contains("8x8x8 F32->F32"), "{w}");
        let amd = info(wgpu::DeviceType::DiscreteGpu, (32, 64));
        assert!(why(TensorCores::choose(&amd, COOP, &limits, &good)).contains("varies"));
        let small = wgpu::Limits::default(); // 16 KiB of workgroup memory
        assert!(why(TensorCores::choose(&gpu, COOP, &small, &good)).contains("limits"));
    }
}
