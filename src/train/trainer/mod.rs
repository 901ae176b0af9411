//! The trainer: a model, its optimizer and GradScaler planned for training, with buffers,
//! bind groups and pipelines made once per (model, batch size, precision), and the steps it
//! has in flight (`in_flight.rs`). [`Trainer::train_batch`] plans the network for a batch
//! size and uploads the batch; the step itself, its kernels and their order, is `step.rs`.
//!
//! Nothing inside a step waits for the GPU; the host waits only before submitting a step's
//! last micro-batch when every stats slot ([`RING`] by default) is still in flight, and then
//! only for the oldest one ([`Trainer::throttle_waits`]). What else reads back — evaluation,
//! loss estimates, samples, profiles — are functions over a trainer in their own files
//! (`evaluate.rs`, `estimate.rs`, `sample.rs`, `profile.rs`), which plan and run its
//! networks through [`Trainer::network`] and `Trainer::forward_parts`.
//!
//! [`RING`]: super::stats::RING

mod queue;

use super::augmenting::Augmentation;
use super::batch::{BatchInput, BatchTargets, write_batch, write_targets};
use super::config::StepConfig;
use super::host_time::Clock;
use super::in_flight::InFlight;
use super::numerics::passes::NumericsPasses;
pub use super::planning::weight_decay_mask;
use super::planning::{
    batch_error, check_network_fits, check_params_fit, guard_planning, params_error,
};
use super::rank::Exchange;
use super::running::tta::{FlipPlan, FlipTta};
use super::step::{Phase, Step, StepAt, StepKernels};
use crate::amp::cast_in_pieces;
use crate::amp::policy::{Policy, Precision, PrecisionRow};
use crate::amp::scaler::GradScaler;
use crate::error::Result;
use crate::gpu::{GpuContext, Kernel};
use crate::nn::buffers::BufferStore;
use crate::nn::params::{ParamLayout, ParamStore};
use crate::nn::{ModelSpec, Network, NetworkInputs};
use crate::optim::{LrSchedule, Optimizer};
use crate::tensor::DType;

/// The stream of dropout masks: micro-batch `counter` of run `seed` (masks depend only on
/// these, the layer and the element).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DropoutStream {
    pub seed: u64,
    /// Micro-batches trained so far.
    pub counter: u64,
}

/// What a trainer is planned from: the model, the step's configuration, the width of the
/// targets and the initial parameters by PyTorch name.
struct TrainerInputs<'a> {
    spec: ModelSpec,
    config: StepConfig,
    target_dim: usize,
    init: &'a [(String, Vec<f32>)],
}

/// A model, its optimizer and scaler, planned for training.
pub struct Trainer {
    pub spec: ModelSpec,
    pub config: StepConfig,
    pub policy: Policy,
    pub store: ParamStore,
    pub scaler: GradScaler,
    pub optimizer: Optimizer,
    target_dim: usize,
    /// The network planned for each batch size seen so far (forward, loss and backward).
    nets: Vec<Network>,
    /// The evaluation plans ([`Network::build_eval`]) per batch size asked for so far:
    /// validation, prediction and sampling run these.
    evals: Vec<Network>,
    /// The step's other kernels, phase by phase (`step.rs`).
    kernels: StepKernels,
    /// The steps in flight: metrics, stats ring, numerics counts, micro-batch count,
    /// submissions and host times (`in_flight.rs`).
    in_flight: InFlight,
    /// Where the dropout masks of the next micro-batch come from.
    pub dropout: DropoutStream,
    /// The gradient all-reduce of a data-parallel rank (none in a single process).
    exchange: Exchange,
    /// Crops and flips of the training images, in the step (`augmenting.rs`, with their
    /// setters; none: off).
    pub(super) augmentation: Option<Augmentation>,
    /// Flip test-time augmentation of evaluation (`tta.rs`; none: off).
    pub(super) flip_tta: Option<FlipTta>,
    /// Optimizer steps taken before this trainer's first (a resumed run's step): the lr
    /// schedule's position is `step_offset + steps_submitted` ([`Trainer::start_at`]).
    step_offset: u64,
}

