//! Matrix multiply (`shaders/matmul.wgsl`): `c (+)= op(a) · op(b) (+ bias)`, f32 accumulation
//! for every storage. Linear layers use it for all three products:
//! forward `y = x · Wᵀ + bias` (`trans_b`), input gradient `dx = dy · W`, and weight
//! gradient `dW += dyᵀ · x` (`trans_a`, `accumulate`, into an f32 gradient).

use crate::dtype::Storage;
use crate::error::{Error, Result};
use crate::gpu::{Arg, GpuContext, Kernel, KernelDesc};
use crate::shader::Variant;
use crate::tensor::Tensor;

const SHADER: &str = "matmul";
const FLAG_ACCUMULATE: u32 = 1;
const FLAG_BIAS: u32 = 2;
const FLAG_PAIRS: u32 = 4;
/// Bits 3-4 of the flags: the product's rounding ([`super::round_code`]).
const ROUND_SHIFT: u32 = 3;

/// Options of [`matmul`]. `Default` is a plain `c = a · b`.
#[derive(Clone, Copy, Debug, Default)]
pub struct MatmulOpts<'a> {
    /// `a` is stored [K, M] and used transposed.
    pub trans_a: bool,
    /// `b` is stored [N, K] and used transposed.
    pub trans_b: bool,
    /// Add the product to `c`'s existing values (gradient accumulation).
    pub accumulate: bool,
    /// A [N] vector added to every row of the result.
    pub bias: Option<&'a Tensor>,
    /// Round the result to this dtype before storing or accumulating it (a weight gradient
    /// computed in the forward's low dtype, landing in f32; see [`super::round_code`]).
    pub round_to: Option<crate::dtype::DType>,
}

/// Which kernel body runs. [`MatmulKernel::Auto`] picks by adapter type; tests and the
/// benchmark force the others so both are checked on any machine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MatmulKernel {
    #[default]
    Auto,
    /// Workgroup-memory tiles with register blocking (real GPUs).
    Tiled,
    /// Register blocking straight from the buffers, no barriers (CPU adapters).
    Direct,
}

impl MatmulKernel {
    pub fn name(self) -> &'static str {
        match self {
            MatmulKernel::Auto => "auto",
            MatmulKernel::Tiled => "tiled",
            MatmulKernel::Direct => "direct",
        }
    }

    /// The kernel `Auto` resolves to on this context: barriers cost a context switch on CPU
    /// adapters (lavapipe, llvmpipe), so those run the direct kernel.
    pub fn resolve(self, ctx: &GpuContext) -> MatmulKernel {
        match self {
            MatmulKernel::Auto if ctx.device_type() == wgpu::DeviceType::Cpu => {
                MatmulKernel::Direct
            }
            MatmulKernel::Auto => MatmulKernel::Tiled,
            k => k,
        }
    }
}

/// Launch shape of one kernel body for one input storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Tiling {
    entry: &'static str,
    wg_x: u32,
    wg_y: u32,
    tm: u32,
    tn: u32,
    bk: u32,
}

impl Tiling {
    /// Tile shapes per kernel and input storage. Tiled: 16x16 threads with 8x8 outputs each
    /// (128x128 workgroup tiles, 8 KiB of f32 tiles at BK 8); 16-bit inputs stage deeper k
    /// tiles (16 KiB), as their global reads are half the bytes. Direct: one row of 64 threads
    /// per workgroup, 8 rows x 4 columns each: the 8 reads of a are shared by the workgroup
    /// (scalar loads on CPU drivers) and feed 32 FMAs per 4 gathers of b. Measured on
    /// lavapipe at 256³: 64x8x4 beat 32x8x2, 64x16x2, 64x8x8, 128x8x4, 32x8x4, 64x4x8 and
    /// 16x8x4 (8-wide blocks spill).
    fn choose(kernel: MatmulKernel, a: Storage, b: Storage) -> Tiling {
        let sixteen_bit = a != Storage::F32 && b != Storage::F32;
        match kernel {
            MatmulKernel::Direct => Tiling {
                entry: "matmul_direct",
                wg_x: 64,
                wg_y: 1,
                tm: 8,
                tn: 4,
                bk: 1,
            },
            _ => Tiling {
                entry: "matmul_tiled",
                wg_x: 16,
                wg_y: 16,
                tm: 8,
                tn: 8,
                bk: if sixteen_bit { 16 } else { 8 },
            },
        }
    }

