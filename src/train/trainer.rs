//! The planned training step: `scale(loss) → backward → unscale → (clip) → step → update`,
//! with buffers, bind groups and pipelines made once per (model, batch size, precision).
//!
//! Submission rule: one command buffer per micro-batch, submitted once. The first
//! micro-batch of an optimizer step also clears the gradients, resets the step's found-inf
//! flag and casts the master weights; the last one (the only one without gradient
//! accumulation) also carries unscale, clipping, the optimizer step, the scale update and
//! the copy of the step's metrics into the stats ring ([`super::stats`]). Nothing inside a
//! step waits for the GPU; the host waits only before submitting a step's last micro-batch
//! when every stats slot ([`RING`] by default) is still in flight, and then only for the
//! oldest one ([`Trainer::throttle_waits`]). A rank of a data-parallel job
//! ([`Trainer::distribute`], native) splits the last micro-batch's submission in two around
//! the gradient all-reduce, and waits there (`super::distributed`).

use std::sync::Arc;

use crate::amp::GradClipper;
use crate::amp::policy::{Policy, Precision};
use crate::amp::round::round_inplace;
use crate::amp::scaler::{GradScaler, ScalerConfig};
use crate::error::{Error, Result};
use crate::gpu::{GpuBuffer, GpuContext, Kernel};
use crate::nn::ModelSpec;
use crate::nn::params::{ParamLayout, ParamStore};
use crate::nn::{LossKind, Network};
use crate::ops::elementwise;
use crate::optim::{LrSchedule, Optimizer, OptimizerConfig};
use crate::tensor::DType;

mod in_flight;
mod sample;

pub use sample::{MAX_SAMPLE_TOKENS, SampleRequest};

use super::batch::{BatchInput, BatchTargets};
pub use super::planning::weight_decay_mask;
use super::planning::{batch_error, check_params_fit, guard_planning, params_error};
use super::profile::{Clock, HostTimes};
use super::run::MAX_GRAD_ACCUM;
use super::stats::{METRIC_LOSSES, RING, StatsRing};

/// Everything that shapes a training step.
#[derive(Clone, Debug)]
pub struct StepConfig {
    pub precision: Precision,
    pub loss: LossKind,
    pub optimizer: OptimizerConfig,
    pub scaler: ScalerConfig,
    /// Clip gradients to this global L2 norm, after unscaling.
    pub clip_grad_norm: Option<f32>,
    /// Micro-batches per optimizer step.
    pub grad_accum: usize,
    /// The learning rate of each optimizer step, from the optimizer's (written ahead of the
    /// step's last submit).
    pub lr_schedule: LrSchedule,
}

/// The stream of dropout masks: micro-batch `counter` of run `seed` (masks depend only on
/// these, the layer and the element).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DropoutStream {
    pub seed: u64,
    /// Micro-batches trained so far.
    pub counter: u64,
}

/// A model, its optimizer and scaler, planned for training.
pub struct Trainer {
    pub spec: ModelSpec,
    pub config: StepConfig,
    pub policy: Policy,
    pub store: ParamStore,
    pub scaler: GradScaler,
    pub optimizer: Optimizer,
    pub(super) clipper: Option<GradClipper>,
    target_dim: usize,
    pub(super) nets: Vec<Network>,
    /// Master → compute-dtype cast of every parameter, one dispatch, once per step.
    pub(super) weight_cast: Option<Kernel>,
    /// Pure f16 mode: round gradients and parameters to f16 values.
    pub(super) round_grads: Option<Kernel>,
    pub(super) round_params: Option<Kernel>,
    pub(super) begin_step: Kernel,
    pub(super) unscale: Option<Kernel>,
    pub(super) update: Option<Kernel>,
    /// [scale used, found_inf, scale after the update, loss of micro-batch 0, 1, ...].
    metrics: Arc<GpuBuffer>,
    stats: StatsRing,
    micro: usize,
    /// Host time spent in this trainer's steps (encode, submit, read-back).
    pub host: HostTimes,
    steps_submitted: u64,
    submissions: u64,
    /// Where the dropout masks of the next micro-batch come from.
    pub dropout: DropoutStream,
    /// The gradient all-reduce of a data-parallel rank (`None` in a single process).
    #[cfg(not(target_arch = "wasm32"))]
    pub(super) exchange: Option<super::distributed::GradExchange>,
    /// Optimizer steps taken before this trainer's first (a resumed run's step): the lr
    /// schedule's position is `step_offset + steps_submitted` (Run positions it).
    pub step_offset: u64,
}

