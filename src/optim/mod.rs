//! Fused optimizers (`shaders/optim.wgsl`): PyTorch's SGD, Adam and AdamW as one dispatch
//! over every parameter (multi-tensor apply over flat f32 buffers), skipped on the GPU when
//! the GradScaler found an inf or NaN.
//!
//! Formulas are torch.optim's single-tensor ones in f32. Hyperparameters arrive as f32, but
//! PyTorch's are Python floats, and the constants it derives from them (`1 - beta`,
//! `1 - lr * weight_decay`, `beta ** step`) are computed in f64. We widen each f32 through the
//! shortest decimal that round-trips (`0.999f32` → `0.999f64`, the literal the user wrote)
//! and derive those constants in f64 too, so `1 - beta2` is PyTorch's 0.001 and not
//! `1 - 0.999f32` = 0.00099998713. The step counter lives on the GPU (a skipped step does
//! not count), so the bias corrections `1 - beta^step` are computed there, in f32, as
//! `1 - e^(step * ln beta)` with `ln beta` from the host in f64 and a series where the
//! result is small: a few f32 ulp from PyTorch's f64 value.

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use serde::{Deserialize, Serialize};

mod config;
mod schedule;
mod state;

pub use config::{AdamSettings, OptimizerConfig, SgdSettings, widen};
pub use schedule::LrSchedule;

use crate::amp::{GradClipper, check_flat_f32, f32_piece, tensor_piece};
use crate::dtype::Storage;
use crate::error::{Error, Result};
use crate::gpu::{Arg, GpuBuffer, GpuContext, Kernel, KernelDesc, grid_1d};
use crate::ops::scaler_state::{SCALER_STATE, WORD_FOUND_INF};
use crate::shader::{Grid, ShaderDecl};
use crate::tensor::Tensor;
use config::{Hyper, check_lr};

pub static SHADER: ShaderDecl = ShaderDecl {
    name: "optim",
    source: include_str!("../../shaders/optim.wgsl"),
    structs: &[Hyper::WGSL],
    consts: &[SCALER_STATE],
    // Raw f32 buffers, and the weights' compute-dtype copy in any storage (f32: none written).
    variants: |shader| Grid::new().each(&["low"]).variants(shader, &[]),
};
/// The optimizers' one shader, for the portability tests.
pub static SHADERS: &[&ShaderDecl] = &[&SHADER];
const WG: u32 = 256;
/// Elements per thread (`EPT` in the shader).
const EPT: usize = 4;

/// Optimizer state for checkpoints, with PyTorch's names. Moments are flat (the caller's
/// per-tensor offsets slice them). `step` counts applied steps (skipped ones excluded). A
/// buffer is `None` before the first applied step, where PyTorch's state is still empty.
/// SGD has no `step` in PyTorch; here it only says whether `momentum_buffer` exists.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OptimizerState {
    pub step: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub momentum_buffer: Option<Vec<f32>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exp_avg: Option<Vec<f32>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exp_avg_sq: Option<Vec<f32>>,
}

