//! The planned training step: `scale(loss) → backward → unscale → (clip) → step → update`,
//! recorded into one command buffer per (micro-)batch and submitted once, with no CPU wait.
//!
//! Buffers, bind groups and pipelines are made once per (model, batch size, precision).
//! Loss, the scale used and the skip flag of each optimizer step reach the CPU through a
//! small ring of staging buffers mapped asynchronously; [`Trainer::poll_stats`] hands them
//! out a few steps late.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use crate::amp::policy::{Policy, Precision};
use crate::amp::round::round_inplace;
use crate::amp::scaler::{GradClipper, GradScaler, ScalerConfig};
use crate::error::{Error, Result};
use crate::gpu::{GpuBuffer, GpuContext, Kernel};
use crate::nn::ModelSpec;
use crate::nn::params::{ParamLayout, ParamStore};
use crate::nn::{LossKind, Network};
use crate::ops::elementwise;
use crate::optim::{Optimizer, OptimizerConfig};
use crate::tensor::DType;

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
}

/// What one optimizer step reports (read a few steps late).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct StepStats {
    /// 1-based optimizer step.
    pub step: u64,
    /// Unscaled f32 loss of this step's forward (mean over its micro-batches).
    pub loss: f32,
    /// The scale this step's backward was seeded with.
    pub scale: f32,
    /// The scale after this step's update (what the next step uses; PyTorch's
    /// `scaler.get_scale()` after `scaler.update()`).
    pub scale_after: f32,
    /// True when the gradients had inf/NaN and the optimizer step was skipped.
    pub skipped: bool,
}

