//! Tensor cores from WGSL: whether an adapter's cooperative matrices (wgpu's experimental
//! `EXPERIMENTAL_COOPERATIVE_MATRIX`: Vulkan `VK_KHR_cooperative_matrix`, Metal simdgroup
//! matrices) run the f16 matmuls and convolutions (`shaders/matmul_coop.wgsl`,
//! `shaders/conv_coop.wgsl`), on which fragment shape, and why not when they do not. The
//! choice is made once per adapter, before the device is created, because the feature must be
//! requested (with experimental features enabled) at device creation.

use crate::error::{Error, Result};

/// What `--tensor-cores` (or `WEBGPU_AMP_TENSOR_CORES`) asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TensorCoreChoice {
    /// GPUs that list an f16 configuration use them; CPU adapters keep the SIMT bodies.
    #[default]
    Auto,
    /// Every adapter that lists an f16 configuration, CPU adapters included (how CI proves
    /// the kernels on Mesa 26's lavapipe); anywhere else, creating the device fails. With a
    /// fragment edge (`on:8x8`, `on:16x16`), that shape whatever the adapter lists (tests).
    On(Option<u32>),
    /// Never.
    Off,
}

impl TensorCoreChoice {
    pub fn parse(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "auto" | "" => Ok(Self::Auto),
            "on" => Ok(Self::On(None)),
            "on:8x8" => Ok(Self::On(Some(8))),
            "on:16x16" => Ok(Self::On(Some(16))),
            "off" => Ok(Self::Off),
            other => Err(Error::InvalidArgument(format!(
                "unknown tensor-core setting `{other}` (expected auto, on, off, on:8x8 or on:16x16)"
            ))),
        }
    }

    pub fn name(self) -> String {
        match self {
            Self::Auto => "auto".into(),
            Self::On(None) => "on".into(),
            Self::On(Some(e)) => format!("on:{e}x{e}"),
            Self::Off => "off".into(),
        }
    }
}

/// The cooperative-matrix configuration the f16 kernels run on: square fragments of f16
/// inputs accumulated in f32, on subgroups of a fixed size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TensorCoreConfig {
    /// Fragment edge: 16 (16x16x16, NVIDIA) or 8 (8x8x8, Apple, Mesa 26's lavapipe).
    pub edge: u32,
    /// The subgroup size the kernels are laid out for: the adapter's largest (a workgroup is
    /// four subgroups of it). Where the size varies (AMD RDNA: 32..64) the driver may run
    /// smaller subgroups; the kernels stay correct there (`shaders/include/coop_gemm.wgsl`,
    /// `shaders/include/flash_coop.wgsl`): the subgroups past the tile's only stage.
    pub subgroup: u32,
    /// The smallest subgroup size the driver may run them at: `subgroup` where the size is
    /// fixed. The attention's rows are split among lanes by it.
    pub subgroup_min: u32,
    /// The shape was forced (`on:8x8`, `on:16x16`) and the adapter does not list it.
    pub forced: bool,
}

impl TensorCoreConfig {
    /// Every subgroup has `subgroup` lanes (the adapter's size does not vary).
    pub fn subgroup_fixed(&self) -> bool {
        self.subgroup_min == self.subgroup
    }

    /// `16x16x16 f16*f16->f32, subgroup 32`.
    pub fn describe(&self) -> String {
        let e = self.edge;
        let forced = if self.forced {
            " (forced: not in the adapter's list)"
        } else {
            ""
        };
        let varies = if self.subgroup_fixed() {
            ""
        } else {
            " (laid out for the largest of a varying size)"
        };
        format!(
            "{e}x{e}x{e} f16*f16->f32, subgroup {}{varies}{forced}",
            self.subgroup
        )
    }
}

/// Most workgroup memory any cooperative kernel stages through: NVIDIA's and AMD's 128×128
/// tiles of 16×16 fragments at BK 32 with both operands staged 128 rows of 32 + 8 halves (two
/// buffers of each, f16), and 4 subgroups' 16×16 f32 results (`gpu::kernel_table`). The shader
/// portability test checks every cooperative variant against it; an adapter runs the tiles
/// its limit holds.
pub const COOP_WORKGROUP_BYTES: u32 = 2 * 2 * (128 * 40 + 128 * 40) + 4 * 4 * 16 * 16;