    /// Threads per row group when the direct body would leave most threads on clamped
    /// duplicate columns (N at most half its BN), else 0. The narrow body splits the
    /// workgroup's row of threads into groups of the fewest threads (a power of two) whose TN
    /// columns each cover N, so a product N = 16 wide (an attention head) keeps 16 times
    /// fewer threads idle. Same FMA chain per output: same bits.
    fn narrow_lanes(&self, n: u32) -> u32 {
        if self.entry != "matmul_direct" || n > self.bn() / 2 {
            return 0;
        }
        n.div_ceil(self.tn).next_power_of_two()
    }

    fn bm(&self) -> u32 {
        self.wg_y * self.tm
    }

    fn bn(&self) -> u32 {
        self.wg_x * self.tn
    }

    fn consts(&self, trans_a: bool, trans_b: bool) -> Vec<(&'static str, String)> {
        vec![
            ("TRANS_A", trans_a.to_string()),
            ("TRANS_B", trans_b.to_string()),
            ("WG_X", format!("{}u", self.wg_x)),
            ("WG_Y", format!("{}u", self.wg_y)),
            ("TM", format!("{}u", self.tm)),
            ("TN", format!("{}u", self.tn)),
            ("BK", format!("{}u", self.bk)),
        ]
    }

    fn desc(&self, trans_a: bool, trans_b: bool) -> KernelDesc {
        let mut d = KernelDesc::new(SHADER, self.entry);
        d.consts = self.consts(trans_a, trans_b);
        d
    }
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    m: u32,
    n: u32,
    k: u32,
    flags: u32,
    a_off: u32,
    a_ld: u32,
    b_off: u32,
    b_ld: u32,
    c_off: u32,
    c_ld: u32,
    batch_inner: u32,
    batches: u32,
    m_tiles: u32,
    a_s0: u32,
    a_s1: u32,
    b_s0: u32,
    b_s1: u32,
    c_s0: u32,
    c_s1: u32,
    /// `matmul_direct_narrow`: threads per row group (a power of two); 0 for other bodies.
    lanes: u32,
}

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
fn check_shapes(a: &Tensor, b: &Tensor, c: &Tensor, opts: &MatmulOpts) -> Result<(u32, u32, u32)> {
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

/// One matrix operand as the shader indexes it: a tensor and where its matrices are.
struct Operand<'t> {
    tensor: &'t Tensor,
    layout: MatrixLayout,
}