/// Targets of one batch.
pub enum BatchTargets<'a> {
    Classes(&'a [u32]),
    Values(&'a [f32]),
}

const RING: usize = 8;
/// Word index of the first micro-batch loss in the step metrics.
const METRIC_LOSSES: u64 = 3;
const SLOT_FREE: u8 = 0;
const SLOT_PENDING: u8 = 1;
const SLOT_READY: u8 = 2;

struct Slot {
    buffer: Arc<GpuBuffer>,
    state: Arc<AtomicU8>,
    step: u64,
    micro: usize,
}

/// A model, its optimizer and scaler, planned for training.
pub struct Trainer {
    pub spec: ModelSpec,
    pub config: StepConfig,
    pub policy: Policy,
    pub store: ParamStore,
    pub scaler: GradScaler,
    pub optimizer: Optimizer,
    clipper: Option<GradClipper>,
    target_dim: usize,
    nets: Vec<Network>,
    /// Master → compute-dtype cast of every parameter, one dispatch, once per step.
    weight_cast: Option<Kernel>,
    /// Pure f16 mode: round gradients and parameters to f16 values.
    round_grads: Option<Kernel>,
    round_params: Option<Kernel>,
    begin_step: Kernel,
    unscale: Option<Kernel>,
    update: Option<Kernel>,
    /// [scale used, found_inf, scale after the update, loss of micro-batch 0, 1, ...].
    metrics: Arc<GpuBuffer>,
    ring: Vec<Slot>,
    next_slot: usize,
    micro: usize,
    steps_submitted: u64,
    ready: VecDeque<StepStats>,
    throttle_waits: u64,
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
        let params = spec.num_parameters();
        guard_planning(ctx, || Self::plan(ctx, spec, config, target_dim, init)).map_err(|e| match e {
            Error::Resource {
                message,
                needed,
                limit,
            } => Error::Resource {
                message: format!(
                    "the model's {params} parameters do not fit this adapter: {message}; use a smaller model"
                ),
                needed,
                limit,
            },
            other => other,
        })
    }

    fn plan(
        ctx: &GpuContext,
        spec: ModelSpec,
        config: StepConfig,
        target_dim: usize,
        init: &[(String, Vec<f32>)],
    ) -> Result<Self> {
        if config.grad_accum == 0 {
            return Err(Error::InvalidArgument(
                "gradient accumulation needs at least 1 micro-batch per step".into(),
            ));
        }
        config.optimizer.validate()?;
        config.scaler.validate()?;
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
        let optimizer = Optimizer::new(
            ctx,
            config.optimizer,
            &store.master,
            &store.grads,
            total,
            scaler.state_buffer(),
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
        let ring = (0..RING)
            .map(|_| Slot {
                buffer: ctx.alloc(
                    "step.ring",
                    metrics_bytes,
                    wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                ),
                state: Arc::new(AtomicU8::new(SLOT_FREE)),
                step: 0,
                micro: 0,
            })
            .collect();
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
            ring,
            next_slot: 0,
            micro: 0,
            steps_submitted: 0,
            ready: VecDeque::new(),
            throttle_waits: 0,
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
    fn plan_network(&mut self, ctx: &GpuContext, batch: usize) -> Result<usize> {
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
                1.0 / self.config.grad_accum as f32,
            )
        });
        let net = planned.map_err(|e| batch_error(e, batch))?;
        self.nets.push(net);
        Ok(self.nets.len() - 1)
    }

    /// The network already planned for `batch`, if any (shared borrow, so it can be used
    /// together with [`Trainer::weight_cast_kernel`]).
    pub fn planned_network(&self, batch: usize) -> Option<&Network> {
        self.nets.iter().find(|n| n.batch == batch)
    }

    /// Upload a batch into a network's input buffers (queued writes; no wait).
    pub fn write_batch(
        ctx: &GpuContext,
        net: &Network,
        x: &[f32],
        targets: &BatchTargets<'_>,
    ) -> Result<()> {
        net.input.write_f32(ctx, x)?;
        match (targets, &net.targets) {
            (BatchTargets::Classes(labels), None) => {
                if labels.len() != net.batch {
                    return Err(Error::shape("batch", "label count differs from batch size"));
                }
                ctx.queue
                    .write_buffer(net.labels.raw(), 0, bytemuck::cast_slice(labels));
            }
            (BatchTargets::Values(values), Some(t)) => t.write_f32(ctx, values)?,
            _ => {
                return Err(Error::InvalidArgument(
                    "targets do not match the loss (class labels need cross-entropy, values need mse)"
                        .into(),
                ));
            }
        }
        Ok(())
    }

    /// Train on one micro-batch of `batch` samples. Every `grad_accum` micro-batches this
    /// completes an optimizer step. One submit, no wait (except when the GPU is more than
    /// the ring's depth of steps behind, which throttles the CPU: see `throttle_waits`).
    pub fn train_batch(
        &mut self,
        ctx: &GpuContext,
        batch: usize,
        x: &[f32],
        targets: BatchTargets<'_>,
    ) -> Result<()> {
        let first = self.micro == 0;
        let last = self.micro + 1 == self.config.grad_accum;
        if last {
            self.reserve_slot(ctx)?;
        }
        let i = self.plan_network(ctx, batch)?;
        let net = &self.nets[i];
        Self::write_batch(ctx, net, x, &targets)?;

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
        if last {
            {
                let mut pass = encoder.begin_compute_pass(&Default::default());
                for k in self.finish_kernels() {
                    k.encode(&mut pass);
                }
            }
            // found_inf (state word 2), then the updated scale (word 0).
            encoder.copy_buffer_to_buffer(
                self.scaler.state_buffer().raw(),
                8,
                self.metrics.raw(),
                4,
                4,
            );
            encoder.copy_buffer_to_buffer(
                self.scaler.state_buffer().raw(),
                0,
                self.metrics.raw(),
                8,
                4,
            );
            let slot = &self.ring[self.next_slot];
            encoder.copy_buffer_to_buffer(
                self.metrics.raw(),
                0,
                slot.buffer.raw(),
                0,
                self.metrics.size(),
            );
        }
        ctx.queue.submit([encoder.finish()]);

        if last {
            self.steps_submitted += 1;
            let slot = &mut self.ring[self.next_slot];
            slot.step = self.steps_submitted;
            slot.micro = self.config.grad_accum;
            slot.state.store(SLOT_PENDING, Ordering::Release);
            let state = slot.state.clone();
            slot.buffer
                .raw()
                .slice(..)
                .map_async(wgpu::MapMode::Read, move |r| {
                    if r.is_ok() {
                        state.store(SLOT_READY, Ordering::Release);
                    }
                });
            self.next_slot = (self.next_slot + 1) % RING;
            self.micro = 0;
        } else {
            self.micro += 1;
        }
        Ok(())
    }

    /// Make sure the next ring slot is free: collect finished slots, and on native block
    /// on the oldest one when the GPU is a whole ring behind.
    fn reserve_slot(&mut self, ctx: &GpuContext) -> Result<()> {
        self.collect(ctx);
        if self.ring[self.next_slot].state.load(Ordering::Acquire) == SLOT_FREE {
            return Ok(());
        }
        #[cfg(not(target_arch = "wasm32"))]
        {
            self.throttle_waits += 1;
            ctx.device
                .poll(wgpu::PollType::wait_indefinitely())
                .map_err(|e| ctx.poll_error(e))?;
            self.collect(ctx);
            if self.ring[self.next_slot].state.load(Ordering::Acquire) == SLOT_FREE {
                return Ok(());
            }
        }
        Err(Error::Gpu(
            "the GPU is a whole ring of steps behind; call poll_stats and retry".into(),
        ))
    }

    /// Whether a new optimizer step can be submitted without waiting (for frame loops).
    pub fn can_submit(&mut self, ctx: &GpuContext) -> bool {
        self.collect(ctx);
        self.micro + 1 < self.config.grad_accum
            || self.ring[self.next_slot].state.load(Ordering::Acquire) == SLOT_FREE
    }

    /// Read every ready slot, in step order, without waiting.
    fn collect(&mut self, ctx: &GpuContext) {
        #[cfg(not(target_arch = "wasm32"))]
        let _ = ctx.device.poll(wgpu::PollType::Poll);
        #[cfg(target_arch = "wasm32")]
        let _ = ctx;
        loop {
            // The oldest pending slot is the one after the newest, going round.
            let oldest = (0..RING)
                .map(|k| (self.next_slot + k) % RING)
                .find(|&i| self.ring[i].state.load(Ordering::Acquire) != SLOT_FREE);
            let Some(i) = oldest else { break };
            let slot = &self.ring[i];
            if slot.state.load(Ordering::Acquire) != SLOT_READY {
                break;
            }
            let stats = {
                let Ok(view) = slot.buffer.raw().slice(..).get_mapped_range() else {
                    break;
                };
                let words: &[u32] = bytemuck::cast_slice(&view);
                let first = METRIC_LOSSES as usize;
                let losses: Vec<f32> = words[first..first + slot.micro]
                    .iter()
                    .map(|&w| f32::from_bits(w))
                    .collect();
                StepStats {
                    step: slot.step,
                    loss: losses.iter().sum::<f32>() / losses.len().max(1) as f32,
                    scale: f32::from_bits(words[0]),
                    skipped: words[1] != 0,
                    scale_after: f32::from_bits(words[2]),
                }
            };
            slot.buffer.raw().unmap();
            slot.state.store(SLOT_FREE, Ordering::Release);
            self.ready.push_back(stats);
        }
    }

    /// Stats of the optimizer steps finished so far (non-blocking; a few steps late).
    pub fn poll_stats(&mut self, ctx: &GpuContext) -> Vec<StepStats> {
        self.collect(ctx);
        self.ready.drain(..).collect()
    }

    /// Wait for every submitted step and return the remaining stats (native; end of run).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn finish(&mut self, ctx: &GpuContext) -> Result<Vec<StepStats>> {
        ctx.sync()?;
        Ok(self.poll_stats(ctx))
    }

    /// Times the CPU had to wait because the GPU was a whole ring of steps behind.
    pub fn throttle_waits(&self) -> u64 {
        self.throttle_waits
    }

    pub fn steps_submitted(&self) -> u64 {
        self.steps_submitted
    }

    /// Micro-batches already accumulated toward the next optimizer step.
    pub fn pending_micro_batches(&self) -> usize {
        self.micro
    }

    /// Submit a forward of one held-out batch (forward only, the current weights) that
    /// leaves its mean loss (f32) and correct count (u32, cross-entropy only) in words
    /// `2 * slot` and `2 * slot + 1` of `results`. Nothing is read back: callers read the
    /// slots of many batches at once ([`Trainer::evaluate`]) or map them asynchronously
    /// (the app).
    pub fn submit_eval_batch(
        &mut self,
        ctx: &GpuContext,
        batch: usize,
        x: &[f32],
        targets: &BatchTargets<'_>,
        results: &GpuBuffer,
        slot: usize,
    ) -> Result<()> {
        let i = self.plan_network(ctx, batch)?;
        let net = &self.nets[i];
        Self::write_batch(ctx, net, x, targets)?;
        let offset = 8 * slot as u64;
        let mut encoder = ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("evaluate"),
            });
        encoder.clear_buffer(net.correct.raw(), 0, None);
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            for k in self.weight_cast.iter().chain(net.eval_kernels()) {
                k.encode(&mut pass);
            }
        }
        let loss = (net.loss.buffer().raw(), net.loss.byte_offset());
        encoder.copy_buffer_to_buffer(loss.0, loss.1, results.raw(), offset, 4);
        encoder.copy_buffer_to_buffer(net.correct.raw(), 0, results.raw(), offset + 4, 4);
        ctx.queue.submit([encoder.finish()]);
        Ok(())
    }

    /// Mean loss and accuracy over `batches` (forward only). Reads back once at the end
    /// (once per 256 batches).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn evaluate<'a>(
        &mut self,
        ctx: &GpuContext,
        batches: impl IntoIterator<Item = (usize, Vec<f32>, BatchTargets<'a>)>,
    ) -> Result<Evaluation> {
        // Per batch, its loss and correct count are copied into a slot of `results`; the
        // slots are read back once per EVAL_CHUNK batches (once for most sets).
        const EVAL_CHUNK: usize = 256;
        let results = ctx.alloc_storage("eval.results", 8 * EVAL_CHUNK as u64);
        let mut sizes: Vec<usize> = Vec::with_capacity(EVAL_CHUNK);
        let mut loss_sum = 0.0f64;
        let mut samples = 0usize;
        let mut correct = 0u64;
        let mut drain = |sizes: &mut Vec<usize>| -> Result<()> {
            if sizes.is_empty() {
                return Ok(());
            }
            let bytes = ctx.read_bytes(&results, 0, 8 * sizes.len() as u64)?;
            let words: &[u32] = bytemuck::cast_slice(&bytes);
            for (&batch, w) in sizes.iter().zip(words.chunks_exact(2)) {
                loss_sum += f32::from_bits(w[0]) as f64 * batch as f64;
                correct += w[1] as u64;
                samples += batch;
            }
            sizes.clear();
            Ok(())
        };
        for (batch, x, targets) in batches {
            self.submit_eval_batch(ctx, batch, &x, &targets, &results, sizes.len())?;
            sizes.push(batch);
            if sizes.len() == EVAL_CHUNK {
                drain(&mut sizes)?;
            }
        }
        drain(&mut sizes)?;
        ctx.check()?;
        Ok(Evaluation {
            loss: (loss_sum / samples.max(1) as f64) as f32,
            accuracy: if self.config.loss == LossKind::CrossEntropy {
                Some(correct as f32 / samples.max(1) as f32)
            } else {
                None
            },
            samples,
        })
    }

    /// Run the model forward on `x` (batch samples) and read its output back as f32
    /// (native; tests and inference outside the step loop).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn predict(&mut self, ctx: &GpuContext, batch: usize, x: &[f32]) -> Result<Vec<f32>> {
        let i = self.plan_network(ctx, batch)?;
        let net = &self.nets[i];
        net.input.write_f32(ctx, x)?;
        let kernels: Vec<&Kernel> = self
            .weight_cast
            .iter()
            .chain(net.forward_kernels())
            .collect();
        ctx.run(&kernels);
        net.output.read_f32(ctx)
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

    /// What the last micro-batch runs after its backward, in PyTorch's order: (pure f16:
    /// round the gradients) → unscale → clip → optimizer step → (pure f16: round the
    /// parameters) → scale update.
    fn finish_kernels(&self) -> Vec<&Kernel> {
        let mut kernels: Vec<&Kernel> = Vec::new();
        kernels.extend(&self.round_grads);
        kernels.extend(&self.unscale);
        if let Some(c) = &self.clipper {
            kernels.extend(c.kernels());
        }
        kernels.push(self.optimizer.step_kernel());
        kernels.extend(&self.round_params);
        kernels.extend(&self.update);
        kernels
    }

    /// The dtype the model's parameters compute in under this trainer's policy.
    pub fn low_dtype(&self) -> DType {
        self.config.precision.low_dtype()
    }
}