impl Trainer {
    /// Plan a trainer. `init` are the initial parameters by PyTorch name.
    pub fn new(
        ctx: &GpuContext,
        spec: ModelSpec,
        config: StepConfig,
        target_dim: usize,
        init: &[(String, Vec<f32>)],
    ) -> Result<Self> {
        // Before anything is allocated: the flat parameter buffers fit the adapter.
        let params = check_params_fit(ctx, &spec, &spec.name, config.precision, &config.optimizer)?;
        guard_planning(ctx, || Self::plan(ctx, spec, config, target_dim, init))
            .map_err(|e| params_error(e, params))
    }

    fn plan(
        ctx: &GpuContext,
        spec: ModelSpec,
        config: StepConfig,
        target_dim: usize,
        init: &[(String, Vec<f32>)],
    ) -> Result<Self> {
        if !(1..=MAX_GRAD_ACCUM).contains(&config.grad_accum) {
            return Err(Error::InvalidArgument(format!(
                "gradient accumulation needs 1 to {MAX_GRAD_ACCUM} micro-batches per step, got {}",
                config.grad_accum
            )));
        }
        config.optimizer.validate()?;
        config.scaler.validate()?;
        config.lr_schedule.validate()?;
        let policy = Policy::new(config.precision);
        let low = config.precision.low_dtype();
        let named: Vec<(String, Vec<usize>)> = spec
            .parameters()
            .into_iter()
            .map(|p| (p.name, p.shape))
            .collect();
        let layout = ParamLayout::new(&named, ParamLayout::element_alignment(ctx));
        let store = ParamStore::new(ctx, layout, Some(low));
        let total = store.layout.total;

        // Pure f16 keeps f16-valued parameters from the start.
        let init: Vec<(String, Vec<f32>)> = if config.precision.master_weights() {
            init.to_vec()
        } else {
            init.iter()
                .map(|(n, v)| (n.clone(), v.iter().map(|&x| low.round(x)).collect()))
                .collect()
        };
        store.upload(ctx, &init)?;

        let scaler = GradScaler::new(ctx, config.scaler)?;
        let optimizer = Optimizer::new_grouped(
            ctx,
            config.optimizer,
            &store.master,
            &store.grads,
            total,
            scaler.state_buffer(),
            weight_decay_mask(&spec, &store.layout).as_deref(),
        )?;
        let clipper = config
            .clip_grad_norm
            .map(|max| GradClipper::new(ctx, &store.grads, total, max))
            .transpose()?;
        let weight_cast = match store.low_flat(ctx)? {
            Some(low_flat) => Some(elementwise::cast(ctx, &store.master_flat(ctx)?, &low_flat)?),
            None => None,
        };
        let (round_grads, round_params) = if config.precision.master_weights() {
            (None, None)
        } else {
            (
                Some(round_inplace(ctx, &store.grads, total, low)?),
                Some(round_inplace(ctx, &store.master, total, low)?),
            )
        };
        let (unscale, update) = if scaler.enabled() {
            (
                Some(scaler.unscale_kernel(ctx, &store.grads, total)?),
                Some(scaler.update_kernel(ctx)?),
            )
        } else {
            (None, None)
        };
        let metrics_bytes = 4 * (METRIC_LOSSES + config.grad_accum as u64);
        let metrics = ctx.alloc_storage("step.metrics", metrics_bytes);
        let stats = StatsRing::new(ctx, RING, metrics_bytes);
        Ok(Self {
            begin_step: scaler.begin_step_kernel(ctx)?,
            spec,
            policy,
            store,
            scaler,
            optimizer,
            clipper,
            target_dim,
            nets: Vec::new(),
            weight_cast,
            round_grads,
            round_params,
            unscale,
            update,
            metrics,
            stats,
            micro: 0,
            host: HostTimes::default(),
            steps_submitted: 0,
            dropout: DropoutStream::default(),
            step_offset: 0,
            submissions: 0,
            #[cfg(not(target_arch = "wasm32"))]
            exchange: None,
            config,
        })
    }

    /// The planned network for a batch size (made on first use, then reused).
    pub fn network(&mut self, ctx: &GpuContext, batch: usize) -> Result<&Network> {
        let i = self.plan_network(ctx, batch)?;
        Ok(&self.nets[i])
    }

