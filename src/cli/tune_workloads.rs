//! What `bench tune` times: the GEMM and convolution shapes of the preset models (gpt-char
//! and gpt-tiny at batch 64, simple-cnn on 3×32×32 and mnist-cnn on 1×28×28 at batch 64,
//! resnet18-cifar's 3×3 convolutions at batch 128, whose last stage takes the large tile) and
//! the 4096³ matmul, each with its tensors made once and its kernels planned per candidate
//! table; and the candidate shapes of each family of the kernel table.

use webgpu_amp::gpu::{CoopTile, Kernel, KernelLimits, SimtTile};
use webgpu_amp::ops::Accumulate;
use webgpu_amp::ops::conv::{
    Conv2dParams, conv2d_backward_input, conv2d_backward_weight, conv2d_forward,
};
use webgpu_amp::ops::matmul::{MatmulKernel, MatmulOpts, flops, matmul_with};
use webgpu_amp::{DType, GpuContext, Result, Storage, Tensor};

/// One product of a model: `c[m,n] (+)= op(a)·op(b)`.
#[derive(Clone, Copy, Debug)]
pub struct Gemm {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub trans: (bool, bool),
    /// A weight gradient: accumulates into f32 after rounding to the inputs' dtype.
    pub weight_grad: bool,
}

/// One convolution pass of a model: x [n, c, hw, hw], weight [o, c, 3, 3], padding 1.
#[derive(Clone, Copy, Debug)]
pub struct Conv {
    pub n: usize,
    pub c: usize,
    pub hw: usize,
    pub o: usize,
    pub pass: ConvPass,
}