/// Runs a planning step (buffer, pipeline and bind group creation) so that a device limit or
/// out-of-memory comes back as an error, never a panic: an out-of-memory error scope around it
/// (popped by blocking on native; on the web the uncaptured-error handler records it), then
/// any GPU error recorded meanwhile. When planning itself failed, the GPU errors its invalid
/// objects caused are explained by that failure and dropped.
fn guard_planning<T>(ctx: &GpuContext, plan: impl FnOnce() -> Result<T>) -> Result<T> {
    #[cfg(not(target_arch = "wasm32"))]
    let scope = ctx.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
    let planned = plan();
    #[cfg(not(target_arch = "wasm32"))]
    if let Some(oom) = pollster::block_on(scope.pop()) {
        ctx.clear_errors();
        return Err(Error::Resource {
            message: format!(
                "out of GPU memory: {}",
                oom.to_string()
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
            needed: 0,
            limit: 0,
        });
    }
    match planned {
        Ok(value) => {
            ctx.check()?;
            Ok(value)
        }
        Err(e) => {
            if ctx.device_lost().is_none() {
                ctx.clear_errors();
            }
            Err(e)
        }
    }
}

/// A resource error while planning a batch, with the batch size and the largest batch the
/// failing buffer would allow (buffer sizes grow linearly with the batch).
fn batch_error(e: Error, batch: usize) -> Error {
    match e {
        Error::Resource {
            message,
            needed,
            limit,
        } => {
            let hint = if limit > 0 && needed > limit {
                let fits = (batch as u128 * limit as u128 / needed as u128) as u64;
                format!("use a smaller --batch-size (this buffer allows at most {fits})")
            } else {
                "use a smaller --batch-size".to_string()
            };
            Error::Resource {
                message: format!("batch {batch}: {message} — {hint}"),
                needed,
                limit,
            }
        }
        Error::Unsupported(m) if m.contains("workgroups") => {
            Error::Unsupported(format!("batch {batch}: {m}"))
        }
        other => other,
    }
}

/// Validation result.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Evaluation {
    pub loss: f32,
    pub accuracy: Option<f32>,
    pub samples: usize,
}
