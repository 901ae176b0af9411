//! One training step, in order: PyTorch's `scale(loss) → backward → unscale → (clip) → step
//! → update`, recorded llm.c-style into one command buffer per micro-batch and submitted
//! once, with nothing waiting for the GPU inside it.
//!
//! A step of `grad_accum` micro-batches records, in each micro-batch's command buffer:
//!
//! 1. **begin** (the step's first micro-batch): zero the gradients, note the scale the
//!    backward is seeded with, cast the master weights to the compute dtype
//!    ([`Phase::Setup`]) where the copy is stale (with master weights the optimizer writes
//!    it, so only the first step and a step after a host write of the weights cast); the
//!    found-inf flag was reset by the previous step's scale update,
//!    and is reset here only where something else may have set it since (an unscale
//!    outside a step: [`GradScaler::begin_pending`], the first step included);
//! 2. **forward**: the network's layers in order (`nn/network.rs`);
//! 3. **loss**: the loss and its gradient, seeded with `scale / micro-batches`;
//! 4. **backward**: the layers' backward in reverse, accumulating into the flat gradients;
//!    then the micro-batch's loss goes into the step's metrics. A micro-batch that does not
//!    end the step is submitted here.
//!
//!    A rank of a data-parallel job submits here too and all-reduces the gradients
//!    (`rank.rs`; a single process does nothing).
//! 5. **unscale**: gradients × 1/scale and the inf/NaN check (pure f16: rounding too);
//! 6. **clip**: the global norm and the clip coefficient, after unscaling (when asked for);
//! 7. **optimizer**: one dispatch over every parameter, skipped on inf/NaN; when clipping,
//!    it multiplies each gradient by the coefficient first (`Optimizer::clip_first`: the
//!    gradient buffer keeps the unclipped values); with master weights it also writes their
//!    compute-dtype copy (`Optimizer::write_low_copy`); then, for a model with buffers, one
//!    dispatch commits what the forwards wrote to them, or on inf/NaN rolls it back
//!    (`nn::buffers`);
//! 8. **scale update**: found-inf into the metrics first; then the GradScaler's growth or
//!    backoff, which also resets found-inf for the next step;
//! 9. **stats**: the new scale into the metrics, the metrics into a slot of the stats ring
//!    (`stats.rs`), the learning rate written ahead; one submit.
//!
//! [`Phase::ALL`] is this order. The kernels of the phases the network does not hold
//! (begin, weight cast, gradient rounding, unscale, clipping, parameter rounding, scale
//! update) are [`StepKernels`], made once when the trainer is planned, phase by phase in
//! this order; the network's forward, loss and backward are planned once per batch size
//! (`nn/network.rs`). [`StepKernels::of_phase`] hands out each phase's kernels, right below
//! where they are made: [`Step::record`] records a micro-batch through them and `--profile`
//! times them ([`Trainer::step_phases`]), so the order is written once, here. The trainer
//! ([`Trainer::train_batch`]) plans the network for the batch size, uploads the batch and
//! hands its parts to [`Step`]; what the step submits is counted in `in_flight.rs`.
//!
//! [`Trainer::step_phases`]: crate::train::trainer::Trainer::step_phases
//! [`Trainer::train_batch`]: crate::train::trainer::Trainer::train_batch

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::amp::GradClipper;
use crate::amp::round::round_inplace;
use crate::amp::scaler::GradScaler;
use crate::error::Result;
use crate::gpu::{GpuBuffer, GpuContext, Kernel};
use crate::nn::Network;
use crate::nn::params::ParamStore;
use crate::optim::Optimizer;
use crate::train::config::StepConfig;
use crate::train::host_time::Clock;
use crate::train::in_flight::InFlight;
use crate::train::numerics::passes::Pass;
use crate::train::rank::{Exchange, StepBuffers};
use crate::train::stats::METRIC_LOSSES;