impl Conv {
    /// The sides of the GEMM the convolution runs (`ops::conv::run`): output channels by
    /// pixels forward, input channels by pixels for the input gradient, output channels by
    /// taps for the weight gradient. They pick its tile (`CoopTiles::pick_conv`).
    pub fn gemm_sides(&self) -> (usize, usize) {
        let pixels = self.n * self.hw * self.hw;
        match self.pass {
            ConvPass::Forward => (self.o, pixels),
            ConvPass::Input => (self.c, pixels),
            ConvPass::Weight => (self.o, self.c * 9),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConvPass {
    Forward,
    Input,
    Weight,
}

#[derive(Clone, Copy, Debug)]
pub enum Work {
    Gemm(Gemm),
    Conv(Conv),
}

impl Work {
    pub fn describe(&self) -> String {
        match self {
            Work::Gemm(g) => format!(
                "{}x{}x{}{}{}{}",
                g.m,
                g.n,
                g.k,
                if g.trans.0 { " aT" } else { "" },
                if g.trans.1 { " bT" } else { "" },
                if g.weight_grad { " dW" } else { "" }
            ),
            Work::Conv(c) => format!(
                "conv {:?} n{} c{} {}x{} o{} k3",
                c.pass, c.n, c.c, c.hw, c.hw, c.o
            ),
        }
    }

    pub fn flops(&self) -> f64 {
        match self {
            Work::Gemm(g) => flops(g.m, g.n, g.k),
            Work::Conv(c) => 2.0 * (c.n * c.o * c.hw * c.hw * c.c * 9) as f64,
        }
    }
}

/// The products of one forward and backward of a GPT of width `c` over `rows` tokens with a
/// vocabulary of `vocab`: per layer the QKV, projection and MLP products (forward `x·Wᵀ`,
/// input gradient `dy·W`, weight gradient `dyᵀ·x`), and the tied head.
fn gpt_gemms(rows: usize, c: usize, vocab: usize) -> Vec<Gemm> {
    let mut v = Vec::new();
    for (out, inp) in [(3 * c, c), (c, c), (4 * c, c), (c, 4 * c), (vocab, c)] {
        let g = |m, n, k, trans, weight_grad| Gemm {
            m,
            n,
            k,
            trans,
            weight_grad,
        };
        v.push(g(rows, out, inp, (false, true), false));
        v.push(g(rows, inp, out, (false, false), false));
        v.push(g(out, inp, rows, (true, false), true));
    }
    v
}

/// Every shape timed: `quick` is tiny (a check of the tuner on a software adapter).
pub fn workloads(quick: bool) -> Vec<Work> {
    let mut work = Vec::new();
    if quick {
        for g in gpt_gemms(64, 64, 65).into_iter().step_by(4) {
            work.push(Work::Gemm(g));
        }
        for pass in [ConvPass::Forward, ConvPass::Input, ConvPass::Weight] {
            work.push(Work::Conv(Conv {
                n: 2,
                c: 3,
                hw: 8,
                o: 8,
                pass,
            }));
        }
        return work;
    }
    // gpt-char (C 384, T 256) and gpt-tiny (C 64, T 64), batch 64, a character vocabulary.
    for (rows, c) in [(64 * 256, 384), (64 * 64, 64)] {
        work.extend(gpt_gemms(rows, c, 65).into_iter().map(Work::Gemm));
    }
    work.push(Work::Gemm(Gemm {
        m: 4096,
        n: 4096,
        k: 4096,
        trans: (false, false),
        weight_grad: false,
    }));
    // simple-cnn (3×32×32) and mnist-cnn (1×28×28), batch 64: both convolutions, three passes.
    for (c, hw) in [(3, 32), (1, 28)] {
        for (cin, size, o) in [(c, hw, 32), (32, hw / 2, 64)] {
            for pass in [ConvPass::Forward, ConvPass::Input, ConvPass::Weight] {
                work.push(Work::Conv(Conv {
                    n: 64,
                    c: cin,
                    hw: size,
                    o,
                    pass,
                }));
            }
        }
        // The classifier: fc 64·(H/4)·(W/4) → 10.
        let inp = 64 * (hw / 4) * (hw / 4);
        work.push(Work::Gemm(Gemm {
            m: 64,
            n: 10,
            k: inp,
            trans: (false, true),
            weight_grad: false,
        }));
        work.push(Work::Gemm(Gemm {
            m: 10,
            n: inp,
            k: 64,
            trans: (true, false),
            weight_grad: true,
        }));
    }
    // resnet18-cifar at batch 128: each stage's 3×3 convolution (64 at 32×32 to 512 at 4×4).
    for (channels, hw) in [(64, 32), (128, 16), (256, 8), (512, 4)] {
        for pass in [ConvPass::Forward, ConvPass::Input, ConvPass::Weight] {
            work.push(Work::Conv(Conv {
                n: 128,
                c: channels,
                hw,
                o: channels,
                pass,
            }));
        }
    }
    work
}

/// A workload's tensors, made once; its kernels are planned per candidate table.
pub struct Prepared {
    pub work: Work,
    tensors: Vec<Tensor>,
    storage: Storage,
}

impl Prepared {
    /// Tensors of `work` in `storage` (weight gradients land in f32).
    pub fn new(ctx: &GpuContext, work: Work, storage: Storage) -> Prepared {
        let z = |shape: &[usize], s| Tensor::zeros_with_storage(ctx, shape, s);
        let tensors = match work {
            Work::Gemm(g) => {
                let a = if g.trans.0 { [g.k, g.m] } else { [g.m, g.k] };
                let b = if g.trans.1 { [g.n, g.k] } else { [g.k, g.n] };
                let c = if g.weight_grad { Storage::F32 } else { storage };
                vec![z(&a, storage), z(&b, storage), z(&[g.m, g.n], c)]
            }
            Work::Conv(c) => {
                let dw = if c.pass == ConvPass::Weight {
                    Storage::F32
                } else {
                    storage
                };
                vec![
                    z(&[c.n, c.c, c.hw, c.hw], storage),
                    z(&[c.o, c.c, 3, 3], dw),
                    z(&[c.n, c.o, c.hw, c.hw], storage),
                ]
            }
        };
        Prepared {
            work,
            tensors,
            storage,
        }
    }

    /// The kernels of this workload planned on `ctx` (whose table is a candidate's), with
    /// the matmul body `kernel`.
    pub fn kernels(&self, ctx: &GpuContext, kernel: MatmulKernel) -> Result<Vec<Kernel>> {
        let t = &self.tensors;
        let p = Conv2dParams {
            stride: 1,
            padding: 1,
        };
        Ok(match self.work {
            Work::Gemm(g) => {
                let opts = MatmulOpts {
                    trans_a: g.trans.0,
                    trans_b: g.trans.1,
                    accumulate: g.weight_grad,
                    round_to: g.weight_grad.then(|| self.storage.dtype()),
                    ..Default::default()
                };
                vec![matmul_with(ctx, &t[0], &t[1], &t[2], opts, kernel)?]
            }
            Work::Conv(c) => match c.pass {
                ConvPass::Forward => vec![conv2d_forward(ctx, &t[0], &t[1], None, &t[2], p)?],
                ConvPass::Input => vec![conv2d_backward_input(ctx, &t[2], &t[1], &t[0], p)?],
                ConvPass::Weight => {
                    let round = Some(self.storage.dtype()).filter(|&d| d != DType::F32);
                    conv2d_backward_weight(ctx, &t[0], &t[2], &t[1], p, Accumulate::Add, round)?
                }
            },
        })
    }
}

/// Candidate SIMT tiles (16×16 threads unless said), the adapter's current one first; those
/// that break a rule of the kernel (`gpu::kernel_rules`) under its limits are dropped.
pub fn simt_candidates(current: SimtTile, limits: &KernelLimits) -> Vec<SimtTile> {
    let t = |wg: u32, tm, tn, bk| SimtTile {
        wg_x: wg,
        wg_y: wg,
        tm,
        tn,
        bk,
    };
    let mut v = vec![current];
    for c in [
        t(16, 8, 8, 8),
        t(16, 8, 8, 16),
        t(16, 4, 8, 16),
        t(16, 8, 4, 16),
        t(16, 4, 4, 16),
        t(8, 8, 8, 16),
        t(16, 8, 8, 32),
    ] {
        if !v.contains(&c) && c.broken_rules(limits).is_empty() {
            v.push(c);
        }
    }
    v
}

/// Candidate tensor-core tiles for fragments of `edge`, the current one first; those that
/// break a rule of the tile loop under its limits are dropped.
pub fn coop_candidates(current: CoopTile, edge: u32, limits: &KernelLimits) -> Vec<CoopTile> {
    let t = |sg_m, sg_n, fm, fn_, bk| CoopTile {
        sg_m,
        sg_n,
        fm,
        fn_,
        bk,
    };
    let mut v = vec![current];
    for c in [
        t(2, 2, 2, 2, 32),
        t(2, 2, 4, 4, 32),
        t(2, 2, 4, 4, 16),
        t(2, 2, 2, 2, 64),
        t(2, 2, 2, 4, 32),
        t(2, 2, 4, 2, 32),
        t(4, 2, 2, 4, 32),
        t(2, 2, 4, 4, 64),
    ] {
        if !v.contains(&c) && c.broken_rules(edge, limits).is_empty() {
            v.push(c);
        }
    }
    v
}