    /// Index into `nets` of the network for `batch`, planned on first use. An index, not a
    /// borrow, so callers can use the network together with the trainer's other fields.
    pub(super) fn plan_network(&mut self, ctx: &GpuContext, batch: usize) -> Result<usize> {
        if let Some(i) = self.nets.iter().position(|n| n.batch == batch) {
            return Ok(i);
        }
        let planned = guard_planning(ctx, || {
            Network::build(
                ctx,
                &self.spec,
                &self.store,
                &self.policy,
                batch,
                self.config.loss,
                self.target_dim,
                self.scaler.state_buffer(),
                self.grad_multiplier(),
            )
        });
        let net = planned.map_err(|e| batch_error(e, batch))?;
        self.nets.push(net);
        Ok(self.nets.len() - 1)
    }

    /// The factor the loss gradient is seeded with (times the scale): 1 / micro-batches, and
    /// in a data-parallel job 1 / (micro-batches × ranks), so the all-reduce is a plain sum.
    fn grad_multiplier(&self) -> f32 {
        #[cfg(not(target_arch = "wasm32"))]
        if let Some(ex) = &self.exchange {
            return 1.0 / (self.config.grad_accum * ex.collective().size()) as f32;
        }
        1.0 / self.config.grad_accum as f32
    }

    /// The network already planned for `batch`, if any (shared borrow, so it can be used
    /// together with [`Trainer::weight_cast_kernel`]).
    pub fn planned_network(&self, batch: usize) -> Option<&Network> {
        self.nets.iter().find(|n| n.batch == batch)
    }

