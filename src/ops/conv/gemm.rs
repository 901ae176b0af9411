//! The implicit GEMM every convolution kernel runs: its shader, uniform block, epilogue,
//! split-K plan for the weight gradient, and the launch.

use super::shape::{Conv2dParams, Dims};
use crate::error::Result;
use crate::gpu::{Arg, GpuContext, Kernel, KernelDesc, grid_1d};
use crate::ops::Accumulate;
use crate::shader::{Grid, ShaderDecl};
use crate::tensor::Tensor;

pub static SHADER: ShaderDecl = ShaderDecl {
    name: "conv",
    source: include_str!("../../../shaders/conv.wgsl"),
    structs: &[Params::WGSL],
    consts: &[],
    // The variants training uses: every storage for the activations and weights, with bias and
    // weight gradient either in that storage or in f32 (AMP's f32 weight gradients), for the
    // kernel sizes 1, 3 and 5. Other kernel sizes compile the same source with other constants.
    variants: |shader| {
        Grid::new()
            .each(&["src", "w", "dst", "x", "dy"])
            .like_or_f32(&["bias", "dw"], "src")
            .variants_with(shader, |_| {
                [1, 3, 5]
                    .map(|k| vec![("KH", k.to_string()), ("KW", k.to_string())])
                    .to_vec()
            })
    },
};

/// Output tile of one workgroup (rows x columns of the GEMM), as in the shader.
pub(super) const TILE_R: usize = 32;
pub(super) const TILE_C: usize = 32;

crate::wgsl_struct! {
    pub(super) struct Params {
        pub(super) batch: u32,
        pub(super) in_ch: u32,
        pub(super) in_h: u32,
        pub(super) in_w: u32,
        pub(super) out_ch: u32,
        pub(super) out_h: u32,
        pub(super) out_w: u32,
        pub(super) stride: u32,
        pub(super) pad: u32,
        /// forward: add bias
        pub(super) has_bias: u32,
        /// backward weight: dw += instead of dw =
        pub(super) accumulate: u32,
        /// GEMM rows of this kernel
        pub(super) rows: u32,
        /// GEMM columns
        pub(super) cols: u32,
        /// GEMM reduction length
        pub(super) depth: u32,
        /// the tiles the grid folds into x and y: ceil(rows / TILE_R) for the SIMT bodies,
        /// column tiles for the tensor-core ones (`coop.rs`)
        pub(super) row_tiles: u32,
        /// the other tile count
        pub(super) col_tiles: u32,
        /// backward weight: depth splits (1: write dw directly)
        pub(super) splits: u32,
        /// backward weight: pixels per split, a multiple of BK
        pub(super) split_len: u32,
        /// backward weight: round_grad's `to` before accumulating
        pub(super) round_to: u32,
        pub(super) _pad0: u32,
        pub(super) _pad1: u32,
        pub(super) _pad2: u32,
    }
}

/// What a kernel's epilogue does besides storing its result.
#[derive(Clone, Copy)]
pub(super) struct Epilogue {
    /// Rounding of the result before it is stored ([`crate::ops::round_code`]).
    pub(super) round_to: u32,
    /// Add `bias[column]` (forward with a bias).
    pub(super) bias: bool,
    /// Add to the output's values instead of overwriting them (weight gradient).
    pub(super) accumulate: Accumulate,
}

pub(super) const STORE: Epilogue = Epilogue {
    round_to: 0,
    bias: false,
    accumulate: Accumulate::Overwrite,
};

/// How the weight gradient's reduction over every output pixel is split (split-K).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Split {
    pub(super) splits: usize,
    /// Pixels per split, a multiple of the shader's tile depth (16).
    pub(super) len: usize,
}

impl Split {
    const NONE: Split = Split {
        splits: 1,
        len: u32::MAX as usize & !15,
    };

    /// CPU adapters (lavapipe, llvmpipe) stop a workgroup's tile loop early once it runs
    /// past about 1,260 steps of 16 pixels (measured: weight gradients were wrong from
    /// 20,160 pixels on), so there no workgroup walks more than this many; it keeps one
    /// split (today's bits) up to batch 20 of a 28×28 layer. GPUs split further, to give
    /// every multiprocessor work: the weight gradient has few output tiles.
    const CPU_LEN: usize = 16_384;
    /// Workgroups a GPU weight gradient aims for (a few per multiprocessor on large GPUs).
    const GPU_GROUPS: usize = 512;
    /// Fewest pixels a GPU split walks (below that the partial sums cost more than they save).
    const GPU_MIN_LEN: usize = 256;

    pub(super) fn plan(device: wgpu::DeviceType, depth: usize, tiles: usize) -> Split {
        if device == wgpu::DeviceType::Cpu {
            return Self::of_len(depth, Self::CPU_LEN);
        }
        Self::for_gpu(depth, tiles)
    }

    /// The GPU plan on any adapter (the tensor-core kernels: a CPU adapter under
    /// `--tensor-cores on` splits as a GPU would; no split passes the CPU length).
    pub(super) fn for_gpu(depth: usize, tiles: usize) -> Split {
        let want = Self::GPU_GROUPS.div_ceil(tiles.max(1));
        Self::of_len(
            depth,
            depth.div_ceil(want).clamp(Self::GPU_MIN_LEN, Self::CPU_LEN),
        )
    }

    fn of_len(depth: usize, len: usize) -> Split {
        let len = len.next_multiple_of(16);
        Split {
            splits: depth.div_ceil(len).max(1),
            len,
        }
    }
}

/// One implicit GEMM: its sizes and how its depth is split.
#[derive(Clone, Copy)]
pub(super) struct Gemm {
    pub(super) rows: usize,
    pub(super) cols: usize,
    pub(super) depth: usize,
    pub(super) split: Split,
}