/// The part of a step a kernel belongs to, in the order a step records them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Cast the master weights where the copy is stale (and, when pending, reset the step's
    /// found-inf flag).
    Setup,
    Forward,
    /// The loss and its scale-seeded gradient.
    Loss,
    Backward,
    /// Unscale and inf/NaN check (and, in pure f16, rounding the gradients).
    Unscale,
    Clip,
    /// The optimizer step (and, in pure f16, rounding the parameters).
    Optimizer,
    ScaleUpdate,
}

/// Which micro-batches of a step record a phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Records {
    /// The step's first micro-batch only.
    First,
    Every,
    /// The step's last micro-batch only, after the gradients are complete.
    Last,
}

impl Phase {
    /// The phases in the order a step records them.
    pub const ALL: [Phase; 8] = [
        Phase::Setup,
        Phase::Forward,
        Phase::Loss,
        Phase::Backward,
        Phase::Unscale,
        Phase::Clip,
        Phase::Optimizer,
        Phase::ScaleUpdate,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Phase::Setup => "setup",
            Phase::Forward => "forward",
            Phase::Loss => "loss",
            Phase::Backward => "backward",
            Phase::Unscale => "unscale",
            Phase::Clip => "clip",
            Phase::Optimizer => "optimizer",
            Phase::ScaleUpdate => "scale-update",
        }
    }

    fn records(self) -> Records {
        match self {
            Phase::Setup => Records::First,
            Phase::Forward | Phase::Loss | Phase::Backward => Records::Every,
            Phase::Unscale | Phase::Clip | Phase::Optimizer | Phase::ScaleUpdate => Records::Last,
        }
    }
}

/// The kernels a step records besides the network's, made once when the trainer is planned,
/// phase by phase in step order ([`Phase::ALL`]).
pub(in crate::train) struct StepKernels {
    /// [`Phase::Setup`]: reset the step's found-inf flag (the GradScaler's begin; only when
    /// [`GradScaler::begin_pending`]: the scale update resets it otherwise), then cast every
    /// master weight to the compute dtype, one dispatch (none in f32).
    begin_step: Kernel,
    weight_cast: Option<Kernel>,
    /// With master weights, the optimizer's step writes the compute copy
    /// ([`Optimizer::write_low_copy`]) and the cast runs only while this (the store's
    /// staleness flag: the first step, a host write of the weights since) is set. None:
    /// the cast runs every step (pure f16 rounds the parameters after the optimizer).
    low_stale: Option<Arc<AtomicBool>>,
    /// [`Phase::Unscale`]: pure f16 rounds the gradients to f16 values; then the
    /// GradScaler's unscale and inf/NaN check (scaler on).
    round_grads: Option<Kernel>,
    unscale: Option<Kernel>,
    /// [`Phase::Clip`]: the global norm and clip coefficient (when asked for); the
    /// optimizer's step applies the coefficient ([`Optimizer::clip_first`]).
    clipper: Option<GradClipper>,
    /// [`Phase::Optimizer`]: after the optimizer's own step kernel, pure f16 rounds the
    /// parameters to f16 values; then the layers' buffers are committed, or rolled back
    /// when found-inf skips the step (`nn::buffers`; none without buffers).
    round_params: Option<Kernel>,
    commit_buffers: Option<Kernel>,
    /// [`Phase::ScaleUpdate`]: the GradScaler's growth or backoff, then found-inf reset for
    /// the next step (scaler on).
    update: Option<Kernel>,
}