impl Trainer {
    /// Plan a trainer. `init` are the initial parameters by PyTorch name. Checks `config`
    /// first ([`StepConfig::validate`]).
    pub fn new(
        ctx: &GpuContext,
        spec: ModelSpec,
        config: StepConfig,
        target_dim: usize,
        init: &[(String, Vec<f32>)],
    ) -> Result<Self> {
        config.validate()?;
        // Before anything is allocated: the flat parameter buffers fit the adapter.
        let params = check_params_fit(ctx, &spec, &spec.name, config.precision, &config.optimizer)?;
        let inputs = TrainerInputs {
            spec,
            config,
            target_dim,
            init,
        };
        guard_planning(ctx, || Self::plan(ctx, inputs)).map_err(|e| params_error(e, params))
    }

    fn plan(ctx: &GpuContext, inputs: TrainerInputs<'_>) -> Result<Self> {
        let TrainerInputs {
            spec,
            config,
            target_dim,
            init,
        } = inputs;
        let policy = crate::nn::keep_f32::policy(&spec, config.precision, config.loss)?;
        let (store, weight_cast) = load_params(ctx, &spec, config.precision, init)?;
        // Frozen parameters sit past the trainable prefix, which is all the optimizer sees.
        let trainable = store.layout.trainable;

        let scaler = GradScaler::new(ctx, config.scaler)?;
        let optimizer = Optimizer::new_grouped(
            ctx,
            config.optimizer,
            &store.master,
            &store.grads,
            trainable,
            scaler.state_buffer(),
            weight_decay_mask(&spec, &store.layout).as_deref(),
        )?;
        let kernels = StepKernels::plan(ctx, &config, (&store, weight_cast), &scaler)?;
        // Clipping: the optimizer's step applies the coefficient (no dispatch of its own).
        let mut optimizer = match kernels.clipper() {
            Some(clipper) => optimizer.clip_first(ctx, clipper)?,
            None => optimizer,
        };
        // Master weights: the optimizer's step writes their compute copy (the cast runs only
        // while it is stale).
        if kernels.folds_weight_cast()
            && let Some(low) = store.low_prefix(ctx, trainable)?
        {
            optimizer = optimizer.write_low_copy(ctx, &low)?;
        }
        let in_flight = InFlight::new(ctx, config.grad_accum, || {
            NumericsPasses::of_model(ctx, &spec, &policy, &config)
        })?;
        Ok(Self {
            spec,
            policy,
            store,
            scaler,
            optimizer,
            target_dim,
            nets: Vec::new(),
            evals: Vec::new(),
            kernels,
            in_flight,
            dropout: DropoutStream::default(),
            step_offset: 0,
            exchange: Exchange::default(),
            augmentation: None,
            flip_tta: None,
            config,
        })
    }

    /// The planned network for a batch size (made on first use, then reused).
    pub fn network(&mut self, ctx: &GpuContext, batch: usize) -> Result<&Network> {
        let i = self.plan_network(ctx, batch)?;
        Ok(&self.nets[i])
    }

    /// The evaluation plan for `batch` (planned on first use: forward only, no dropout,
    /// buffers as committed) and the weight cast to encode before its forward: what a
    /// forward-only pass outside the step runs (validation, prediction, sampling).
    pub(super) fn forward_parts(
        &mut self,
        ctx: &GpuContext,
        batch: usize,
    ) -> Result<(&Network, Option<&Kernel>)> {
        let i = match self.evals.iter().position(|n| n.batch == batch) {
            Some(i) => i,
            None => {
                let inputs = self.network_inputs();
                let seed = self.scaler.state_buffer();
                let planned =
                    guard_planning(ctx, || Network::build_eval(ctx, &inputs, batch, seed));
                let net = planned.map_err(|e| batch_error(e, batch))?;
                self.evals.push(net);
                self.evals.len() - 1
            }
        };
        Ok((&self.evals[i], self.kernels.weight_cast()))
    }

    /// [`Trainer::forward_parts`] and, with flip test-time augmentation, its plan: what
    /// validation runs.
    pub(super) fn eval_parts(
        &mut self,
        ctx: &GpuContext,
        batch: usize,
    ) -> Result<(&Network, Option<&Kernel>, Option<&FlipPlan>)> {
        self.forward_parts(ctx, batch)?;
        let i = self.evals.iter().position(|n| n.batch == batch);
        let net = &self.evals[i.expect("planned by forward_parts")];
        let flip = match &mut self.flip_tta {
            Some(tta) => Some(tta.plan(ctx, net)?),
            None => None,
        };
        Ok((net, self.kernels.weight_cast(), flip))
    }