/// Launch the shared GEMM kernel over `batch` matrices (shapes and layouts already checked).
/// Column pairs of c are stored as whole words when every even column starts a word.
#[allow(clippy::too_many_arguments)]
fn launch(
    ctx: &GpuContext,
    a: Operand,
    b: Operand,
    c: Operand,
    (m, n, k): (u32, u32, u32),
    batch: [u32; 2],
    opts: &MatmulOpts,
    kernel: MatmulKernel,
) -> Result<Kernel> {
    let mut tiling = Tiling::choose(kernel.resolve(ctx), a.tensor.storage(), b.tensor.storage());
    let lanes = tiling.narrow_lanes(n);
    if lanes != 0 {
        tiling.entry = "matmul_direct_narrow";
    }
    let mut flags = 0;
    if opts.accumulate {
        flags |= FLAG_ACCUMULATE;
    }
    if opts.bias.is_some() {
        flags |= FLAG_BIAS;
    }
    let cl = c.layout;
    let even = |v: usize| v.is_multiple_of(2);
    if even(cl.offset) && even(cl.ld) && cl.batch_stride.into_iter().all(even) {
        flags |= FLAG_PAIRS;
    }
    flags |= super::round_code(opts.round_to) << ROUND_SHIFT;
    let batches = batch[0] * batch[1];
    let (bm, bn) = match lanes {
        0 => (tiling.bm(), tiling.bn()),
        lanes => (tiling.tm * (tiling.wg_x / lanes), lanes * tiling.tn),
    };
    let m_tiles = m.div_ceil(bm).max(1);
    let n_tiles = n.div_ceil(bn);
    // Batches walk the grid's z; past the per-dimension limit the rest folds into y.
    let max = ctx.caps.max_compute_workgroups_per_dimension.max(1);
    let z_hi = batches.div_ceil(max).max(1);
    let z = batches.div_ceil(z_hi);
    let u = |v: usize| v as u32; // checked to fit by the callers
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
        flags,
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
        lanes,
    };
    // Without a bias the shader never reads it, but the binding must exist: `a` stands in
    // (read-only twice is allowed), which keeps the set of compiled variants small.
    let bias = opts.bias.unwrap_or(a.tensor);
    let workgroups = [n_tiles, m_tiles * z_hi, z];
    let workgroups = if m == 0 || n == 0 || batches == 0 {
        [0, 0, 0]
    } else {
        workgroups
    };
    ctx.kernel(
        &tiling.desc(opts.trans_a, opts.trans_b),
        &[
            ("params", Arg::Uniform(bytemuck::bytes_of(&params))),
            ("a", a.tensor.arg()),
            ("b", b.tensor.arg()),
            ("c", c.tensor.arg()),
            ("bias", bias.arg()),
        ],
        workgroups,
    )
}

/// `c[M,N] (+)= op(a) · op(b) (+ bias[N])`, accumulated in f32. `a` is [M,K] ([K,M] with
/// `trans_a`), `b` is [K,N] ([N,K] with `trans_b`). Storages of a, b, c and bias may all
/// differ (f16 inputs with an f32 output for weight gradients). K = 0 gives `c = bias` (or 0),
/// or leaves `c` unchanged plus bias when accumulating.
pub fn matmul(
    ctx: &GpuContext,
    a: &Tensor,
    b: &Tensor,
    c: &Tensor,
    opts: MatmulOpts,
) -> Result<Kernel> {
    matmul_with(ctx, a, b, c, opts, MatmulKernel::Auto)
}

/// [`matmul`] with a chosen kernel body (tests run both on any adapter; the bench compares).
pub fn matmul_with(
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

// ---- strided batched matmul (attention) ---------------------------------------------------

/// Where a batch of matrices lives in a tensor's buffer (in elements). Matrix z = (z0, z1)
/// of the batch starts at `offset + z0 * batch_stride[0] + z1 * batch_stride[1]`, and its
/// rows are `ld` elements apart. The tensor's own shape is ignored: only its element count
/// (for the bounds check) and storage matter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatrixLayout {
    pub offset: usize,
    /// Row stride of the stored matrix (for `trans_a` the stored matrix is [K, M]).
    pub ld: usize,
    pub batch_stride: [usize; 2],
}

impl MatrixLayout {
    /// One dense `rows x cols` matrix at offset 0, the same for every batch entry
    /// (batch strides 0: broadcast). Give strides with [`MatrixLayout::with_batch_stride`],
    /// or use [`MatrixLayout::stacked`] for a dense [b0, b1, rows, cols] tensor.
    pub fn contiguous(rows: usize, cols: usize) -> Self {
        let _ = rows;
        MatrixLayout {
            offset: 0,
            ld: cols,
            batch_stride: [0, 0],
        }
    }

