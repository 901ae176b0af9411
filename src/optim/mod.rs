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

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use serde::{Deserialize, Serialize};

mod config;
mod schedule;

pub use config::{AdamSettings, OptimizerConfig, SgdSettings, widen};
pub use schedule::LrSchedule;

use crate::amp::scaler::WORD_FOUND_INF;
use crate::amp::{GradClipper, check_flat_f32};
use crate::error::{Error, Result};
use crate::gpu::{Arg, GpuBuffer, GpuContext, Kernel, KernelDesc, grid_1d};
use crate::shader::{ShaderDecl, f32_only};
use config::{Hyper, check_lr};

pub static SHADER: ShaderDecl = ShaderDecl {
    name: "optim",
    source: include_str!("../../shaders/optim.wgsl"),
    structs: &[Hyper::WGSL],
    // Every variant of the optimizer shader (raw f32 buffers only: one variant).
    variants: f32_only,
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
    /// Weight decay only where `decay_mask` says (parameter groups); everywhere otherwise.
    grouped: bool,
    /// One bit per element: in the weight-decay group (see [`Optimizer::new_grouped`]).
    decay_mask: Arc<GpuBuffer>,
    /// One step counter per workgroup of the step kernel (see `optim.wgsl`).
    counters: Arc<GpuBuffer>,
    /// Named moment buffers: momentum_buffer (SGD with momentum) or exp_avg, exp_avg_sq.
    moments: Vec<(&'static str, Arc<GpuBuffer>)>,
    /// What the step kernel binds besides the above, kept to bind it again
    /// ([`Optimizer::clip_first`]).
    bound: Bound,
    step: Kernel,
}

/// The step kernel's entry point and grid, the buffers the caller owns, and the clip
/// coefficient's.
struct Bound {
    entry: &'static str,
    wg: [u32; 3],
    params: Arc<GpuBuffer>,
    grads: Arc<GpuBuffer>,
    scaler_state: Arc<GpuBuffer>,
    /// A [`GradClipper`]'s norm buffer (`[total_norm, clip_coef]`) when the step multiplies
    /// each gradient by its coefficient; a placeholder of two words otherwise.
    clip_norm: Arc<GpuBuffer>,
    clipped: bool,
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
        let groups = n.div_ceil(WG as usize * EPT);
        let wg = grid_1d(groups * WG as usize, WG);
        let launched = (wg[0] * wg[1] * wg[2]) as u64;
        let counters = ctx.alloc_storage("optim.step_counters", 4 * launched);
        let moment = |label: &'static str| (label, ctx.alloc_storage(label, 4 * n as u64));
        let (entry, moments) = match config {
            OptimizerConfig::Sgd { momentum: 0.0, .. } => ("sgd_step", vec![]),
            OptimizerConfig::Sgd { .. } => ("sgd_momentum_step", vec![moment("momentum_buffer")]),
            OptimizerConfig::Adam { .. } | OptimizerConfig::AdamW { .. } => {
                ("adam_step", vec![moment("exp_avg"), moment("exp_avg_sq")])
            }
        };
        let words: Vec<u32> = match decay {
            Some(d) => d
                .chunks(32)
                .map(|c| c.iter().enumerate().map(|(b, &on)| (on as u32) << b).sum())
                .collect(),
            None => vec![u32::MAX],
        };
        let decay_mask = ctx.alloc_storage("optim.decay_mask", 4 * words.len() as u64);
        ctx.write_buffer(&decay_mask, 0, bytemuck::cast_slice(&words));
        let grouped = decay.is_some();
        let bound = Bound {
            entry,
            wg,
            params: params.clone(),
            grads: grads.clone(),
            scaler_state: scaler_state.clone(),
            clip_norm: ctx.alloc_storage("optim.no_clip", 8),
            clipped: false,
        };
        let hyper = Hyper::new(&config, n, grouped, false);
        let parts = StepParts {
            counters: &counters,
            moments: &moments,
            decay_mask: &decay_mask,
            bound: &bound,
        };
        let step = parts.kernel(ctx, &hyper)?;
        Ok(Self {
            config,
            grouped,
            decay_mask,
            lr: AtomicU32::new(config.lr().to_bits()),
            n,
            counters,
            moments,
            bound,
            step,
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
        let parts = StepParts {
            counters: &self.counters,
            moments: &self.moments,
            decay_mask: &self.decay_mask,
            bound: &self.bound,
        };
        self.step = parts.kernel(ctx, &self.hyper(self.lr()))?;
        Ok(self)
    }

    /// Whether the step applies a clip coefficient itself ([`Optimizer::clip_first`]).
    pub fn clips(&self) -> bool {
        self.bound.clipped
    }

    fn hyper(&self, lr: f32) -> Hyper {
        Hyper::new(
            &self.config.with_lr(lr),
            self.n,
            self.grouped,
            self.bound.clipped,
        )
    }

    /// The fused update: ONE dispatch over all n parameters. Record it after unscale (and
    /// clipping) and before the scaler's update.
    pub fn step_kernel(&self) -> &Kernel {
        &self.step
    }

    /// Change the learning rate for the next recorded steps: one queued write of the small
    /// uniform block, no recompile, no wait.
    pub fn set_lr(&self, ctx: &GpuContext, lr: f32) -> Result<()> {
        check_lr(self.config.name(), lr)?;
        self.lr.store(lr.to_bits(), Ordering::Relaxed);
        let hyper = self.hyper(lr);
        self.step.set_uniform(ctx, bytemuck::bytes_of(&hyper));
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

    /// The weight-decay mask (one bit per element; one all-ones word without groups).
    pub fn decay_mask_buffer(&self) -> &Arc<GpuBuffer> {
        &self.decay_mask
    }

    pub fn len(&self) -> usize {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The step counters (one u32 per workgroup; all equal) and each moment buffer.
    pub fn counters_buffer(&self) -> &Arc<GpuBuffer> {
        &self.counters
    }

    pub fn moment_buffers(&self) -> &[(&'static str, Arc<GpuBuffer>)] {
        &self.moments
    }

    /// Read the state back (asynchronous: also on the web; outside the step loop).
    pub async fn state_async(&self, ctx: &GpuContext) -> Result<OptimizerState> {
        let bytes = ctx
            .read_bytes_async(&self.counters, 0, self.counters.size())
            .await?;
        let step = self.decode_step(&bytes)?;
        let mut moments = Vec::new();
        for (name, buffer) in &self.moments {
            let b = ctx.read_bytes_async(buffer, 0, 4 * self.n as u64).await?;
            moments.push((*name, bytemuck::pod_collect_to_vec::<u8, f32>(&b)));
        }
        Ok(self.assemble(step, moments))
    }

    /// Blocking [`Optimizer::state_async`] (native only).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn state(&self, ctx: &GpuContext) -> Result<OptimizerState> {
        let bytes = ctx.read_bytes(&self.counters, 0, self.counters.size())?;
        let step = self.decode_step(&bytes)?;
        let mut moments = Vec::new();
        for (name, buffer) in &self.moments {
            let b = ctx.read_bytes(buffer, 0, 4 * self.n as u64)?;
            moments.push((*name, bytemuck::pod_collect_to_vec::<u8, f32>(&b)));
        }
        Ok(self.assemble(step, moments))
    }

    fn decode_step(&self, bytes: &[u8]) -> Result<u32> {
        let counters: Vec<u32> = bytemuck::pod_collect_to_vec(bytes);
        let step = counters[0];
        if let Some(other) = counters.iter().find(|&&c| c != step) {
            return Err(Error::Gpu(format!(
                "{} step counters disagree ({step} and {other}): the step kernel was not run whole",
                self.config.name()
            )));
        }
        Ok(step)
    }

    fn assemble(&self, step: u32, moments: Vec<(&'static str, Vec<f32>)>) -> OptimizerState {
        let mut s = OptimizerState {
            step,
            ..Default::default()
        };
        // Before the first applied step PyTorch's state holds no buffers.
        if step > 0 {
            for (name, values) in moments {
                match name {
                    "momentum_buffer" => s.momentum_buffer = Some(values),
                    "exp_avg" => s.exp_avg = Some(values),
                    _ => s.exp_avg_sq = Some(values),
                }
            }
        }
        s
    }

    /// Restore a state (queued writes, no wait). Buffers this optimizer has must be given
    /// with n values each when `step > 0` (for SGD with momentum: when `momentum_buffer` is
    /// given, it counts as at least one applied step); absent ones start from zero.
    pub fn load_state(&mut self, ctx: &GpuContext, s: &OptimizerState) -> Result<()> {
        let name = self.config.name();
        let mut step = s.step;
        let given = |m: &str| match m {
            "momentum_buffer" => s.momentum_buffer.as_ref(),
            "exp_avg" => s.exp_avg.as_ref(),
            _ => s.exp_avg_sq.as_ref(),
        };
        for (label, present) in [
            ("momentum_buffer", s.momentum_buffer.is_some()),
            ("exp_avg", s.exp_avg.is_some()),
            ("exp_avg_sq", s.exp_avg_sq.is_some()),
        ] {
            if present && !self.moments.iter().any(|(m, _)| *m == label) {
                return Err(Error::InvalidArgument(format!(
                    "{name} state: `{label}` does not belong to this optimizer"
                )));
            }
        }
        if matches!(self.config, OptimizerConfig::Sgd { .. }) && s.momentum_buffer.is_some() {
            step = step.max(1);
        }
        for (label, buffer) in &self.moments {
            let values = match given(label) {
                Some(v) if v.len() != self.n => {
                    return Err(Error::InvalidArgument(format!(
                        "{name} state: `{label}` has {} values, want {}",
                        v.len(),
                        self.n
                    )));
                }
                Some(v) => v.clone(),
                None if step > 0 => {
                    return Err(Error::InvalidArgument(format!(
                        "{name} state: step {step} but no `{label}`"
                    )));
                }
                None => vec![0.0; self.n],
            };
            ctx.write_buffer(buffer, 0, bytemuck::cast_slice(&values));
        }
        let counters = vec![step; (self.counters.size() / 4) as usize];
        ctx.write_buffer(&self.counters, 0, bytemuck::cast_slice(&counters));
        Ok(())
    }
}

/// What the step kernel is made of.
struct StepParts<'a> {
    counters: &'a Arc<GpuBuffer>,
    moments: &'a [(&'static str, Arc<GpuBuffer>)],
    decay_mask: &'a Arc<GpuBuffer>,
    bound: &'a Bound,
}

impl StepParts<'_> {
    fn kernel(&self, ctx: &GpuContext, hyper: &Hyper) -> Result<Kernel> {
        let b = self.bound;
        let mut args = vec![
            ("hyper", Arg::Uniform(bytemuck::bytes_of(hyper))),
            ("scaler", Arg::Buffer(&b.scaler_state)),
            ("counters", Arg::Buffer(self.counters)),
            ("param", Arg::Buffer(&b.params)),
            ("grad", Arg::Buffer(&b.grads)),
        ];
        for (label, buffer) in self.moments {
            args.push((*label, Arg::Buffer(buffer)));
        }
        args.push(("decay_mask", Arg::Buffer(self.decay_mask)));
        args.push(("clip_norm", Arg::Buffer(&b.clip_norm)));
        ctx.kernel(&KernelDesc::new(&SHADER, b.entry), &args, b.wg)
    }
}
