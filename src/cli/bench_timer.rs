//! GPU time of a pass of dispatches, for the benchmarks: timestamp queries where the adapter
//! has them, else wall clock around submit and a blocking sync; a language model's step cut
//! as Inferena times it ([`step_passes`]); and the process's CPU time.

use std::time::Instant;

use webgpu_amp::GpuContext;
use webgpu_amp::data::{BatchInput, BatchTargets};
use webgpu_amp::gpu::Kernel;
use webgpu_amp::train::batch::write_batch;
use webgpu_amp::train::{Phase, Trainer};

/// Times one pass of `batch` dispatches: GPU timestamps at the pass's start and end when
/// the adapter has them, else wall clock around submit + sync.
pub struct Timer {
    queries: Option<(wgpu::QuerySet, std::sync::Arc<webgpu_amp::gpu::GpuBuffer>)>,
}

impl Timer {
    pub fn new(ctx: &GpuContext) -> Timer {
        let queries = ctx.caps.timestamp_query.then(|| {
            let set = ctx.device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("bench timestamps"),
                ty: wgpu::QueryType::Timestamp,
                count: 2,
            });
            let resolve = ctx.alloc(
                "bench timestamps",
                16,
                wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            );
            (set, resolve)
        });
        Timer { queries }
    }

    /// Seconds of one pass of `batch` repetitions of `kernels`, encoded in order.
    pub fn time(
        &self,
        ctx: &GpuContext,
        kernels: &[&Kernel],
        batch: usize,
    ) -> webgpu_amp::Result<f64> {
        let mut encoder = ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("bench"),
            });
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("bench"),
                timestamp_writes: self.queries.as_ref().map(|(set, _)| {
                    wgpu::ComputePassTimestampWrites {
                        query_set: set,
                        beginning_of_pass_write_index: Some(0),
                        end_of_pass_write_index: Some(1),
                    }
                }),
            });
            for _ in 0..batch {
                for k in kernels {
                    k.encode(&mut pass);
                }
            }
        }
        if let Some((set, resolve)) = &self.queries {
            encoder.resolve_query_set(set, 0..2, resolve.raw(), 0);
        }
        let start = Instant::now();
        ctx.queue.submit([encoder.finish()]);
        ctx.sync()?;
        let wall = start.elapsed().as_secs_f64();
        let Some((_, resolve)) = &self.queries else {
            return Ok(wall);
        };
        let bytes = ctx.read_bytes(resolve, 0, 16)?;
        let ticks: [u64; 2] = bytemuck::pod_read_unaligned(&bytes);
        let ns = ticks[1].wrapping_sub(ticks[0]) as f64 * ctx.queue.get_timestamp_period() as f64;
        if ns <= 0.0 || !ns.is_finite() || ticks[1] < ticks[0] {
            return Err(webgpu_amp::Error::Gpu(format!(
                "timestamp queries gave no usable interval ({} → {})",
                ticks[0], ticks[1]
            )));
        }
        Ok(ns * 1e-9)
    }
}

/// Inferena's three timings of a language model's step (kvark/inferena: forward, forward +
/// loss + backward, which it calls "training", and the whole optimizer step), each the
/// step's own kernels for those phases ([`Trainer::step_phases`]) repeated in one pass and
/// timed by [`Timer`], so the three are measured alike and compare with each other.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct StepPasses {
    /// The weight cast and the training forward (activations kept for the backward, where
    /// PyTorch's `no_grad` forward keeps none).
    pub forward_ms: f64,
    /// Forward, loss and backward into the gradients: no unscale, clipping or optimizer.
    pub forward_backward_ms: f64,
    /// Every kernel of the step: the above, the GradScaler's unscale and update, clipping,
    /// and AdamW.
    pub step_ms: f64,
    /// `gpu-timestamps` (the pass's start to its end) or `queue-wait` (wall clock around
    /// submit and the wait for the queue: the adapter has no timestamp queries).
    pub timed_by: &'static str,
    /// Repetitions in each timed pass (the figures are per repetition).
    pub repeats: usize,
}

/// [`StepPasses`] of `trainer` on the batch `x`, `targets`, each over `repeats` repetitions.
/// The step's kernels change the parameters as real steps do: time a trainer whose state
/// does not matter (a benchmark's).
pub fn step_passes<'x>(
    ctx: &GpuContext,
    trainer: &mut Trainer,
    batch: usize,
    (x, targets): (impl Into<BatchInput<'x>>, BatchTargets<'_>),
    repeats: usize,
) -> webgpu_amp::Result<StepPasses> {
    write_batch(ctx, trainer.network(ctx, batch)?, x, &targets)?;
    let phases = trainer.step_phases(ctx, batch)?;
    let of = |keep: &[Phase]| -> Vec<&Kernel> {
        let kept = phases.iter().filter(|(p, _)| keep.contains(p));
        kept.map(|(_, k)| *k).collect()
    };
    let forward = of(&[Phase::Setup, Phase::Forward]);
    let backward = of(&[Phase::Setup, Phase::Forward, Phase::Loss, Phase::Backward]);
    let step = of(&Phase::ALL);
    let timer = Timer::new(ctx);
    let per = |kernels: &[&Kernel]| -> webgpu_amp::Result<f64> {
        Ok(1e3 * timer.time(ctx, kernels, repeats)? / repeats as f64)
    };
    Ok(StepPasses {
        forward_ms: per(&forward)?,
        forward_backward_ms: per(&backward)?,
        step_ms: per(&step)?,
        timed_by: if ctx.caps.timestamp_query {
            "gpu-timestamps"
        } else {
            "queue-wait"
        },
        repeats,
    })
}

/// User + system CPU seconds of this process so far (`/proc/self/stat`; `None` where there
/// is none).
pub fn process_cpu_secs() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces) in parentheses: utime and
    // stime are the 12th and 13th of them, in clock ticks (100 per second on Linux).
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}