    /// What the networks are planned from.
    fn network_inputs(&self) -> NetworkInputs<'_> {
        NetworkInputs {
            spec: &self.spec,
            store: &self.store,
            policy: &self.policy,
            loss: self.config.loss,
            label_smoothing: self.config.label_smoothing,
            target_dim: self.target_dim,
            grad_multiplier: self.grad_multiplier(),
        }
    }

    /// Index into `nets` of the network for `batch`, planned on first use. An index, not a
    /// borrow, so callers can use the network together with the trainer's other fields.
    fn plan_network(&mut self, ctx: &GpuContext, batch: usize) -> Result<usize> {
        if let Some(i) = self.nets.iter().position(|n| n.batch == batch) {
            return Ok(i);
        }
        let inputs = self.network_inputs();
        let planned = guard_planning(ctx, || {
            // Before anything is allocated: every buffer and binding fits the adapter.
            if !ctx.is_dry() {
                check_network_fits(ctx, &inputs, batch)?;
            }
            Network::build(ctx, &inputs, batch, self.scaler.state_buffer())
        });
        let net = planned.map_err(|e| batch_error(e, batch))?;
        self.nets.push(net);
        Ok(self.nets.len() - 1)
    }

    /// The factor the loss gradient is seeded with (times the scale): 1 / micro-batches, and
    /// in a data-parallel job 1 / (micro-batches × ranks), so the all-reduce is a plain sum.
    fn grad_multiplier(&self) -> f32 {
        1.0 / (self.config.grad_accum * self.ranks()) as f32
    }

    /// The ranks this trainer's steps are averaged over (1 in a single process).
    pub fn ranks(&self) -> usize {
        self.exchange.ranks()
    }

    /// Continue a run of seed `seed` from optimizer step `step` (a resumed run): the dropout
    /// masks and the lr schedule pick up where a checkpoint at that step left them.
    pub(super) fn start_at(&mut self, seed: u64, step: u64) {
        self.dropout = DropoutStream {
            seed,
            counter: step * self.config.grad_accum as u64,
        };
        self.step_offset = step;
    }

    /// Make this trainer one rank of a data-parallel job: each optimizer step all-reduces
    /// the gradients over `collective` before unscale (`rank/exchange.rs`). Only before the
    /// first step (the backward's seed depends on the number of ranks).
    #[cfg(not(target_arch = "wasm32"))]
    pub(super) fn join(
        &mut self,
        ctx: &GpuContext,
        collective: std::rc::Rc<dyn crate::dist::Collective>,
    ) -> Result<()> {
        if !self.nets.is_empty() || self.steps_submitted() > 0 || self.exchange.is_joined() {
            return Err(crate::error::Error::Distributed(
                "a trainer can join a data-parallel job only before its first step".into(),
            ));
        }
        let accum = self.config.grad_accum;
        let buffers = &self.store.buffers;
        let working =
            (buffers.raw(crate::nn::buffers::Copy::Working)).map(|b| (b.clone(), buffers.words));
        self.exchange = Exchange::joined(ctx, collective, &self.store.grads, accum, working);
        Ok(())
    }

    /// The gradient exchange's counters (`None` in a single process).
    #[cfg(not(target_arch = "wasm32"))]
    pub(super) fn exchange_stats(&self) -> Option<&super::rank::exchange::ExchangeStats> {
        self.exchange.stats()
    }

    /// The network already planned for `batch`, if any (shared borrow, so it can be used
    /// together with [`Trainer::weight_cast_kernel`]).
    pub fn planned_network(&self, batch: usize) -> Option<&Network> {
        self.nets.iter().find(|n| n.batch == batch)
    }

    /// The learning rate of the next optimizer step: the schedule's, or under a constant
    /// schedule the optimizer's current one (which [`Optimizer::set_lr`] may have changed).
    pub fn scheduled_lr(&self) -> f32 {
        match self.config.lr_schedule {
            LrSchedule::Constant => self.optimizer.lr(),
            schedule => schedule.lr(
                self.config.optimizer.lr(),
                self.step_offset + self.in_flight.steps_submitted(),
            ),
        }
    }

    /// Each layer's op, compute dtype, output dtype and inserted casts under this trainer's policy.
    pub fn precision_map(&self) -> Vec<PrecisionRow> {
        crate::nn::precision_map(&self.spec, &self.policy, self.config.loss)
    }

    /// The master → compute-dtype weight cast (None in f32 mode). Encode it before a
    /// forward outside the step (e.g. an asynchronous validation pass) so it sees the
    /// current weights.
    pub fn weight_cast_kernel(&self) -> Option<&Kernel> {
        self.kernels.weight_cast()
    }

    /// The dtype the model's parameters compute in under this trainer's policy.
    pub fn low_dtype(&self) -> DType {
        self.config.precision.low_dtype()
    }

    // The step (`step.rs`).

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
        let grad_accum = self.config.grad_accum;
        if self.in_flight.pending_micro_batches() + 1 == grad_accum {
            // The one wait: for the oldest step, when a whole ring of steps is in flight.
            self.in_flight.wait_for_slot(ctx)?;
        }
        let encoding = Clock::now();
        let i = self.plan_network(ctx, batch)?;
        let net = &self.nets[i];
        // Numerics on: the counting passes of this batch size (made once).
        self.in_flight.plan_numerics(ctx, net)?;
        let at = StepAt {
            step: self.step_offset + self.in_flight.steps_submitted() + 1,
            grad_accum,
            lr: self.scheduled_lr(),
        };
        // With augmentation, the step's first kernel writes the network's input.
        let augment = match &mut self.augmentation {
            None => {
                write_batch(ctx, net, x, &targets)?;
                None
            }
            Some(augmentation) => {
                write_targets(ctx, net, &targets)?;
                Some(augmentation.write(ctx, net, x.into())?)
            }
        };
        // Dropout masks of micro-batch `counter`: the same whatever the precision, and
        // again after a resume ([`Trainer::start_at`] positions the counter).
        net.set_dropout(ctx, self.dropout.seed, self.dropout.counter, true);
        self.dropout.counter += 1;
        let step = Step {
            net,
            augment,
            kernels: &self.kernels,
            grads: &self.store.grads,
            scaler: &self.scaler,
            optimizer: &mut self.optimizer,
            exchange: &mut self.exchange,
            in_flight: &mut self.in_flight,
        };
        step.record(ctx, at, encoding, overlap)
    }

    /// Every kernel of one optimizer step (one micro-batch) at `batch` with its phase, in the
    /// order [`Trainer::train_batch`] records them, for per-kernel profiling. Running them
    /// changes the parameters like a real step does (profile a trainer whose state does not
    /// matter).
    pub fn step_phases(&mut self, ctx: &GpuContext, batch: usize) -> Result<Vec<(Phase, &Kernel)>> {
        let i = self.plan_network(ctx, batch)?;
        let augment = self.augmentation.as_ref().and_then(|a| a.kernel(batch));
        Ok(self
            .kernels
            .phases((&self.nets[i], augment, &self.optimizer, &self.scaler)))
    }

    /// [`Trainer::step_phases`] without the phases.
    pub fn step_kernels(&mut self, ctx: &GpuContext, batch: usize) -> Result<Vec<&Kernel>> {
        let phases = self.step_phases(ctx, batch)?;
        Ok(phases.into_iter().map(|(_, k)| k).collect())
    }
}