    /// Dense matrices stacked as a [batch[0], batch[1], rows, cols] tensor.
    pub fn stacked(rows: usize, cols: usize, batch: [usize; 2]) -> Self {
        MatrixLayout {
            offset: 0,
            ld: cols,
            batch_stride: [batch[1] * rows * cols, rows * cols],
        }
    }

    pub fn with_offset(self, offset: usize) -> Self {
        MatrixLayout { offset, ..self }
    }

    pub fn with_batch_stride(self, batch_stride: [usize; 2]) -> Self {
        MatrixLayout {
            batch_stride,
            ..self
        }
    }
}

/// Check one operand's layout: the stored `rows x cols` matrices of every batch entry lie
/// inside the tensor, rows do not overlap, and every index fits the shader's u32 math.
fn check_layout(
    what: &str,
    t: &Tensor,
    l: &MatrixLayout,
    (rows, cols): (usize, usize),
    batch: [usize; 2],
) -> Result<()> {
    let err = |msg: String| Err(Error::shape("batched_matmul", format!("{what}: {msg}")));
    if t.numel() > u32::MAX as usize {
        return err(format!("{:?} has more than 2^32 elements", t.shape()));
    }
    if rows > 1 && l.ld < cols {
        return err(format!(
            "row stride ld = {} is less than the {cols} columns of its stored [{rows}, {cols}] matrix",
            l.ld
        ));
    }
    if rows == 0 || cols == 0 || batch.contains(&0) {
        return Ok(()); // nothing of it is read or written
    }
    // Largest element touched, in u128 so absurd strides cannot wrap.
    let last = l.offset as u128
        + (batch[0] as u128 - 1) * l.batch_stride[0] as u128
        + (batch[1] as u128 - 1) * l.batch_stride[1] as u128
        + (rows as u128 - 1) * l.ld as u128
        + cols as u128
        - 1;
    if last >= t.numel() as u128 {
        return err(format!(
            "layout {l:?} of {} [{rows}, {cols}] matrices (batch {batch:?}) reaches element {last}, \
             past the tensor's {} elements ({:?})",
            batch[0] * batch[1],
            t.numel(),
            t.shape()
        ));
    }
    Ok(())
}

/// True when no two elements of the batched output matrices share an address: with the
/// (stride, extent) pairs of columns, rows and both batch dimensions sorted by stride, each
/// stride must pass the span of everything below it (a mixed-radix layout). This accepts
/// the interleaved attention layouts (heads side by side in a row) and rejects any overlap.
fn outputs_disjoint(l: &MatrixLayout, (rows, cols): (usize, usize), batch: [usize; 2]) -> bool {
    if rows == 0 || cols == 0 || batch.contains(&0) {
        return true; // nothing is written
    }
    let mut dims: Vec<(usize, usize)> = [
        (1, cols),
        (l.ld, rows),
        (l.batch_stride[0], batch[0]),
        (l.batch_stride[1], batch[1]),
    ]
    .into_iter()
    .filter(|&(_, extent)| extent > 1)
    .collect();
    dims.sort();
    let mut span: u128 = 1; // elements covered by the dims so far (max offset + 1)
    for (stride, extent) in dims {
        if (stride as u128) < span {
            return false;
        }
        span += (extent as u128 - 1) * stride as u128;
    }
    true
}

