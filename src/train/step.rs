//! One training step, in order: PyTorch's `scale(loss) → backward → unscale → (clip) → step
//! → update`, recorded llm.c-style into one command buffer per micro-batch and submitted
//! once, with nothing waiting for the GPU inside it.
//!
//! A step of `grad_accum` micro-batches records, in each micro-batch's command buffer:
//!
//! 1. **begin** (the step's first micro-batch): zero the gradients, note the scale the
//!    backward is seeded with, reset the found-inf flag, cast the master weights to the
//!    compute dtype ([`Phase::Setup`]);
//! 2. **forward**: the network's layers in order (`nn/network.rs`);
//! 3. **loss**: the loss and its gradient, seeded with `scale / micro-batches`;
//! 4. **backward**: the layers' backward in reverse, accumulating into the flat gradients;
//!    then the micro-batch's loss goes into the step's metrics. A micro-batch that does not
//!    end the step is submitted here.
//!
//!    A rank of a data-parallel job submits here too and all-reduces the gradients
//!    (`rank.rs`; a single process does nothing).
//! 5. **unscale**: gradients × 1/scale and the inf/NaN check (pure f16: rounding too);
//! 6. **clip**: to the global norm, after unscaling (when asked for);
//! 7. **optimizer**: one dispatch over every parameter, skipped on inf/NaN;
//! 8. **scale update**: the GradScaler's growth or backoff;
//! 9. **stats**: found-inf and the new scale into the metrics, the metrics into a slot of
//!    the stats ring (`stats.rs`), the learning rate written ahead; one submit.
//!
//! [`Phase::ALL`] is this order and `Trainer::phase_kernels` the kernels of each phase:
//! [`Trainer::train_batch`] records them and `--profile` times them
//! ([`Trainer::step_phases`]), so the order is written once, here.

use super::batch::{BatchInput, BatchTargets, write_batch};
use super::host_time::Clock;
use super::numerics::passes::Pass;
use super::rank::StepBuffers;
use super::stats::METRIC_LOSSES;
use super::trainer::Trainer;
use crate::error::Result;
use crate::gpu::{GpuContext, Kernel};
use crate::nn::Network;

/// The part of a step a kernel belongs to, in the order a step records them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Reset the step's found-inf flag, cast the master weights.
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

