//! The convolutions on tensor cores (`shaders/conv_coop.wgsl`): the same implicit GEMMs as
//! the SIMT kernels, laid out with the output's contiguous dimension as the GEMM's columns,
//! for native f16 inputs where tensor cores are used. Fragments of 8×8 take 4×4 per subgroup
//! and 16×16 take 2×2: 64×64 tiles either way.

use super::gemm::{PIXEL_GEMM, Params, WEIGHT_GEMM, bind};
use super::shape::Dims;
use crate::dtype::Storage;
use crate::gpu::{Arg, GpuContext, KernelDesc, TensorCoreConfig};
use crate::ops::matmul::{coop_consts, uses_tensor_cores};
use crate::shader::{ShaderDecl, Variant};
use crate::tensor::Tensor;

/// The tensor-core bodies: every GEMM, both fragment shapes (on subgroups of 32; other fixed
/// sizes change only the workgroup size), kernel sizes 1, 3 and 5, bias or dw in f16 or f32.
pub static COOP_SHADER: ShaderDecl = ShaderDecl {
    name: "conv_coop",
    source: include_str!("../../../shaders/conv_coop.wgsl"),
    structs: &[Params::WGSL],
    variants: |shader| {
        let mut v = Vec::new();
        for k in [1, 3, 5] {
            for kind in [Kind::Forward, Kind::InputGrad, Kind::WeightGrad] {
                for edge in [8, 16] {
                    for aux in [Storage::F16, Storage::F32] {
                        let consts = consts(kind, (k, k), 32, edge);
                        v.push(Variant::new(shader, &storages(kind, aux), &consts)?);
                    }
                }
            }
        }
        Ok(v)
    },
};
/// Output tile edge of every cooperative convolution.
pub(super) const TILE: usize = 64;

/// Which GEMM (`KIND` in the shader).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Forward = 0,
    InputGrad = 1,
    WeightGrad = 2,
}

/// The tensor-core configuration when a convolution with these input storages runs on it.
pub(super) fn config(ctx: &GpuContext, inputs: &[Storage]) -> Option<TensorCoreConfig> {
    uses_tensor_cores(&ctx.caps, inputs)
        .then(|| ctx.caps.tensor_cores.config())
        .flatten()
}

/// Fragments per subgroup along each side for a fragment edge (64×64 tiles).
fn frags(edge: u32) -> u32 {
    TILE as u32 / (2 * edge)
}

/// The shader constants of one cooperative convolution.
fn consts(
    kind: Kind,
    (kh, kw): (usize, usize),
    subgroup: u32,
    edge: u32,
) -> Vec<(&'static str, String)> {
    let mut c = vec![
        ("KIND", format!("{}u", kind as u32)),
        ("KH", kh.to_string()),
        ("KW", kw.to_string()),
    ];
    c.extend(coop_consts(subgroup, edge, frags(edge)));
    c
}

/// The bindings of a GEMM: the tensors of a forward or input-gradient GEMM, then those of a
/// weight-gradient one. The shader's one body reads every declared tensor in some KIND's
/// branch, so each is bound: a pixel GEMM's `src` stands in for x and dy (read) and its
/// `dst` for dw and partials (written, never touched); a weight GEMM's x stands in for src,
/// w and bias, and dw for dst.
pub(super) fn args<'a>(
    pixel: [&'a Tensor; 4],
    weight: [&'a Tensor; 4],
) -> Vec<(&'static str, Arg<'a>)> {
    let mut args = bind(PIXEL_GEMM, pixel);
    args.extend(bind(WEIGHT_GEMM, weight));
    args
}

/// The storages a cooperative kernel of `kind` binds, with bias (forward) or dw (weight
/// gradient) in `aux` (the variants the portability tests check).
fn storages(kind: Kind, aux: Storage) -> Vec<(&'static str, Storage)> {
    let f16 = Storage::F16;
    let (bias, out) = match kind {
        Kind::WeightGrad => (f16, aux),
        _ => (aux, f16),
    };
    [
        ("src", f16),
        ("w", f16),
        ("bias", bias),
        ("dst", out),
        ("x", f16),
        ("dy", f16),
        ("dw", out),
    ]
    .to_vec()
}

/// The kernel of a GEMM of `kind` on tensor cores configured as `config`.
pub(super) fn desc(config: TensorCoreConfig, kind: Kind, d: &Dims) -> KernelDesc {
    let mut desc = KernelDesc::new(&COOP_SHADER, "conv_coop");
    desc.consts = consts(kind, (d.kh, d.kw), config.subgroup, config.edge);
    desc
}