    /// Train on one micro-batch of `batch` samples: one submit. Every `grad_accum`
    /// micro-batches this completes an optimizer step, in the last micro-batch's submit.
    /// Never waits inside the step; before a step's last micro-batch, when every stats slot
    /// is still in flight (the GPU is that many steps behind), native code
    /// waits for the oldest slot's submission only and counts it
    /// ([`Trainer::throttle_waits`]); on the web that is an error (check
    /// [`Trainer::can_submit`] first).
    pub fn train_batch<'x>(
        &mut self,
        ctx: &GpuContext,
        batch: usize,
        x: impl Into<BatchInput<'x>>,
        targets: BatchTargets<'_>,
    ) -> Result<()> {
        self.train_batch_overlapped(ctx, batch, x, targets, &mut || {})
    }

    /// [`Trainer::train_batch`]; on a data-parallel rank ([`Trainer::distribute`]),
    /// `overlap` runs while the step's gradients are all-reduced (host work that does not
    /// depend on them, such as gathering the next batch). In a single process it never runs.
    pub fn train_batch_overlapped<'x>(
        &mut self,
        ctx: &GpuContext,
        batch: usize,
        x: impl Into<BatchInput<'x>>,
        targets: BatchTargets<'_>,
        #[cfg_attr(target_arch = "wasm32", allow(unused_variables))] overlap: &mut dyn FnMut(),
    ) -> Result<()> {
        let first = self.micro == 0;
        let last = self.micro + 1 == self.config.grad_accum;
        if last && self.stats.is_full(ctx) {
            #[cfg(not(target_arch = "wasm32"))]
            {
                let waiting = Clock::now();
                self.stats.wait_oldest(ctx)?;
                self.host.readback += waiting.elapsed();
            }
            #[cfg(target_arch = "wasm32")]
            return Err(Error::Gpu(
                "the GPU is a whole ring of steps behind; check can_submit first".into(),
            ));
        }
        let encoding = Clock::now();
        let i = self.plan_network(ctx, batch)?;
        let net = &self.nets[i];
        Self::write_batch(ctx, net, x, &targets)?;
        // Dropout masks of micro-batch `counter`: the same whatever the precision, and
        // again after a resume (Run positions the counter).
        net.set_dropout(ctx, self.dropout.seed, self.dropout.counter, true);
        self.dropout.counter += 1;

        let mut encoder = ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("step"),
            });
        if first {
            encoder.clear_buffer(self.store.grads.raw(), 0, None);
            // The scale this step's backward uses.
            encoder.copy_buffer_to_buffer(
                self.scaler.state_buffer().raw(),
                0,
                self.metrics.raw(),
                0,
                4,
            );
        }
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            if first {
                for k in self.begin_kernels() {
                    k.encode(&mut pass);
                }
            }
            for k in net.train_kernels() {
                k.encode(&mut pass);
            }
        }
        encoder.copy_buffer_to_buffer(
            net.loss.buffer().raw(),
            net.loss.byte_offset(),
            self.metrics.raw(),
            4 * (METRIC_LOSSES + self.micro as u64),
            4,
        );
        self.submissions += 1;
        if !last {
            self.host.encode += encoding.elapsed();
            let submitting = Clock::now();
            ctx.queue.submit([encoder.finish()]);
            self.host.submit += submitting.elapsed();
            self.micro += 1;
            return Ok(());
        }
        // A data-parallel rank submits forward + backward here, waits for them and sums the
        // gradients over the ranks; the rest of the step goes in a second submission.
        #[cfg(not(target_arch = "wasm32"))]
        if let Some(ex) = self.exchange.as_mut() {
            encoder = ex.exchange(
                ctx,
                encoder,
                &self.store.grads,
                &self.metrics,
                self.scaler.state_buffer(),
                self.scaler.enabled(),
                overlap,
            )?;
            self.submissions += 1;
        }
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            for k in self.finish_kernels() {
                k.encode(&mut pass);
            }
        }
        // found_inf (state word 2), then the updated scale (word 0).
        let state = self.scaler.state_buffer().raw();
        encoder.copy_buffer_to_buffer(state, 8, self.metrics.raw(), 4, 4);
        encoder.copy_buffer_to_buffer(state, 0, self.metrics.raw(), 8, 4);
        let slot = self
            .stats
            .next_buffer()
            .ok_or_else(|| Error::Gpu("no free stats slot".into()))?;
        encoder.copy_buffer_to_buffer(self.metrics.raw(), 0, slot.raw(), 0, self.metrics.size());
        // This step's learning rate, written ahead: the queued write lands before this
        // submit's commands and after the previous step's.
        let lr = self.scheduled_lr();
        if lr.to_bits() != self.optimizer.lr().to_bits() {
            self.optimizer.set_lr(ctx, lr)?;
        }
        self.steps_submitted += 1;
        self.host.encode += encoding.elapsed();
        let submitting = Clock::now();
        self.host.steps += 1;
        self.stats.submit(
            ctx,
            encoder,
            self.steps_submitted,
            self.config.grad_accum,
            lr,
        )?;
        self.host.submit += submitting.elapsed();
        self.micro = 0;
        Ok(())
    }

    /// The learning rate of the next optimizer step: the schedule's, or under a constant
    /// schedule the optimizer's current one (which [`Optimizer::set_lr`] may have changed).
    pub fn scheduled_lr(&self) -> f32 {
        match self.config.lr_schedule {
            LrSchedule::Constant => self.optimizer.lr(),
            schedule => schedule.lr(
                self.config.optimizer.lr(),
                self.step_offset + self.steps_submitted,
            ),
        }
    }

    /// Each layer's op, compute dtype, output dtype and inserted casts under this trainer's policy.
    pub fn precision_map(&self) -> Vec<crate::amp::policy::PrecisionRow> {
        crate::nn::precision_map(&self.spec, &self.policy, self.config.loss)
    }

    /// The master → compute-dtype weight cast (None in f32 mode). Encode it before a
    /// forward outside the step (e.g. an asynchronous validation pass) so it sees the
    /// current weights.
    pub fn weight_cast_kernel(&self) -> Option<&Kernel> {
        self.weight_cast.as_ref()
    }

    /// Every kernel of one optimizer step (one micro-batch) at `batch`, in the order
    /// `train_batch` records them, for per-kernel profiling. Running them changes the
    /// parameters like a real step does (profile a trainer whose state does not matter).
    pub fn step_kernels(&mut self, ctx: &GpuContext, batch: usize) -> Result<Vec<&Kernel>> {
        let i = self.plan_network(ctx, batch)?;
        let net = &self.nets[i];
        let mut kernels = self.begin_kernels();
        kernels.extend(net.train_kernels());
        kernels.extend(self.finish_kernels());
        Ok(kernels)
    }

    /// What the first micro-batch of a step runs before its forward: reset the step's
    /// found-inf flag, cast the master weights to the compute dtype.
    fn begin_kernels(&self) -> Vec<&Kernel> {
        let mut kernels = vec![&self.begin_step];
        kernels.extend(&self.weight_cast);
        kernels
    }

    /// What the last micro-batch runs after its backward ([`Trainer::finish_phases`]).
    fn finish_kernels(&self) -> Vec<&Kernel> {
        self.finish_phases().into_iter().map(|(_, k)| k).collect()
    }

    /// The dtype the model's parameters compute in under this trainer's policy.
    pub fn low_dtype(&self) -> DType {
        self.config.precision.low_dtype()
    }
}