pub struct Optimizer {
    config: OptimizerConfig,
    /// Current learning rate (f32 bits): `set_lr` changes it without `&mut`.
    lr: AtomicU32,
    n: usize,
    /// Weight decay only where the mask in a piece's `words` says (parameter groups);
    /// everywhere otherwise.
    grouped: bool,
    /// Named moment buffers: momentum_buffer (SGD with momentum) or exp_avg, exp_avg_sq.
    moments: Vec<(&'static str, Arc<GpuBuffer>)>,
    /// What the step kernel binds besides the above, kept to bind it again
    /// ([`Optimizer::clip_first`]).
    bound: Bound,
    /// The step, one kernel per piece of the flat buffers ([`GpuContext::flat_pieces`]):
    /// one for a model whose buffers fit one storage binding.
    pieces: Vec<Piece>,
}

/// The step over one range of the flat buffers, with its own counters and mask.
struct Piece {
    range: Range<usize>,
    /// One step counter per workgroup of this piece's kernel (see `optim.wgsl`), then the
    /// piece's weight-decay mask (one bit per element: in the weight-decay group, see
    /// [`Optimizer::new_grouped`]): one binding.
    words: Arc<GpuBuffer>,
    /// Workgroups of this piece's kernel: the counters in `words`.
    launched: usize,
    wg: [u32; 3],
    step: Kernel,
}

/// The step kernel's entry point and grid, the buffers the caller owns, and the clip
/// coefficient's.
struct Bound {
    entry: &'static str,
    params: Arc<GpuBuffer>,
    grads: Arc<GpuBuffer>,
    scaler_state: Arc<GpuBuffer>,
    /// A [`GradClipper`]'s norm buffer (`[total_norm, clip_coef]`) when the step multiplies
    /// each gradient by its coefficient; a placeholder of two words otherwise.
    clip_norm: Arc<GpuBuffer>,
    clipped: bool,
    /// The weights' compute-dtype copy the step writes ([`Optimizer::write_low_copy`]); a
    /// one-element f32 placeholder otherwise.
    low: Tensor,
    writes_low: bool,
}

impl Optimizer {
    /// Plan the fused step over `n` parameters. `scaler_state` is the GradScaler's state
    /// buffer (word [`WORD_FOUND_INF`]); when found_inf is set, the kernel leaves parameters,
    /// moments and the step counter untouched. `decay` makes two parameter groups: the
    /// elements where `decay[i]` is true get the configured weight decay, the others none
    /// (nanoGPT's `configure_optimizers`: decay for weights of two or more dimensions only).
    /// Still one dispatch: the kernel reads one bit per element. `None` is one group, every
    /// element decays (PyTorch's default).
    pub fn new_grouped(
        ctx: &GpuContext,
        config: OptimizerConfig,
        params: &Arc<GpuBuffer>,
        grads: &Arc<GpuBuffer>,
        n: usize,
        scaler_state: &Arc<GpuBuffer>,
        decay: Option<&[bool]>,
    ) -> Result<Self> {
        config.validate()?;
        let name = config.name();
        if n == 0 {
            return Err(Error::InvalidArgument(format!("{name}: no parameters")));
        }
        if let Some(d) = decay
            && d.len() != n
        {
            return Err(Error::InvalidArgument(format!(
                "{name}: weight-decay mask of {} elements for {n} parameters",
                d.len()
            )));
        }
        check_flat_f32(ctx, &format!("{name} params"), params, n)?;
        check_flat_f32(ctx, &format!("{name} grads"), grads, n)?;
        if scaler_state.size() < 4 * (WORD_FOUND_INF as u64 + 1) {
            return Err(Error::InvalidArgument(format!(
                "{name}: scaler state buffer of {} bytes has no found_inf word",
                scaler_state.size()
            )));
        }
        let moment = |label: &'static str| (label, ctx.alloc_storage(label, 4 * n as u64));
        let (entry, moments) = match config {
            OptimizerConfig::Sgd { momentum: 0.0, .. } => ("sgd_step", vec![]),
            OptimizerConfig::Sgd { .. } => ("sgd_momentum_step", vec![moment("momentum_buffer")]),
            OptimizerConfig::Adam { .. } | OptimizerConfig::AdamW { .. } => {
                ("adam_step", vec![moment("exp_avg"), moment("exp_avg_sq")])
            }
        };
        let grouped = decay.is_some();
        let bound = Bound {
            entry,
            params: params.clone(),
            grads: grads.clone(),
            scaler_state: scaler_state.clone(),
            clip_norm: ctx.alloc_storage("optim.no_clip", 8),
            clipped: false,
            low: Tensor::view(
                ctx,
                ctx.alloc_storage("optim.no_low", 4),
                0,
                &[1],
                Storage::F32,
            )?,
            writes_low: false,
        };
        let mut pieces = Vec::new();
        for range in ctx.flat_pieces(n) {
            // Pieces start at multiples of 1024 elements: the mask's words split with them.
            let words: Vec<u32> = match decay {
                Some(d) => d[range.clone()]
                    .chunks(32)
                    .map(|c| c.iter().enumerate().map(|(b, &on)| (on as u32) << b).sum())
                    .collect(),
                None => vec![u32::MAX],
            };
            let wg = grid_1d(range.len().div_ceil(WG as usize * EPT) * WG as usize, WG);
            let launched = (wg[0] * wg[1] * wg[2]) as u64;
            let counters_and_mask = 4 * (launched + words.len() as u64);
            let counters_and_mask = ctx.alloc_storage("optim.words", counters_and_mask);
            ctx.write_buffer(
                &counters_and_mask,
                4 * launched,
                bytemuck::cast_slice(&words),
            );
            let launched = launched as usize;
            let hyper = Hyper::new(&config, range.len(), grouped, [false, false], launched);
            let step = step_kernel(
                ctx,
                (&range, &counters_and_mask, wg),
                &moments,
                &bound,
                &hyper,
            )?;
            pieces.push(Piece {
                range,
                words: counters_and_mask,
                launched,
                wg,
                step,
            });
        }
        Ok(Self {
            config,
            grouped,
            lr: AtomicU32::new(config.lr().to_bits()),
            n,
            moments,
            bound,
            pieces,
        })
    }