impl Trainer {
    /// Train on one micro-batch of `batch` samples: one submit. Every `grad_accum`
    /// micro-batches this completes an optimizer step, in the last micro-batch's submit.
    /// Never waits inside the step; before a step's last micro-batch, when every stats slot
    /// is still in flight (the GPU is that many steps behind), native code waits for the
    /// oldest slot's submission only and counts it ([`Trainer::throttle_waits`]); on the web
    /// that is an error (check [`Trainer::can_submit`] first).
    pub fn train_batch<'x>(
        &mut self,
        ctx: &GpuContext,
        batch: usize,
        x: impl Into<BatchInput<'x>>,
        targets: BatchTargets<'_>,
    ) -> Result<()> {
        self.train_batch_overlapped(ctx, batch, x, targets, &mut || {})
    }

    /// [`Trainer::train_batch`]; on a data-parallel rank, `overlap` runs while the step's
    /// gradients are all-reduced (host work that does not depend on them, such as gathering
    /// the next batch). In a single process it never runs.
    pub fn train_batch_overlapped<'x>(
        &mut self,
        ctx: &GpuContext,
        batch: usize,
        x: impl Into<BatchInput<'x>>,
        targets: BatchTargets<'_>,
        overlap: &mut dyn FnMut(),
    ) -> Result<()> {
        let micro = self.in_flight.pending_micro_batches();
        let first = micro == 0;
        let last = micro + 1 == self.config.grad_accum;
        if last {
            // The one wait: for the oldest step, when a whole ring of steps is in flight.
            self.in_flight.wait_for_slot(ctx)?;
        }
        let encoding = Clock::now();
        let i = self.plan_network(ctx, batch)?;
        // Numerics on: this step's counting passes (made once per batch size), when counted.
        let step = self.step_offset + self.in_flight.steps_submitted() + 1;
        self.in_flight.plan_numerics(ctx, &self.nets[i])?;
        let numerics = self.in_flight.numerics();
        let counted = numerics.is_some_and(|n| n.counts(step));
        let net = &self.nets[i];
        write_batch(ctx, net, x, &targets)?;
        // Dropout masks of micro-batch `counter`: the same whatever the precision, and
        // again after a resume (Run positions the counter).
        net.set_dropout(ctx, self.dropout.seed, self.dropout.counter, true);
        self.dropout.counter += 1;

        let mut encoder = ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("step"),
            });
        // 1. Begin: zero the gradients; the scale this step's backward uses (metrics word 0).
        if first {
            encoder.clear_buffer(self.store.grads.raw(), 0, None);
            let scale = self.scaler.state_buffer().raw();
            encoder.copy_buffer_to_buffer(scale, 0, self.in_flight.metrics().raw(), 0, 4);
            if let Some(n) = numerics.filter(|_| counted) {
                encoder.clear_buffer(n.buffer().raw(), 0, None);
            }
        }
        // 1–4. Setup, forward, loss, backward: one compute pass.
        let counting = counted.then_some(last);
        self.encode(&mut encoder, net, counting, |r| {
            r == Records::Every || (first && r == Records::First)
        });
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
                grads: &self.store.grads,
                metrics: self.in_flight.metrics(),
                scaler_state: self
                    .scaler
                    .enabled()
                    .then_some(&**self.scaler.state_buffer()),
            };
            encoder = self.exchange.all_reduce(ctx, encoder, step, overlap)?;
            self.in_flight.count_submission();
        }
        // 5–8. Unscale, clip, optimizer, scale update: one compute pass.
        let net = &self.nets[i];
        self.encode(&mut encoder, net, None, |r| r == Records::Last);

        // 9. Stats: found_inf (state word 2), then the updated scale (word 0), into the
        // metrics; the metrics into a slot of the stats ring.
        let (state, metrics) = (self.scaler.state_buffer().raw(), self.in_flight.metrics());
        encoder.copy_buffer_to_buffer(state, 8, metrics.raw(), 4, 4);
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
        let lr = self.scheduled_lr();
        if lr.to_bits() != self.optimizer.lr().to_bits() {
            self.optimizer.set_lr(ctx, lr)?;
        }
        let step = (self.config.grad_accum, lr);
        self.in_flight
            .submit_step(ctx, encoder, step, numerics_at, encoding)
    }

    /// Record the kernels of the phases `recorded` picks, in step order, into one compute
    /// pass of `encoder`; with `counting` (numerics counted this step: `Some(last
    /// micro-batch)`), each tensor's counting pass right after the kernels that complete it.
    fn encode(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        net: &Network,
        counting: Option<bool>,
        recorded: impl Fn(Records) -> bool,
    ) {
        let mut pass = encoder.begin_compute_pass(&Default::default());
        for phase in Phase::ALL.into_iter().filter(|p| recorded(p.records())) {
            let kernels = self.phase_kernels(net, phase);
            let counted = match phase {
                Phase::Forward => Pass::Forward,
                Phase::Backward => Pass::Backward,
                _ => {
                    kernels.iter().for_each(|k| k.encode(&mut pass));
                    continue;
                }
            };
            let kernels = match (counting, self.in_flight.numerics()) {
                (Some(last), Some(n)) => n.interleave(net.batch, counted, kernels, last),
                _ => kernels,
            };
            for k in kernels {
                k.encode(&mut pass);
            }
        }
    }

    /// The kernels of `phase` in a step of `net`, in order.
    fn phase_kernels<'a>(&'a self, net: &'a Network, phase: Phase) -> Vec<&'a Kernel> {
        match phase {
            Phase::Setup => std::iter::once(&self.begin_step)
                .chain(&self.weight_cast)
                .collect(),
            Phase::Forward => net.forward_kernels().collect(),
            Phase::Loss => net.loss_kernels().collect(),
            Phase::Backward => net.backward_kernels().collect(),
            Phase::Unscale => self.round_grads.iter().chain(&self.unscale).collect(),
            Phase::Clip => self.clipper.iter().flat_map(|c| c.kernels()).collect(),
            Phase::Optimizer => std::iter::once(self.optimizer.step_kernel())
                .chain(&self.round_params)
                .collect(),
            Phase::ScaleUpdate => self.update.iter().collect(),
        }
    }

    /// Every kernel of one optimizer step (one micro-batch) at `batch` with its phase, in the
    /// order [`Trainer::train_batch`] records them, for per-kernel profiling. Running them
    /// changes the parameters like a real step does (profile a trainer whose state does not
    /// matter).
    pub fn step_phases(&mut self, ctx: &GpuContext, batch: usize) -> Result<Vec<(Phase, &Kernel)>> {
        let i = self.plan_network(ctx, batch)?;
        let net = &self.nets[i];
        Ok(Phase::ALL
            .into_iter()
            .flat_map(|phase| {
                let kernels = self.phase_kernels(net, phase);
                kernels.into_iter().map(move |k| (phase, k))
            })
            .collect())
    }

    /// [`Trainer::step_phases`] without the phases.
    pub fn step_kernels(&mut self, ctx: &GpuContext, batch: usize) -> Result<Vec<&Kernel>> {
        let phases = self.step_phases(ctx, batch)?;
        Ok(phases.into_iter().map(|(_, k)| k).collect())
    }
}