impl StepKernels {
    /// The kernels of a step over `store` under `config`, in phase order. `weight_cast`
    /// comes with the store (`trainer::load_params`, which `sample`'s generator shares).
    pub(in crate::train) fn plan(
        ctx: &GpuContext,
        config: &StepConfig,
        (store, weight_cast): (&ParamStore, Option<Kernel>),
        scaler: &GradScaler,
    ) -> Result<Self> {
        let (grads, master) = (&store.grads, &store.master);
        // Gradients exist for the trainable prefix only (frozen parameters sit past it).
        let (total, trainable) = (store.layout.total, store.layout.trainable);
        let low = config.precision.low_dtype();
        let rounded = !config.precision.master_weights();
        let round = |values: &Arc<GpuBuffer>, n: usize| {
            let kernel = rounded.then(|| round_inplace(ctx, values, n, low));
            kernel.transpose()
        };
        let scaled = scaler.enabled();
        // Setup.
        let begin_step = scaler.begin_step_kernel(ctx)?;
        let folds_cast = config.precision.master_weights() && weight_cast.is_some();
        let low_stale = folds_cast.then(|| store.low_staleness().clone());
        // Forward, loss and backward are the network's (per batch size).
        // Unscale.
        let round_grads = round(grads, trainable)?;
        let unscale = scaled.then(|| scaler.unscale_kernel(ctx, grads, trainable));
        // Clip.
        let clip = config.clip_norm();
        let clipper = clip.map(|max| GradClipper::new(ctx, grads, trainable, max));
        // Optimizer: its step is the optimizer's kernel, made with it.
        let round_params = round(master, total)?;
        // A skipped step rolls the buffers back, or keeps them as PyTorch does (pytorch#88474).
        let commit_buffers =
            store
                .buffers
                .commit_kernel(ctx, scaler.state_buffer(), config.buffers_on_skip)?;
        // Scale update.
        let update = scaled.then(|| scaler.update_then_begin_kernel(ctx));
        Ok(Self {
            begin_step,
            weight_cast,
            low_stale,
            round_grads,
            unscale: unscale.transpose()?,
            clipper: clipper.transpose()?,
            round_params,
            commit_buffers,
            update: update.transpose()?,
        })
    }

    /// The gradient clipper (when clipping is asked for), whose coefficient the optimizer
    /// applies ([`Optimizer::clip_first`]).
    pub(in crate::train) fn clipper(&self) -> Option<&GradClipper> {
        self.clipper.as_ref()
    }

    /// The master → compute-dtype weight cast (none in f32 mode).
    pub(in crate::train) fn weight_cast(&self) -> Option<&Kernel> {
        self.weight_cast.as_ref()
    }

    /// Whether the optimizer's step should write the weights' compute copy (then the cast
    /// runs only while the copy is stale).
    pub(in crate::train) fn folds_weight_cast(&self) -> bool {
        self.low_stale.is_some()
    }

    /// Whether a step of `optimizer` must cast the weights: its step does not write the
    /// compute copy, or the copy is stale.
    fn casts_weights(&self, optimizer: &Optimizer) -> bool {
        match &self.low_stale {
            Some(stale) if optimizer.writes_low_copy() => stale.load(Ordering::Relaxed),
            _ => true,
        }
    }

    /// The kernels of `phase` in a step of `net` (its batch augmented by `augment`, when
    /// set) updated by `optimizer` under `scaler`, in order.
    pub(in crate::train) fn of_phase<'a>(
        &'a self,
        (net, augment, optimizer, scaler): Parts<'a, '_>,
        phase: Phase,
    ) -> Vec<&'a Kernel> {
        match phase {
            Phase::Setup => {
                let cast = self
                    .weight_cast
                    .iter()
                    .filter(|_| self.casts_weights(optimizer));
                (scaler.begin_pending().then_some(&self.begin_step))
                    .into_iter()
                    .chain(cast)
                    .collect()
            }
            Phase::Forward => augment.into_iter().chain(net.forward_kernels()).collect(),
            Phase::Loss => net.loss_kernels().collect(),
            Phase::Backward => net.backward_kernels().collect(),
            Phase::Unscale => self.round_grads.iter().chain(&self.unscale).collect(),
            // The coefficient is applied by the optimizer's step when it clips.
            Phase::Clip => match &self.clipper {
                Some(c) if optimizer.clips() => c.norm_kernels().iter().collect(),
                Some(c) => c.kernels().iter().collect(),
                None => Vec::new(),
            },
            Phase::Optimizer => (optimizer.step_kernels().into_iter())
                .chain(&self.round_params)
                .chain(&self.commit_buffers)
                .collect(),
            Phase::ScaleUpdate => self.update.iter().collect(),
        }
    }

    /// Every kernel of one optimizer step of one micro-batch with its phase, in the order
    /// [`Step::record`] records them.
    pub(in crate::train) fn phases<'a>(&'a self, parts: Parts<'a, '_>) -> Vec<(Phase, &'a Kernel)> {
        Phase::ALL
            .into_iter()
            .flat_map(|phase| {
                let kernels = self.of_phase(parts, phase);
                kernels.into_iter().map(move |k| (phase, k))
            })
            .collect()
    }
}

