//! The shared launch of every matmul: shape checks, the uniform block and the grid.

use super::coop::{CoopPlan, Product};
use super::epilogue::Epilogue;
use super::layout::{MatrixLayout, vector_ready};
use super::params::Params;
use super::tiling::{SHADER, Tiling};
use super::{MatmulKernel, MatmulOpts};
use crate::dtype::Storage;
use crate::error::{Error, Result};
use crate::gpu::{Arg, GpuContext, Kernel, KernelDesc, TensorCoreConfig, grid_1d};
use crate::tensor::Tensor;

fn dims2(what: &str, t: &Tensor) -> Result<(usize, usize)> {
    match *t.shape() {
        [r, c] => Ok((r, c)),
        _ => Err(Error::shape(
            "matmul",
            format!("{what} must be 2-D, got shape {:?}", t.shape()),
        )),
    }
}

/// Check shapes and return (M, N, K).
pub(super) fn check_shapes(
    a: &Tensor,
    b: &Tensor,
    c: &Tensor,
    opts: &MatmulOpts,
) -> Result<(u32, u32, u32)> {
    let (a0, a1) = dims2("a", a)?;
    let (b0, b1) = dims2("b", b)?;
    let (m, n) = dims2("c", c)?;
    let (am, ak) = if opts.trans_a { (a1, a0) } else { (a0, a1) };
    let (bk, bn) = if opts.trans_b { (b1, b0) } else { (b0, b1) };
    let t = |x: bool| if x { "ᵀ" } else { "" };
    if ak != bk || am != m || bn != n {
        return Err(Error::shape(
            "matmul",
            format!(
                "a{} {:?} · b{} {:?} does not give c {:?} (need a as [{m}, K] and b as [K, {n}] after transposes)",
                t(opts.trans_a),
                a.shape(),
                t(opts.trans_b),
                b.shape(),
                c.shape()
            ),
        ));
    }
    if let Some(bias) = opts.bias
        && bias.numel() != n
    {
        return Err(Error::shape(
            "matmul",
            format!(
                "bias {:?} must hold N = {n} elements (one per output column)",
                bias.shape()
            ),
        ));
    }
    // Flat indices are u32 in the shader.
    for (what, t) in [("a", a), ("b", b), ("c", c)] {
        if t.numel() > u32::MAX as usize {
            return Err(Error::shape(
                "matmul",
                format!("{what} {:?} has more than 2^32 elements", t.shape()),
            ));
        }
    }
    // One device uses one f16 storage; a native and a packed f16 tensor in one call is a bug.
    let mut storages = vec![a.storage(), b.storage(), c.storage()];
    storages.extend(opts.bias.map(|t| t.storage()));
    if storages.contains(&Storage::F16) && storages.contains(&Storage::F16Packed) {
        return Err(Error::shape(
            "matmul",
            format!("mixes native and packed f16 storages ({storages:?}); one context uses one"),
        ));
    }
    Ok((m as u32, n as u32, ak as u32))
}

/// The tensor-core configuration the cooperative body runs on here, or why it cannot run
/// (it is only ever forced onto such a context; `Auto` never picks it there).
fn coop_config(ctx: &GpuContext, a: Storage, b: Storage) -> Result<TensorCoreConfig> {
    let Some(config) = ctx.caps.tensor_cores.config() else {
        return Err(Error::Unsupported(format!(
            "the cooperative-matrix matmul needs tensor cores; on `{}` they are {}",
            ctx.report.name,
            ctx.caps.tensor_cores.describe()
        )));
    };
    if a != Storage::F16 || b != Storage::F16 {
        return Err(Error::Unsupported(format!(
            "the cooperative-matrix matmul takes native f16 inputs, got a {} and b {}",
            a.name(),
            b.name()
        )));
    }
    Ok(config)
}

/// One matrix operand as the shader indexes it: a tensor and where its matrices are.
pub(super) struct Operand<'t> {
    pub(super) tensor: &'t Tensor,
    pub(super) layout: MatrixLayout,
}

/// How one product is cut: the body's kernel, its output tile, and the split of K.
struct Shape {
    desc: KernelDesc,
    bm: u32,
    bn: u32,
    lanes: u32,
}