    /// Fold `clipper`'s last kernel into this optimizer's step: the step multiplies each
    /// gradient by the clip coefficient `clipper`'s reduce wrote, exactly as its apply
    /// kernel would have (same f32 multiply, same bits), so a step records only
    /// [`GradClipper::norm_kernels`] before it. The gradient buffer keeps the unclipped
    /// values. `clipper` must clip this optimizer's gradients.
    pub fn clip_first(mut self, ctx: &GpuContext, clipper: &GradClipper) -> Result<Self> {
        if clipper.len() != self.n {
            return Err(Error::InvalidArgument(format!(
                "{}: a clipper of {} gradients for {} parameters",
                self.config.name(),
                clipper.len(),
                self.n
            )));
        }
        self.bound.clip_norm = clipper.norm_buffer().clone();
        self.bound.clipped = true;
        self.rebind(ctx)
    }

    /// Make the step also store each parameter it updates into `low`, the weights'
    /// compute-dtype copy (`n` elements, any storage), through the same store helpers as
    /// `elementwise::cast` (same bits): after an applied step `low` is the cast of the new
    /// parameters, and a skipped step writes neither. Whoever writes the parameters otherwise
    /// (an upload) casts them again before `low` is read.
    pub fn write_low_copy(mut self, ctx: &GpuContext, low: &Tensor) -> Result<Self> {
        if low.numel() != self.n {
            return Err(Error::InvalidArgument(format!(
                "{}: a compute copy of {} elements for {} parameters",
                self.config.name(),
                low.numel(),
                self.n
            )));
        }
        self.bound.low = low.clone();
        self.bound.writes_low = true;
        self.rebind(ctx)
    }

    /// The step kernel again, over the buffers [`Bound`] now names.
    fn rebind(mut self, ctx: &GpuContext) -> Result<Self> {
        for i in 0..self.pieces.len() {
            let hyper = self.hyper(&self.pieces[i], self.lr());
            let p = &self.pieces[i];
            let at = (&p.range, &p.words, p.wg);
            self.pieces[i].step = step_kernel(ctx, at, &self.moments, &self.bound, &hyper)?;
        }
        Ok(self)
    }

    /// Whether the step applies a clip coefficient itself ([`Optimizer::clip_first`]).
    pub fn clips(&self) -> bool {
        self.bound.clipped
    }

    /// Whether the step writes the weights' compute-dtype copy
    /// ([`Optimizer::write_low_copy`]).
    pub fn writes_low_copy(&self) -> bool {
        self.bound.writes_low
    }