/// The workgroup memory tensor cores need at least (22.5 KiB, what they needed before the
/// kernel tables): the attention's tensor-core layouts exist for every head size within it
/// (`ops::flash_attention::coop_layout`'s tests), and the smallest tables' GEMM tiles (the
/// `other` class's, within WebGPU's default 16 KiB) fit it.
pub const COOP_MIN_WORKGROUP_BYTES: u32 = 2 * (128 * 40 + 32 * 136) + 4 * 4 * 16 * 16;

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

    /// What this adapter does under `choice`, decided as [`TensorCores::choose`] does.
    pub fn of_adapter(adapter: &wgpu::Adapter, choice: TensorCoreChoice) -> Self {
        let info = adapter.get_info();
        let features = adapter.features();
        let props = if features.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX) {
            adapter.cooperative_matrix_properties()
        } else {
            Vec::new()
        };
        Self::choose(&info, features, &adapter.limits(), &props, choice)
    }

    /// The one-line error of `--tensor-cores on` where they cannot run, or Ok.
    pub fn require(&self, choice: TensorCoreChoice, adapter: &str) -> Result<()> {
        match (choice, self) {
            (TensorCoreChoice::On(_), TensorCores::NotUsed(why)) => {
                Err(Error::Unsupported(format!(
                    "tensor cores asked for ({}) but `{adapter}` cannot run them: {why}",
                    choice.name()
                )))
            }
            _ => Ok(()),
        }
    }

    /// The choice from what an adapter says about itself (separate from the adapter so the
    /// reasoning is tested on any machine).
    pub fn choose(
        info: &wgpu::AdapterInfo,
        features: wgpu::Features,
        limits: &wgpu::Limits,
        props: &[wgpu::CooperativeMatrixProperties],
        choice: TensorCoreChoice,
    ) -> Self {
        let not = |why: &str| TensorCores::NotUsed(why.to_string());
        let could = Self::could_run(info, features, limits, props, choice);
        match (choice, could) {
            (TensorCoreChoice::Off, _) => not("turned off (--tensor-cores off)"),
            // A CPU adapter is a correctness device: tensor cores only where asked for, and
            // the advice to ask only where they would run.
            (TensorCoreChoice::Auto, TensorCores::Used(_))
                if info.device_type == wgpu::DeviceType::Cpu =>
            {
                not("CPU adapter (--tensor-cores on runs them here)")
            }
            (TensorCoreChoice::Auto, TensorCores::NotUsed(why))
                if info.device_type == wgpu::DeviceType::Cpu =>
            {
                TensorCores::NotUsed(format!("CPU adapter, and {why}"))
            }
            (_, could) => could,
        }
    }

    /// What `choice` (other than off) would give on this adapter, CPU or not.
    fn could_run(
        info: &wgpu::AdapterInfo,
        features: wgpu::Features,
        limits: &wgpu::Limits,
        props: &[wgpu::CooperativeMatrixProperties],
        choice: TensorCoreChoice,
    ) -> Self {
        use wgpu::CooperativeScalarType as S;
        let not = |why: &str| TensorCores::NotUsed(why.to_string());
        if !features.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX) {
            return not("the adapter exposes no cooperative matrices");
        }
        if !features.contains(wgpu::Features::SHADER_F16 | wgpu::Features::SUBGROUP) {
            return not("cooperative matrices need shader-f16 and subgroups here");
        }
        let f16_to_f32 =
            |p: &&wgpu::CooperativeMatrixProperties| p.ab_type == S::F16 && p.cr_type == S::F32;
        let listed = |e: u32| {
            props
                .iter()
                .filter(f16_to_f32)
                .any(|p| (p.m_size, p.n_size, p.k_size) == (e, e, e))
        };
        let edge = match choice {
            TensorCoreChoice::On(Some(e)) if props.iter().any(|p| f16_to_f32(&p)) => Some(e),
            _ => [16, 8].into_iter().find(|&e| listed(e)),
        };
        let Some(edge) = edge else {
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
                "no 16x16x16 or 8x8x8 f16->f32 configuration (the adapter lists: {})",
                if listed.is_empty() {
                    "none".to_string()
                } else {
                    listed.join(", ")
                }
            ));
        };
        // wgpu 30 cannot require a subgroup size: the kernels are laid out for the largest
        // (what RADV gives a compute pipeline whose size may vary: 64 on RDNA3).
        let subgroup = info.subgroup_max_size;
        if subgroup == 0 || info.subgroup_min_size == 0 {
            return not("the adapter reports no subgroup size");
        }
        if 4 * subgroup > limits.max_compute_invocations_per_workgroup
            || COOP_MIN_WORKGROUP_BYTES > limits.max_compute_workgroup_storage_size
        {
            return not("workgroup limits too small for the cooperative kernels");
        }
        TensorCores::Used(TensorCoreConfig {
            edge,
            subgroup,
            subgroup_min: info.subgroup_min_size.min(subgroup),
            forced: !listed(edge),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wgpu::CooperativeScalarType as S;

    fn prop(e: (u32, u32, u32), ab: S, cr: S) -> wgpu::CooperativeMatrixProperties {
        wgpu::CooperativeMatrixProperties {
            m_size: e.0,
            n_size: e.1,
            k_size: e.2,
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

    use TensorCoreChoice::{Auto, Off, On};

    /// What the issue reports for an H100 on Vulkan, and for Mesa 26's lavapipe.
    fn h100() -> Vec<wgpu::CooperativeMatrixProperties> {
        vec![
            prop((16, 16, 16), S::F16, S::F32),
            prop((16, 8, 16), S::F16, S::F32),
            prop((16, 8, 8), S::F16, S::F32),
            prop((16, 16, 16), S::F16, S::F16),
        ]
    }
    fn lavapipe26() -> Vec<wgpu::CooperativeMatrixProperties> {
        vec![
            prop((8, 8, 8), S::F16, S::F32),
            prop((8, 8, 8), S::F16, S::F16),
        ]
    }

    fn why(tc: TensorCores) -> String {
        match tc {
            TensorCores::NotUsed(w) => w,
            TensorCores::Used(c) => panic!("unexpectedly used: {c:?}"),
        }
    }

    #[test]
    fn an_h100_like_adapter_uses_16x16x16_f16_to_f32() {
        let gpu = info(wgpu::DeviceType::DiscreteGpu, (32, 32));
        for choice in [Auto, On(None)] {
            let tc = TensorCores::choose(&gpu, COOP, &gpu_limits(), &h100(), choice);
            let c = tc.config().expect("tensor cores");
            assert_eq!(
                (c.edge, c.subgroup, c.subgroup_fixed(), c.forced),
                (16, 32, true, false)
            );
            assert_eq!(tc.describe(), "used: 16x16x16 f16*f16->f32, subgroup 32");
        }
        assert!(why(TensorCores::choose(&gpu, COOP, &gpu_limits(), &h100(), Off)).contains("off"));
    }

    #[test]
    fn a_cpu_adapter_uses_8x8_only_when_asked_and_shapes_can_be_forced() {
        let cpu = info(wgpu::DeviceType::Cpu, (8, 8));
        let limits = wgpu::Limits {
            max_compute_workgroup_storage_size: 32 * 1024,
            ..wgpu::Limits::default()
        };
        let props = lavapipe26();
        let auto = why(TensorCores::choose(&cpu, COOP, &limits, &props, Auto));
        assert!(
            auto.contains("CPU adapter") && auto.contains("--tensor-cores on"),
            "{auto}"
        );
        // Where `on` would fail (Mesa 22's lavapipe: no cooperative matrices), no advice to
        // use it, but why not.
        let none = why(TensorCores::choose(
            &cpu,
            wgpu::Features::empty(),
            &limits,
            &[],
            Auto,
        ));
        assert!(!none.contains("--tensor-cores on"), "{none}");
        assert!(
            none.contains("CPU adapter, and the adapter exposes no cooperative"),
            "{none}"
        );
        let on = TensorCores::choose(&cpu, COOP, &limits, &props, On(None));
        let c = on.config().expect("on");
        assert_eq!((c.edge, c.subgroup, c.forced), (8, 8, false));
        assert_eq!(on.require(On(None), "x").ok(), Some(()));
        let forced = TensorCores::choose(&cpu, COOP, &limits, &props, On(Some(16)));
        let c = forced.config().expect("forced");
        assert_eq!((c.edge, c.forced), (16, true));
        assert!(forced.describe().contains("16x16x16") && forced.describe().contains("forced"));
        // A forced shape still needs some f16 -> f32 configuration.
        let only_f16 = [prop((8, 8, 8), S::F16, S::F16)];
        let w = why(TensorCores::choose(
            &cpu,
            COOP,
            &limits,
            &only_f16,
            On(Some(8)),
        ));
        assert!(w.contains("8x8x8 F16->F16"), "{w}");
    }

    #[test]
    fn everything_else_says_why_not_and_on_fails_in_one_line() {
        let good = [prop((16, 16, 16), S::F16, S::F32)];
        let gpu = info(wgpu::DeviceType::DiscreteGpu, (32, 32));
        let limits = gpu_limits();
        let plain = wgpu::Features::SHADER_F16 | wgpu::Features::SUBGROUP;
        let no_coop = TensorCores::choose(&gpu, plain, &limits, &good, On(None));
        assert!(why(no_coop.clone()).contains("no cooperative"));
        let err = no_coop
            .require(On(None), "Some GPU")
            .unwrap_err()
            .to_string();
        assert!(err.contains("`Some GPU`") && err.contains("on"), "{err}");
        assert!(!err.contains('\n'), "{err}");
        assert_eq!(no_coop.require(Auto, "Some GPU").ok(), Some(()));
        let only_f32 = [prop((8, 8, 8), S::F32, S::F32)];
        let w = why(TensorCores::choose(&gpu, COOP, &limits, &only_f32, Auto));
        assert!(w.contains("8x8x8 F32->F32"), "{w}");
        let small = wgpu::Limits::default(); // 16 KiB of workgroup memory
        assert!(why(TensorCores::choose(&gpu, COOP, &small, &good, Auto)).contains("limits"));
    }

    /// RDNA3 on RADV: subgroups of 32 or 64, 16x16x16 f16 fragments. The kernels are laid out
    /// for 64 lanes and stay correct at 32.
    #[test]
    fn an_rdna3_like_adapter_uses_them_laid_out_for_its_largest_subgroup() {
        let amd = info(wgpu::DeviceType::DiscreteGpu, (32, 64));
        let limits = wgpu::Limits {
            max_compute_workgroup_storage_size: 64 * 1024,
            ..wgpu::Limits::default()
        };
        let good = [prop((16, 16, 16), S::F16, S::F32)];
        let tc = TensorCores::choose(&amd, COOP, &limits, &good, Auto);
        let c = tc.config().expect("tensor cores on RDNA3");
        assert_eq!((c.edge, c.subgroup, c.subgroup_min), (16, 64, 32));
        assert!(
            tc.describe()
                .contains("subgroup 64 (laid out for the largest"),
            "{}",
            tc.describe()
        );
        let none = info(wgpu::DeviceType::DiscreteGpu, (0, 0));
        assert!(
            why(TensorCores::choose(&none, COOP, &limits, &good, Auto))
                .contains("no subgroup size")
        );
    }

    #[test]
    fn choices_parse_and_name_themselves() {
        for s in ["auto", "on", "off", "on:8x8", "on:16x16"] {
            assert_eq!(TensorCoreChoice::parse(s).unwrap().name(), s);
        }
        assert_eq!(TensorCoreChoice::parse("ON:16X16").unwrap(), On(Some(16)));
        let e = TensorCoreChoice::parse("on:32x32").unwrap_err().to_string();
        assert!(e.contains("on:32x32") && e.contains("on:16x16"), "{e}");
    }
}
