//! The convolutions on tensor cores (`shaders/conv_coop.wgsl`): the same implicit GEMMs as
//! the SIMT kernels, laid out with the output's contiguous dimension as the GEMM's columns,
//! for native f16 inputs where tensor cores are used, on the matmul's tile loop and its tiles
//! from the adapter's kernel table (128 wide where both sides of the GEMM allow).

use super::gemm::{PIXEL_GEMM, Params, WEIGHT_GEMM, bind};
use super::shape::Dims;
use crate::dtype::Storage;
use crate::gpu::{Arg, GpuContext, KernelDesc, TensorCoreConfig};
use crate::ops::bodies::{ConvBody, conv as conv_body};
use crate::ops::matmul::{CoopGemm, table_tiles};
use crate::shader::{ShaderDecl, Variant};
use crate::tensor::Tensor;

/// The tensor-core bodies: every GEMM, every tile of the class tables on both fragment shapes
/// (on subgroups of 32; other fixed sizes change only the workgroup size), kernel sizes 1, 3
/// and 5, bias or dw in f16 or f32.
pub static COOP_SHADER: ShaderDecl = ShaderDecl {
    name: "conv_coop",
    source: include_str!("../../../shaders/conv_coop.wgsl"),
    structs: &[Params::WGSL],
    consts: &[],
    variants: |shader| {
        let mut v = Vec::new();
        for k in [1, 3, 5] {
            for kind in [Kind::Forward, Kind::InputGrad, Kind::WeightGrad] {
                for (config, tile) in table_tiles() {
                    for aux in [Storage::F16, Storage::F32] {
                        let gemm = CoopGemm {
                            config,
                            tile,
                            a_krows: false,
                            b_krows: kind != Kind::WeightGrad,
                            sg_barrier: aux == Storage::F32,
                            direct: false,
                        };
                        let consts = consts(kind, (k, k), &gemm);
                        v.push(Variant::new(shader, &storages(kind, aux), &consts)?);
                    }
                }
            }
        }
        Ok(v)
    },
};

/// Which GEMM (`KIND` in the shader).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Forward = 0,
    InputGrad = 1,
    WeightGrad = 2,
}

/// The tensor-core configuration when a convolution with these input storages runs on it
/// (the resolver's choice, `ops::bodies`).
pub(super) fn config(ctx: &GpuContext, inputs: &[Storage]) -> Option<TensorCoreConfig> {
    (conv_body(&ctx.caps, inputs) == ConvBody::Coop)
        .then(|| ctx.caps.tensor_cores.config())
        .flatten()
}

/// The tile loop of a `kind` GEMM of `rows` × `cols` here: the table's tile for that size.
pub(super) fn gemm(
    ctx: &GpuContext,
    config: TensorCoreConfig,
    kind: Kind,
    rows: usize,
    cols: usize,
) -> CoopGemm {
    let clamp = |v: usize| v.min(u32::MAX as usize) as u32;
    let tiles = ctx.caps.kernels.table.coop(config.edge);
    CoopGemm {
        config,
        tile: tiles.pick_conv(clamp(rows), clamp(cols)),
        a_krows: false,
        b_krows: kind != Kind::WeightGrad,
        sg_barrier: ctx.caps.subgroup_barrier,
        direct: false,
    }
}

/// The shader constants of one cooperative convolution.
fn consts(kind: Kind, (kh, kw): (usize, usize), gemm: &CoopGemm) -> Vec<(&'static str, String)> {
    let mut c = vec![
        ("KIND", format!("{}u", kind as u32)),
        ("KH", kh.to_string()),
        ("KW", kw.to_string()),
    ];
    c.extend(gemm.consts());
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

/// Placeholders for the writable bindings a kind never touches (the other kinds' output and
/// the split-K partial sums): in `out`'s storage and f32, as the declared variants bind them.
/// Its own output cannot stand in: WebGPU forbids two writable bindings of one buffer in a
/// dispatch, and the kernel builder refuses them on every backend (`gpu::kernel`).
pub(super) fn untouched(ctx: &GpuContext, out: Storage) -> (Tensor, Tensor) {
    let label = "conv_coop untouched output";
    (
        Tensor::zeros_labelled(ctx, label, &[2], out),
        Tensor::zeros_labelled(ctx, label, &[2], Storage::F32),
    )
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

/// The kernel of a GEMM of `kind` on the tile loop `gemm`.
pub(super) fn desc(gemm: &CoopGemm, kind: Kind, d: &Dims) -> KernelDesc {
    let mut desc = KernelDesc::new(&COOP_SHADER, "conv_coop");
    desc.consts = consts(kind, (d.kh, d.kw), gemm);
    desc
}
