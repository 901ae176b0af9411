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
    let tiling = Tiling::choose(kernel.resolve(ctx), a.storage(), b.storage());
    let mut flags = 0;
    if opts.accumulate {
        flags |= FLAG_ACCUMULATE;
    }
    if opts.bias.is_some() {
        flags |= FLAG_BIAS;
    }
    let params = Params { m, n, k, flags };
    // Without a bias the shader never reads it, but the binding must exist: `a` stands in
    // (read-only twice is allowed), which keeps the set of compiled variants small.
    let bias = opts.bias.unwrap_or(a);
    let workgroups = [n.div_ceil(tiling.bn()), m.div_ceil(tiling.bm()), 1];
    let workgroups = if workgroups.contains(&0) {
        [0, 0, 0]
    } else {
        workgroups
    };
    ctx.kernel(
        &tiling.desc(opts.trans_a, opts.trans_b),
        &[
            ("params", Arg::Uniform(bytemuck::bytes_of(&params))),
            ("a", a.arg()),
            ("b", b.arg()),
            ("c", c.arg()),
            ("bias", bias.arg()),
        ],
        workgroups,
    )
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