/// Splits of K for a product of `tiles` output tiles (1: none), and the depth of each, a
/// multiple of `align`: forced by the options (tests), else as the adapter's table says for
/// the tiled and cooperative bodies of one matrix. The direct body never splits (CPU adapters
/// already run one workgroup per core).
fn split_k(
    ctx: &GpuContext,
    opts: &MatmulOpts,
    body: MatmulKernel,
    (tiles, k, batches): (u32, u32, u32),
    align: u32,
) -> (u32, u32) {
    if batches != 1 || k == 0 || body == MatmulKernel::Direct {
        return (1, k);
    }
    match opts.split_k {
        Some(s) => {
            let len = k.div_ceil(s.max(1)).next_multiple_of(align);
            (k.div_ceil(len), len)
        }
        None => ctx.caps.kernels.table.split_k.plan(tiles, k, align),
    }
}

/// Launch the shared GEMM kernel over `batch` matrices (shapes and layouts already checked).
/// Column pairs of c are stored as whole words when every even column starts a word. With
/// split-K the kernel is two dispatches: the GEMM writing each split's partial sums to a
/// scratch buffer made here, then `matmul_split_reduce` adding them in split order through
/// the epilogue (no float atomics: the same bits every run).
#[allow(clippy::too_many_arguments)]
pub(super) fn launch(
    ctx: &GpuContext,
    a: Operand,
    b: Operand,
    c: Operand,
    (m, n, k): (u32, u32, u32),
    batch: [u32; 2],
    opts: &MatmulOpts,
    kernel: MatmulKernel,
) -> Result<Kernel> {
    let (sa, sb) = (a.tensor.storage(), b.tensor.storage());
    let body = kernel.resolve(ctx, sa, sb);
    let epilogue = Epilogue::new(opts, &c.layout);
    let table = &ctx.caps.kernels.table;
    let batches = batch[0] * batch[1];
    let trans = (opts.trans_a, opts.trans_b);
    let coop = match body {
        MatmulKernel::Coop => Some(coop_config(ctx, sa, sb)?),
        _ => None,
    };
    let tiling = Tiling::choose(body, sa, sb, table);
    // The output tile (to count tiles for split-K) and k alignment of the body.
    let (tile_m, tile_n, align) = match coop {
        Some(config) => {
            let t = table.coop(config.edge).pick(m, n);
            (t.bm(config.edge), t.bn(config.edge), t.bk)
        }
        None => (tiling.bm(), tiling.bn(), tiling.bk.max(1)),
    };
    let tiles = m.div_ceil(tile_m) * n.div_ceil(tile_n);
    let (splits, k_split) = split_k(ctx, opts, body, (tiles, k, batches), align);
    let split_out = splits > 1;
    let shape = match coop {
        Some(config) => {
            let product = Product {
                a: (a.tensor, a.layout),
                b: (b.tensor, b.layout),
                c: (c.tensor, c.layout),
                mnk: (m, n, k),
                trans,
                k_split,
                epilogue,
            };
            let sg_barrier = ctx.caps.subgroup_barrier;
            let plan = CoopPlan::new(table, config, sg_barrier, &product, split_out);
            Shape {
                desc: plan.desc(&epilogue, split_out),
                bm: plan.gemm.bm(),
                bn: plan.gemm.bn(),
                lanes: 0,
            }
        }
        None => {
            let mut tiling = tiling;
            let lanes = tiling.narrow_lanes(n);
            if lanes != 0 {
                tiling.entry = "matmul_direct_narrow";
            }
            let (bm, bn) = match lanes {
                0 => (tiling.bm(), tiling.bn()),
                lanes => (tiling.tm * (tiling.wg_x / lanes), lanes * tiling.tn),
            };
            let whole = |v: u32, t: u32| v > 0 && v.is_multiple_of(t);
            // Chunks of 8 elements: two 16-byte loads of f32, one of 16-bit values.
            let per_vector = 8;
            let aligned = whole(m, bm)
                && whole(n, bn)
                && whole(k, tiling.bk)
                && whole(k_split, tiling.bk)
                && vector_ready(a.tensor, &a.layout, per_vector)
                && vector_ready(b.tensor, &b.layout, per_vector);
            Shape {
                desc: tiling.desc(trans, aligned, &epilogue, split_out),
                bm,
                bn,
                lanes,
            }
        }
    };
    let m_tiles = m.div_ceil(shape.bm).max(1);
    let n_tiles = n.div_ceil(shape.bn);
    // Batches (or splits) walk the grid's z; past the per-dimension limit the rest folds
    // into y.
    let max = ctx.caps.max_compute_workgroups_per_dimension.max(1);
    let zs = batches.max(splits);
    let z_hi = zs.div_ceil(max).max(1);
    let z = zs.div_ceil(z_hi);
    let u = |v: usize| v as u32; // checked to fit by the callers
    let cl = c.layout;
    let stride = |l: &MatrixLayout, d: usize| {
        if batch[d] > 1 {
            u(l.batch_stride[d])
        } else {
            0
        }
    };
    let params = Params {
        m,
        n,
        k,
        k_split,
        a_off: u(a.layout.offset),
        a_ld: u(a.layout.ld),
        b_off: u(b.layout.offset),
        b_ld: u(b.layout.ld),
        c_off: u(cl.offset),
        c_ld: u(cl.ld),
        batch_inner: batch[1].max(1),
        batches,
        m_tiles,
        a_s0: stride(&a.layout, 0),
        a_s1: stride(&a.layout, 1),
        b_s0: stride(&b.layout, 0),
        b_s1: stride(&b.layout, 1),
        c_s0: stride(&cl, 0),
        c_s1: stride(&cl, 1),
        lanes: shape.lanes,
        splits,
        ..Default::default()
    };
    // Without a bias the shader never reads it, but the binding must exist: a two-word f32
    // placeholder stands in, so the variant is one the grid declares (bias in c's storage
    // or f32) and the browser's compiler has seen.
    let placeholder;
    let bias = match opts.bias {
        Some(bias) => bias,
        None => {
            placeholder = Tensor::zeros_labelled(ctx, "matmul no bias", &[2], Storage::F32);
            &placeholder
        }
    };
    let empty = m == 0 || n == 0 || batches == 0;
    let workgroups = if empty {
        [0, 0, 0]
    } else {
        [n_tiles, m_tiles * z_hi, z]
    };
    let partials = split_out.then(|| {
        let shape = [splits as usize, m as usize, n as usize];
        Tensor::zeros_labelled(ctx, "matmul split-K partial sums", &shape, Storage::F32)
    });
    let mut args = vec![
        ("params", Arg::Uniform(bytemuck::bytes_of(&params))),
        ("a", a.tensor.arg()),
        ("b", b.tensor.arg()),
        ("c", c.tensor.arg()),
        ("bias", bias.arg()),
    ];
    if let Some(p) = &partials {
        args.push(("partials", p.arg()));
    }
    let gemm = ctx.kernel(&shape.desc, &args, workgroups)?;
    if partials.is_none() {
        return Ok(gemm);
    }
    // One thread per column pair of c.
    let pairs = m as usize * n.div_ceil(2) as usize;
    let mut reduce = KernelDesc::new(&SHADER, "matmul_split_reduce");
    reduce.consts = Tiling::reduce_consts(&epilogue);
    let reduce = ctx.kernel(&reduce, &args, grid_1d(pairs, 64))?;
    Ok(gemm.then(reduce))
}

/// [`super::matmul_with`] without the check of a loaded kernel table: what the check itself
/// runs.
pub(crate) fn matmul_unchecked(
    ctx: &GpuContext,
    a: &Tensor,
    b: &Tensor,
    c: &Tensor,
    opts: MatmulOpts,
    kernel: MatmulKernel,
) -> Result<Kernel> {
    let (m, n, k) = check_shapes(a, b, c, &opts)?;
    let (mu, nu, ku) = (m as usize, n as usize, k as usize);
    // One contiguous matrix each: the same arithmetic as ever, only the index math is general.
    let stored = |trans: bool, rows: usize, cols: usize| {
        let (r, c) = if trans { (cols, rows) } else { (rows, cols) };
        MatrixLayout::contiguous(r, c)
    };
    launch(
        ctx,
        Operand {
            tensor: a,
            layout: stored(opts.trans_a, mu, ku),
        },
        Operand {
            tensor: b,
            layout: stored(opts.trans_b, ku, nu),
        },
        Operand {
            tensor: c,
            layout: MatrixLayout::contiguous(mu, nu),
        },
        (m, n, k),
        [1, 1],
        &opts,
        kernel,
    )
}
