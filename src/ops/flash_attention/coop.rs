//! The fused attention on tensor cores: `shaders/flash_coop_forward.wgsl`,
//! `shaders/flash_coop_backward.wgsl` (dk, dv) and `shaders/flash_coop_dq.wgsl` over
//! `shaders/include/flash_coop.wgsl`. The SIMT bodies' algorithm with the products Q·Kᵀ, P·V
//! (forward), dO·Vᵀ, Pᵀ·dO, dSᵀ·Q and dS·K (backward) on cooperative-matrix fragments, f16 in
//! and f32 accumulated; softmax, masks, dropout and the row statistics stay f32. It runs for
//! native f16 storage where tensor cores are used ([`uses_tensor_cores`], as the matmul and
//! the convolutions decide) and the device has subgroup barriers, on the context's fragment
//! shape and subgroup size, up to head size [`MAX_HEAD_SIZE`]; elsewhere the SIMT bodies run.
//! Block sizes come from the adapter's workgroup memory ([`FlashCoopConfig`],
//! `coop_layout.rs`).

use super::coop_layout::{Layout, Pass};
use super::params::{Params, shared_kv_const};
use crate::dtype::Storage;
use crate::error::{Error, Result};
use crate::gpu::{GpuContext, KernelDesc, TensorCoreConfig};
use crate::shader::{Grid, ShaderDecl};

pub(super) use super::coop_layout::Pass as CoopPass;
pub use super::coop_layout::{FlashCoopConfig, MAX_HEAD_SIZE};

/// The forward kernel on tensor cores.
pub static FORWARD_SHADER: ShaderDecl = ShaderDecl {
    name: "flash_coop_forward",
    source: include_str!("../../../shaders/flash_coop_forward.wgsl"),
    structs: &[Params::WGSL],
    consts: &[],
    variants: |shader| {
        Grid::new()
            .each_of(&["q", "k", "v", "y"], &[Storage::F16])
            .variants_with(shader, |_| specialisations(Pass::Forward))
    },
};

/// The dk/dv kernel on tensor cores (delta runs on the SIMT shader).
pub static BACKWARD_SHADER: ShaderDecl = ShaderDecl {
    name: "flash_coop_backward",
    source: include_str!("../../../shaders/flash_coop_backward.wgsl"),
    structs: &[Params::WGSL],
    consts: &[],
    variants: |shader| {
        Grid::new()
            .each_of(&["q", "k", "v", "dy", "dk", "dv"], &[Storage::F16])
            .variants_with(shader, |_| specialisations(Pass::KeyGrads))
    },
};

/// The dq kernel on tensor cores.
pub static DQ_SHADER: ShaderDecl = ShaderDecl {
    name: "flash_coop_dq",
    source: include_str!("../../../shaders/flash_coop_dq.wgsl"),
    structs: &[Params::WGSL],
    consts: &[],
    variants: |shader| {
        Grid::new()
            .each_of(&["q", "k", "v", "dy", "dq"], &[Storage::F16])
            .variants_with(shader, |_| specialisations(Pass::QueryGrads))
    },
};

/// The layout of `pass` here, or why the tensor-core body cannot run (it is only ever forced
/// onto such a context; `Auto` never picks it there).
pub(super) fn layout(
    ctx: &GpuContext,
    op: &'static str,
    pass: Pass,
    config: Option<FlashCoopConfig>,
    storages: &[Storage],
    hs: usize,
) -> Result<Layout> {
    let Some(tc) = ctx.caps.tensor_cores.config() else {
        return Err(Error::Unsupported(format!(
            "{op}: the tensor-core body needs tensor cores; on `{}` they are {}",
            ctx.report.name,
            ctx.caps.tensor_cores.describe()
        )));
    };
    if let Some(s) = storages.iter().find(|&&s| s != Storage::F16) {
        return Err(Error::Unsupported(format!(
            "{op}: the tensor-core body takes native f16 storage, got {}",
            s.name()
        )));
    }
    if !ctx.caps.subgroup_barrier {
        return Err(Error::Unsupported(format!(
            "{op}: the tensor-core body needs subgroup barriers, which `{}` lacks",
            ctx.report.name
        )));
    }
    let config = config.unwrap_or_else(|| FlashCoopConfig::for_adapter(&ctx.caps));
    Layout::new(tc, config, pass, hs).ok_or_else(|| {
        Error::Unsupported(format!(
            "{op}: the tensor-core body takes head sizes up to {MAX_HEAD_SIZE} on fragments \
             with at least as many elements as a subgroup has lanes, within {} bytes of \
             workgroup memory; got head size {hs} on {}",
            config.workgroup_bytes,
            tc.describe()
        ))
    })
}

/// A tensor-core entry's kernel description (dk/dv's says whether they are one tensor).
pub(super) fn desc(
    shader: &'static ShaderDecl,
    entry: &'static str,
    layout: &Layout,
    shared_kv: Option<bool>,
) -> KernelDesc {
    let mut desc = KernelDesc::new(shader, entry);
    desc.consts = layout.consts();
    desc.consts.extend(shared_kv.map(shared_kv_const));
    // Every index is in range (built without wgpu's runtime checks, natively): workgroup
    // memory by the layout the shaders' const_asserts check, the tensors by `plan`'s extents
    // with every row below T and every channel below HS (tests/flash_attention_coop.rs runs
    // them between guard bands). Unclamped, the staging stores merge into 8-byte ones.
    desc.trusted = true;
    desc
}

/// The variants the portability tests check: both fragment shapes on subgroups of 32 (and
/// 8x8 on subgroups of 8, Mesa 26's lavapipe; 16x16 laid out for 64 lanes that may run at 32,
/// RDNA3), at the head sizes of gpt-tiny (16), gpt-char
/// (64) and an odd one (5), with NVIDIA's 48 KiB, the 32 KiB of Apple and lavapipe and the
/// least a tensor-core adapter has, subgroup barriers on and off; dk and dv one tensor or two.
fn specialisations(pass: Pass) -> Vec<Vec<(&'static str, String)>> {
    let shared: &[Option<bool>] = match pass {
        Pass::KeyGrads => &[Some(true), Some(false)],
        _ => &[None],
    };
    let mut v: Vec<Vec<(&'static str, String)>> = Vec::new();
    for (edge, subgroup, subgroup_min) in [(8, 32, 32), (16, 32, 32), (8, 8, 8), (16, 64, 32)] {
        let tc = TensorCoreConfig {
            edge,
            subgroup,
            subgroup_min,
            forced: false,
        };
        for hs in [5, 16, 64] {
            for bytes in [48 * 1024, 32 * 1024, crate::gpu::COOP_MIN_WORKGROUP_BYTES] {
                for subgroup_barriers in [true, false] {
                    let config = FlashCoopConfig {
                        workgroup_bytes: bytes,
                        subgroup_barriers,
                    };
                    let layout = Layout::new(tc, config, pass, hs).expect("a layout");
                    for s in shared {
                        let mut consts = layout.consts();
                        consts.extend(s.map(shared_kv_const));
                        if !v.contains(&consts) {
                            v.push(consts);
                        }
                    }
                }
            }
        }
    }
    v
}