/// `c[z] (+)= op(a[z]) · op(b[z])` for every z = (z0, z1) of `batch`, accumulated in f32:
/// op(a[z]) is [M, K] (`a` stores [K, M] with `trans_a`), op(b[z]) is [K, N] (`b` stores
/// [N, K] with `trans_b`), c[z] is [M, N]. `opts.accumulate` adds to c; `opts.bias` is not
/// supported here. Every storage combination of [`matmul`] works. When c's offset, ld and
/// batch strides are all even, each thread writes its column pairs as whole words (one
/// store2); otherwise (e.g. S of an odd T) every element is stored on its own, atomically on
/// packed 16-bit storages, which is race-free but slower, as for a plain matmul of odd N.
/// Layouts are checked against the tensors' element counts before anything is dispatched,
/// and the output matrices must not overlap (that would race).
///
/// Attention (nanoGPT's CausalSelfAttention) with qkv [B, T, 3C], nh heads of hs = C / nh,
/// batch [B, nh]: q of head h is `MatrixLayout { offset: h * hs, ld: 3 * C, batch_stride:
/// [T * 3 * C, hs] }`, k the same at offset C + h * hs, v at 2C + h * hs; S [B, nh, T, T]
/// is `MatrixLayout::stacked(T, T, [B, nh])`; y [B, T, C] is `{ offset: 0, ld: C,
/// batch_stride: [T * C, hs] }`. Then S = q·kᵀ is `(q, k, S)` with `trans_b`.
#[allow(clippy::too_many_arguments)]
pub fn batched_matmul(
    ctx: &GpuContext,
    a: &Tensor,
    a_layout: MatrixLayout,
    b: &Tensor,
    b_layout: MatrixLayout,
    c: &Tensor,
    c_layout: MatrixLayout,
    m: usize,
    n: usize,
    k: usize,
    batch: [usize; 2],
    opts: MatmulOpts,
) -> Result<Kernel> {
    batched_matmul_with(
        ctx,
        (a, a_layout),
        (b, b_layout),
        (c, c_layout),
        (m, n, k),
        batch,
        opts,
        MatmulKernel::Auto,
    )
}

/// [`batched_matmul`] with a chosen kernel body (tests run both on any adapter).
#[allow(clippy::too_many_arguments)]
pub fn batched_matmul_with(
    ctx: &GpuContext,
    (a, a_layout): (&Tensor, MatrixLayout),
    (b, b_layout): (&Tensor, MatrixLayout),
    (c, c_layout): (&Tensor, MatrixLayout),
    (m, n, k): (usize, usize, usize),
    batch: [usize; 2],
    opts: MatmulOpts,
    kernel: MatmulKernel,
) -> Result<Kernel> {
    let err = |msg: String| Err(Error::shape("batched_matmul", msg));
    if opts.bias.is_some() {
        return err("bias is not supported by batched_matmul (add it separately)".into());
    }
    let a_dims = if opts.trans_a { (k, m) } else { (m, k) };
    let b_dims = if opts.trans_b { (n, k) } else { (k, n) };
    check_layout("a", a, &a_layout, a_dims, batch)?;
    check_layout("b", b, &b_layout, b_dims, batch)?;
    check_layout("c", c, &c_layout, (m, n), batch)?;
    if !outputs_disjoint(&c_layout, (m, n), batch) {
        return err(format!(
            "c: layout {c_layout:?} makes the [{m}, {n}] output matrices of batch {batch:?} overlap \
             (their writes would race)"
        ));
    }
    let storages = [a.storage(), b.storage(), c.storage()];
    if storages.contains(&Storage::F16) && storages.contains(&Storage::F16Packed) {
        return err(format!(
            "mixes native and packed f16 storages ({storages:?}); one context uses one"
        ));
    }
    let fits = |v: usize| v <= u32::MAX as usize;
    if ![m, n, k, batch[0], batch[1], batch[0] * batch[1]]
        .into_iter()
        .all(fits)
    {
        return err(format!(
            "sizes m {m}, n {n}, k {k}, batch {batch:?} must fit in 32 bits"
        ));
    }
    // Strides of a batch dimension of extent 1 are never used (and are passed as 0); with a
    // zero-sized operand nothing is indexed. Otherwise the bounds check above keeps every
    // offset, stride and ld below the tensor's element count, which fits u32.
    launch(
        ctx,
        Operand {
            tensor: a,
            layout: clamp_unused(a_layout, a_dims, batch),
        },
        Operand {
            tensor: b,
            layout: clamp_unused(b_layout, b_dims, batch),
        },
        Operand {
            tensor: c,
            layout: clamp_unused(c_layout, (m, n), batch),
        },
        (m as u32, n as u32, k as u32),
        [batch[0] as u32, batch[1] as u32],
        &opts,
        kernel,
    )
}