/// The parameter store of `spec` under `precision` holding `init` (by PyTorch name), and the
/// kernel that casts its master weights to the compute dtype (none without a low copy). Pure
/// f16 keeps f16-valued parameters from the start.
pub(super) fn load_params(
    ctx: &GpuContext,
    spec: &ModelSpec,
    precision: Precision,
    init: &[(String, Vec<f32>)],
) -> Result<(ParamStore, Option<Kernel>)> {
    let low = precision.low_dtype();
    let named: Vec<(String, Vec<usize>)> = spec
        .parameters()
        .into_iter()
        .map(|p| (p.name, p.shape))
        .collect();
    let align = ParamLayout::element_alignment(ctx);
    let layout = ParamLayout::with_frozen(&named, &spec.frozen, align);
    let buffers = BufferStore::new(ctx, &spec.buffers())?;
    let store = ParamStore::new(ctx, layout, Some(low)).with_buffers(buffers);
    let init: Vec<(String, Vec<f32>)> = if precision.master_weights() {
        init.to_vec()
    } else {
        init.iter()
            .map(|(n, v)| (n.clone(), v.iter().map(|&x| low.round(x)).collect()))
            .collect()
    };
    store.upload(ctx, &init)?;
    let weight_cast = match store.low_flat(ctx)? {
        Some(low_flat) => Some(cast_in_pieces(ctx, &store.master_flat(ctx)?, &low_flat)?),
        None => None,
    };
    Ok((store, weight_cast))
}