/// What a step's kernels depend on besides [`StepKernels`]: the network, the augmentation
/// kernel (the forward's first; none without augmentation), the optimizer and the scaler.
pub(in crate::train) type Parts<'a, 'b> = (
    &'a Network,
    Option<&'a Kernel>,
    &'a Optimizer,
    &'b GradScaler,
);

/// Where a micro-batch stands: the optimizer step it belongs to (1-based over the run, as
/// the lr schedule and the AMP doctor count), the micro-batches of a step, and the
/// learning rate of that step.
pub(in crate::train) struct StepAt {
    pub(in crate::train) step: u64,
    pub(in crate::train) grad_accum: usize,
    pub(in crate::train) lr: f32,
}

/// A trainer's parts that recording one micro-batch reads and writes, borrowed apart: the
/// network planned for its batch size (the batch already uploaded), the step's kernels,
/// the flat gradients, the GradScaler, the optimizer (its learning rate is written ahead),
/// the gradient all-reduce, and the steps in flight.
pub(in crate::train) struct Step<'a> {
    pub(in crate::train) net: &'a Network,
    /// Writes the augmented batch into the network's input (none without augmentation).
    pub(in crate::train) augment: Option<&'a Kernel>,
    pub(in crate::train) kernels: &'a StepKernels,
    pub(in crate::train) grads: &'a GpuBuffer,
    pub(in crate::train) scaler: &'a GradScaler,
    pub(in crate::train) optimizer: &'a mut Optimizer,
    pub(in crate::train) exchange: &'a mut Exchange,
    pub(in crate::train) in_flight: &'a mut InFlight,
}