/// The layout with the fields the shader never uses for these sizes zeroed, so every field
/// passed fits u32 (unused fields may hold anything the caller liked).
fn clamp_unused(l: MatrixLayout, (rows, cols): (usize, usize), batch: [usize; 2]) -> MatrixLayout {
    if rows == 0 || cols == 0 || batch.contains(&0) {
        return MatrixLayout {
            offset: 0,
            ld: 0,
            batch_stride: [0, 0],
        };
    }
    MatrixLayout {
        offset: l.offset,
        ld: if rows > 1 { l.ld } else { 0 },
        batch_stride: [
            if batch[0] > 1 { l.batch_stride[0] } else { 0 },
            if batch[1] > 1 { l.batch_stride[1] } else { 0 },
        ],
    }
}

/// Floating-point operations of one `matmul` of these sizes (2·M·N·K), for benchmarks.
pub fn flops(m: usize, n: usize, k: usize) -> f64 {
    2.0 * m as f64 * n as f64 * k as f64
}

/// Every variant [`matmul`] may compile: both kernel bodies, the four transpose
/// combinations, and every storage of a, b, c and bias within one f16 world (native or
/// packed; the two never meet in one call).
pub fn variants() -> Result<Vec<Variant>> {
    let worlds = [
        [Storage::F32, Storage::F16, Storage::BF16],
        [Storage::F32, Storage::F16Packed, Storage::BF16],
    ];
    let mut combos = std::collections::BTreeSet::new();
    for world in worlds {
        for a in world {
            for b in world {
                for c in world {
                    for bias in world {
                        combos.insert([a, b, c, bias]);
                    }
                }
            }
        }
    }
    let mut v = Vec::new();
    for kernel in [MatmulKernel::Tiled, MatmulKernel::Direct] {
        for [a, b, c, bias] in &combos {
            let tiling = Tiling::choose(kernel, *a, *b);
            for trans_a in [false, true] {
                for trans_b in [false, true] {
                    v.push(Variant::new(
                        SHADER,
                        &[
                            ("a".into(), *a),
                            ("b".into(), *b),
                            ("c".into(), *c),
                            ("bias".into(), *bias),
                        ],
                        &tiling.consts(trans_a, trans_b),
                    )?);
                }
            }
        }
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tilings_divide_evenly_and_fit_portable_limits() {
        for kernel in [MatmulKernel::Tiled, MatmulKernel::Direct] {
            for a in Storage::ALL {
                for b in Storage::ALL {
                    let t = Tiling::choose(kernel, a, b);
                    assert!(t.wg_x * t.wg_y <= 256, "{t:?}: over 256 threads");
                    assert_eq!(t.tn % 2, 0, "{t:?}: threads must own column pairs");
                    if kernel == MatmulKernel::Tiled {
                        assert_eq!((t.tm % 4, t.tn % 4), (0, 0), "{t:?}: vec4 fragments");
                    } else {
                        assert_eq!(t.wg_y, 1, "{t:?}: rows must be uniform per workgroup");
                    }
                    let shared = 4 * t.bk * (t.bm() + t.bn());
                    if kernel == MatmulKernel::Tiled {
                        assert!(
                            shared <= 16 * 1024,
                            "{t:?}: {shared} bytes of workgroup memory"
                        );
                        assert_eq!((t.bm() * t.bk) % (t.wg_x * t.wg_y), 0, "{t:?}");
                        assert_eq!((t.bn() * t.bk) % (t.wg_x * t.wg_y), 0, "{t:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn variant_list_has_no_duplicates() {
        let v = variants().unwrap();
        let keys: std::collections::BTreeSet<_> = v.iter().map(|v| v.key()).collect();
        assert_eq!(keys.len(), v.len());
    }
}