impl Gemm {
    pub(super) fn unsplit(rows: usize, cols: usize, depth: usize) -> Self {
        Gemm {
            rows,
            cols,
            depth,
            split: Split::NONE,
        }
    }
}

/// The uniform block of one GEMM. `tiles`: the tile count the grid folds into x and y (in
/// `row_tiles`), then the other (in `col_tiles`).
pub(super) fn params(
    d: &Dims,
    p: Conv2dParams,
    gemm: Gemm,
    epilogue: Epilogue,
    tiles: [usize; 2],
) -> Params {
    let Gemm {
        rows,
        cols,
        depth,
        split,
    } = gemm;
    Params {
        batch: d.n as u32,
        in_ch: d.c as u32,
        in_h: d.h as u32,
        in_w: d.w as u32,
        out_ch: d.o as u32,
        out_h: d.ho as u32,
        out_w: d.wo as u32,
        stride: p.stride as u32,
        pad: p.padding as u32,
        has_bias: epilogue.bias as u32,
        accumulate: epilogue.accumulate.flag(),
        rows: rows as u32,
        cols: cols as u32,
        depth: depth as u32,
        row_tiles: tiles[0] as u32,
        col_tiles: tiles[1] as u32,
        splits: split.splits as u32,
        split_len: split.len as u32,
        round_to: epilogue.round_to,
        ..Default::default()
    }
}

/// The kernel of a SIMT GEMM: `entry` of conv.wgsl for the kernel size of `d`.
pub(super) fn desc(entry: &'static str, d: &Dims) -> KernelDesc {
    KernelDesc::new(&SHADER, entry)
        .with_const("KH", d.kh)
        .with_const("KW", d.kw)
}

/// The tensors a forward or input-gradient GEMM binds: it gathers `src` (x or dy) into `dst`
/// (y or dx) with the weight `w`, adding `bias` (forward with a bias; otherwise the weight
/// stands in, never read, so no extra pipeline variant).
pub(super) const PIXEL_GEMM: [&str; 4] = ["src", "w", "bias", "dst"];
/// The tensors a weight-gradient GEMM binds: `partials` holds the split sums (with one
/// split, a placeholder the kernel never touches).
pub(super) const WEIGHT_GEMM: [&str; 4] = ["x", "dy", "dw", "partials"];

/// `tensors` bound to `names` (one of the lists above), in order.
pub(super) fn bind<'a>(
    names: [&'static str; 4],
    tensors: [&'a Tensor; 4],
) -> Vec<(&'static str, Arg<'a>)> {
    names.into_iter().zip(tensors.map(Tensor::arg)).collect()
}

/// The kernel of one GEMM: `grid[0]` workgroups folded into the grid's x and y, `grid[1]`
/// along z. An empty GEMM (`empty`: a zero dimension) dispatches nothing; the kernel is still
/// valid.
pub(super) fn dispatch(
    ctx: &GpuContext,
    desc: &KernelDesc,
    params: &Params,
    args: Vec<(&str, Arg<'_>)>,
    empty: bool,
    grid: [usize; 2],
) -> Result<Kernel> {
    let mut all = vec![("params", Arg::Uniform(bytemuck::bytes_of(params)))];
    all.extend(args);
    let [gx, gy, _] = grid_1d(grid[0], 1);
    let groups = if empty {
        [0, 0, 0]
    } else {
        [gx, gy, grid[1] as u32]
    };
    ctx.kernel(desc, &all, groups)
}

/// The reduce kernel's parameters: what it reads is `out_ch`, `rows` (taps), `splits` and
/// `accumulate`.
pub(super) fn reduce_params(d: &Dims, taps: usize, split: Split, epilogue: Epilogue) -> Params {
    Params {
        out_ch: d.o as u32,
        rows: taps as u32,
        accumulate: epilogue.accumulate.flag(),
        splits: split.splits as u32,
        split_len: split.len as u32,
        round_to: epilogue.round_to,
        ..Params::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wgpu::DeviceType;

    #[test]
    fn weight_gradient_splits() {
        // CPU adapters: one split up to 16,384 pixels (the bits of an unsplit reduction),
        // then runs of 16,384.
        let cpu = |depth| Split::plan(DeviceType::Cpu, depth, 1);
        assert_eq!(
            cpu(12_544),
            Split {
                splits: 1,
                len: 16_384
            }
        );
        assert_eq!(
            cpu(16_384),
            Split {
                splits: 1,
                len: 16_384
            }
        );
        assert_eq!(
            cpu(20_384),
            Split {
                splits: 2,
                len: 16_384
            }
        );
        // GPUs: about 512 workgroups over the output tiles, splits of at least 256 pixels.
        let gpu = |depth, tiles| Split::plan(DeviceType::DiscreteGpu, depth, tiles);
        // mnist-cnn conv1 at batch 64: 1 tile, 50,176 pixels -> 512 splits of 112 -> 256.
        assert_eq!(
            gpu(50_176, 1),
            Split {
                splits: 196,
                len: 256
            }
        );
        // conv2 at batch 64: 9 x 2 tiles, 12,544 pixels -> 29 splits of 433 -> 448.
        assert_eq!(
            gpu(12_544, 18),
            Split {
                splits: 28,
                len: 448
            }
        );
        // A huge reduction still caps a split at the CPU length.
        assert_eq!(
            gpu(10_000_000, 1_000),
            Split {
                splits: 611,
                len: 16_384
            }
        );
        // Tiny: one split.
        assert_eq!(
            gpu(100, 4),
            Split {
                splits: 1,
                len: 256
            }
        );
    }
}