impl Step<'_> {
    /// Record the micro-batch's phases in order and submit them (two submissions on a
    /// data-parallel rank's last micro-batch); nothing waits for the GPU. `encoding`: when
    /// the host started on this micro-batch. On a rank, `overlap` runs during the
    /// all-reduce.
    pub(in crate::train) fn record(
        self,
        ctx: &GpuContext,
        at: StepAt,
        encoding: Clock,
        overlap: &mut dyn FnMut(),
    ) -> Result<()> {
        let micro = self.in_flight.pending_micro_batches();
        let (first, last) = (micro == 0, micro + 1 == at.grad_accum);
        // Numerics on: this step's counting passes, when counted.
        let numerics = self.in_flight.numerics();
        let counted = numerics.is_some_and(|n| n.counts(at.step));
        let mut encoder = ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("step"),
            });
        // 1. Begin: zero the gradients; the scale this step's backward uses (metrics word 0).
        if first {
            encoder.clear_buffer(self.grads.raw(), 0, None);
            let scale = self.scaler.state_buffer().raw();
            encoder.copy_buffer_to_buffer(scale, 0, self.in_flight.metrics().raw(), 0, 4);
            if let Some(n) = numerics.filter(|_| counted) {
                encoder.clear_buffer(n.buffer().raw(), 0, None);
            }
        }
        // 1–4. Setup, forward, loss, backward: one compute pass. A pending begin is recorded
        // now (Setup reads it), and taken.
        let counting = counted.then_some(last);
        self.encode(&mut encoder, counting, |p| {
            p.records() == Records::Every || (first && p.records() == Records::First)
        });
        if first {
            self.scaler.clear_begin_pending();
            // The cast (if Setup recorded it) makes the copy fresh.
            if let Some(stale) = &self.kernels.low_stale {
                stale.store(false, Ordering::Relaxed);
            }
        }
        let net = self.net;
        let loss = (net.loss.buffer().raw(), net.loss.byte_offset());
        let word = METRIC_LOSSES + micro as u64;
        let metrics = self.in_flight.metrics();
        encoder.copy_buffer_to_buffer(loss.0, loss.1, metrics.raw(), 4 * word, 4);
        if !last {
            self.in_flight.submit_micro_batch(ctx, encoder, encoding);
            return Ok(());
        }

        // A data-parallel rank submits forward + backward here, waits for them and sums the
        // gradients over the ranks; the rest of the step goes in a second submission.
        if self.exchange.is_joined() {
            let step = StepBuffers {
                grads: self.grads,
                metrics: self.in_flight.metrics(),
                scaler_state: self
                    .scaler
                    .enabled()
                    .then_some(&**self.scaler.state_buffer()),
            };
            encoder = self.exchange.all_reduce(ctx, encoder, step, overlap)?;
            self.in_flight.count_submission();
        }
        // 5–7. Unscale, clip, optimizer: one compute pass; then found_inf (state word 2)
        // into the metrics, before the scale update resets it.
        let last_phase = |p: Phase| p.records() == Records::Last;
        self.encode(&mut encoder, None, |p| {
            last_phase(p) && p != Phase::ScaleUpdate
        });
        let (state, metrics) = (self.scaler.state_buffer().raw(), self.in_flight.metrics());
        encoder.copy_buffer_to_buffer(state, 8, metrics.raw(), 4, 4);
        // 8. Scale update: a compute pass of its own.
        self.encode(&mut encoder, None, |p| p == Phase::ScaleUpdate);

        // 9. Stats: the updated scale (word 0) into the metrics; the metrics into a slot of
        // the stats ring.
        encoder.copy_buffer_to_buffer(state, 0, metrics.raw(), 8, 4);
        let slot = self.in_flight.next_slot()?;
        encoder.copy_buffer_to_buffer(metrics.raw(), 0, slot.raw(), 0, metrics.size());
        // A counted step's numerics ride home in the same slot, after the metrics.
        let numerics_at = match self.in_flight.numerics().filter(|_| counted) {
            Some(n) => {
                let (at, counts) = (metrics.size(), n.buffer());
                encoder.copy_buffer_to_buffer(counts.raw(), 0, slot.raw(), at, counts.size());
                Some(at as usize / 4)
            }
            None => None,
        };
        // This step's learning rate, written ahead: the queued write lands before this
        // submit's commands and after the previous step's.
        if at.lr.to_bits() != self.optimizer.lr().to_bits() {
            self.optimizer.set_lr(ctx, at.lr)?;
        }
        let step = (at.grad_accum, at.lr);
        self.in_flight
            .submit_step(ctx, encoder, step, numerics_at, encoding)
    }

    /// Record the kernels of the phases `recorded` picks, in step order, into one compute
    /// pass of `encoder`; with `counting` (numerics counted this step: `Some(last
    /// micro-batch)`), the counting passes where their tensors are complete.
    fn encode(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        counting: Option<bool>,
        recorded: impl Fn(Phase) -> bool,
    ) {
        let mut pass = encoder.begin_compute_pass(&Default::default());
        let parts = (self.net, self.augment, &*self.optimizer, self.scaler);
        for phase in Phase::ALL.into_iter().filter(|&p| recorded(p)) {
            let kernels = self.kernels.of_phase(parts, phase);
            let counted = match phase {
                Phase::Forward => Pass::Forward,
                Phase::Backward => Pass::Backward,
                _ => {
                    kernels.iter().for_each(|k| k.encode(&mut pass));
                    continue;
                }
            };
            let kernels = match (counting, self.in_flight.numerics()) {
                (Some(last), Some(n)) => {
                    // The augmentation is data, not a layer: before the counted forward.
                    let data = usize::from(phase == Phase::Forward && self.augment.is_some());
                    let layers = kernels[data..].to_vec();
                    let counted = n.interleave(self.net.batch, counted, layers, last);
                    kernels[..data].iter().copied().chain(counted).collect()
                }
                _ => kernels,
            };
            for k in kernels {
                k.encode(&mut pass);
            }
        }
    }
}