    fn hyper(&self, piece: &Piece, lr: f32) -> Hyper {
        let bound = [self.bound.clipped, self.bound.writes_low];
        Hyper::new(
            &self.config.with_lr(lr),
            piece.range.len(),
            self.grouped,
            bound,
            piece.launched,
        )
    }

    /// The fused update: ONE dispatch over all n parameters (one per piece where the flat
    /// buffers pass the adapter's binding limit: [`GpuContext::flat_pieces`]). Record them
    /// in order after unscale (and clipping) and before the scaler's update.
    pub fn step_kernels(&self) -> Vec<&Kernel> {
        self.pieces.iter().map(|p| &p.step).collect()
    }

    /// Change the learning rate for the next recorded steps: one queued write of the small
    /// uniform block, no recompile, no wait.
    pub fn set_lr(&self, ctx: &GpuContext, lr: f32) -> Result<()> {
        check_lr(self.config.name(), lr)?;
        self.lr.store(lr.to_bits(), Ordering::Relaxed);
        for piece in &self.pieces {
            let hyper = self.hyper(piece, lr);
            piece.step.set_uniform(ctx, bytemuck::bytes_of(&hyper));
        }
        Ok(())
    }

    /// The current learning rate.
    pub fn lr(&self) -> f32 {
        f32::from_bits(self.lr.load(Ordering::Relaxed))
    }

    /// The configuration given at construction (its `lr` is the initial one; see
    /// [`Optimizer::lr`]).
    pub fn config(&self) -> &OptimizerConfig {
        &self.config
    }

    /// Whether weight decay is limited to a group of elements ([`Optimizer::new_grouped`]).
    pub fn grouped(&self) -> bool {
        self.grouped
    }

    /// The weight-decay mask (one bit per element; one all-ones word without groups), read
    /// back (blocking; native only).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn decay_mask_words(&self, ctx: &GpuContext) -> Result<Vec<u32>> {
        let mut mask = Vec::new();
        // Without groups every piece holds the same one word.
        let pieces = if self.grouped {
            &self.pieces[..]
        } else {
            &self.pieces[..1]
        };
        for p in pieces {
            let at = 4 * p.launched as u64;
            let bytes = ctx.read_bytes(&p.words, at, p.words.size() - at)?;
            mask.extend(bytemuck::pod_collect_to_vec::<u8, u32>(&bytes));
        }
        Ok(mask)
    }

    pub fn len(&self) -> usize {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Per piece of the flat buffers, the step counters (one u32 per workgroup; all equal)
    /// in the first words, then the piece's weight-decay mask; and each moment buffer.
    pub fn counters_buffers(&self) -> Vec<&Arc<GpuBuffer>> {
        self.pieces.iter().map(|p| &p.words).collect()
    }

    pub fn moment_buffers(&self) -> &[(&'static str, Arc<GpuBuffer>)] {
        &self.moments
    }
}

/// The step kernel over one piece of the flat buffers (`range`, with its `words` and
/// grid), the moments and what [`Bound`] names.
fn step_kernel(
    ctx: &GpuContext,
    (range, words, wg): (&Range<usize>, &Arc<GpuBuffer>, [u32; 3]),
    moments: &[(&'static str, Arc<GpuBuffer>)],
    b: &Bound,
    hyper: &Hyper,
) -> Result<Kernel> {
    let low = match b.writes_low {
        true => tensor_piece(ctx, &b.low, range)?,
        false => b.low.clone(),
    };
    let mut args = vec![
        ("hyper", Arg::Uniform(bytemuck::bytes_of(hyper))),
        ("scaler", Arg::Buffer(&b.scaler_state)),
        ("words", Arg::Buffer(words)),
        ("param", f32_piece(&b.params, range)),
        ("grad", f32_piece(&b.grads, range)),
    ];
    for (label, buffer) in moments {
        args.push((*label, f32_piece(buffer, range)));
    }
    args.push(("clip_norm", Arg::Buffer(&b.clip_norm)));
    args.push(("low", low.arg()));
    ctx.kernel(&KernelDesc::new(&SHADER, b.entry), &args, wg)
}
