//! GPU time per kernel from timestamp queries: each kernel in its own compute pass with
//! timestamp writes at the pass's start and end, resolved into a buffer and copied into a
//! read-back ring. Separate passes serialise the kernels (and add a little per pass), so the
//! times are each kernel's own, not the overlapped whole of a real step; the whole step is
//! the first start to the last end.

use std::sync::Arc;

use super::{GpuBuffer, GpuContext, Kernel, ReadbackRing};
use crate::error::{Error, Result};

/// Per-kernel GPU times of one timed run.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelTimes {
    /// The tag the run was submitted with.
    pub tag: u64,
    /// Milliseconds of each kernel, in the order they were encoded.
    pub ms: Vec<f64>,
    /// First kernel's start to last kernel's end (gaps between passes included: some
    /// drivers run work lazily, between the timestamps of its pass).
    pub whole_ms: f64,
}

/// Times up to `capacity` kernels per run; `slots` runs may be in flight.
pub struct KernelTimer {
    query_set: wgpu::QuerySet,
    resolve: Arc<GpuBuffer>,
    read: ReadbackRing<(u64, usize)>,
    capacity: usize,
}

impl KernelTimer {
    /// Why timing is impossible on this context, if it is (no timestamp queries).
    pub fn unavailable(ctx: &GpuContext) -> Option<String> {
        (!ctx.caps.timestamp_query).then(|| {
            format!(
                "adapter `{}` has no timestamp queries: GPU time per kernel cannot be measured here",
                ctx.report.name
            )
        })
    }

    pub fn new(ctx: &GpuContext, label: &str, capacity: usize, slots: usize) -> Result<Self> {
        if let Some(why) = Self::unavailable(ctx) {
            return Err(Error::Unsupported(why));
        }
        let queries = 2 * capacity.max(1) as u32;
        let query_set = ctx.device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some(label),
            ty: wgpu::QueryType::Timestamp,
            count: queries,
        });
        let bytes = 8 * queries as u64;
        Ok(Self {
            query_set,
            resolve: ctx.alloc(
                label,
                bytes,
                wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            ),
            read: ReadbackRing::new(ctx, label, slots, bytes),
            capacity: capacity.max(1),
        })
    }

    /// Whether another run can be submitted now.
    pub fn is_full(&self) -> bool {
        self.read.is_full()
    }

    pub fn in_flight(&self) -> bool {
        self.read.in_flight() > 0
    }

    /// Encode `kernels` into `encoder`, one timed pass each, then submit it tagged `tag`.
    pub fn submit(
        &mut self,
        ctx: &GpuContext,
        mut encoder: wgpu::CommandEncoder,
        kernels: &[&Kernel],
        tag: u64,
    ) -> Result<()> {
        if kernels.len() > self.capacity {
            return Err(Error::InvalidArgument(format!(
                "{} kernels to time, the timer holds {}",
                kernels.len(),
                self.capacity
            )));
        }
        for (i, k) in kernels.iter().enumerate() {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some(&k.label),
                timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                    query_set: &self.query_set,
                    beginning_of_pass_write_index: Some(2 * i as u32),
                    end_of_pass_write_index: Some(2 * i as u32 + 1),
                }),
            });
            k.encode(&mut pass);
        }
        let queries = 2 * kernels.len() as u32;
        if queries > 0 {
            encoder.resolve_query_set(&self.query_set, 0..queries, self.resolve.raw(), 0);
        }
        let staging = self
            .read
            .next_buffer()
            .ok_or_else(|| Error::Gpu("kernel timer: every read-back slot in flight".into()))?;
        encoder.copy_buffer_to_buffer(self.resolve.raw(), 0, staging.raw(), 0, 8 * queries as u64);
        self.read.submit(ctx, encoder, (tag, kernels.len()))?;
        Ok(())
    }

    /// The oldest run's times once they have landed.
    pub fn take(&mut self, ctx: &GpuContext) -> Option<KernelTimes> {
        let period_ns = ctx.queue.get_timestamp_period() as f64;
        self.read.take_ready(|(tag, n), bytes| {
            let ticks: Vec<u64> = bytes
                .chunks_exact(8)
                .take(2 * n)
                .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect();
            let ms = |a: u64, b: u64| b.saturating_sub(a) as f64 * period_ns / 1e6;
            KernelTimes {
                tag,
                ms: ticks.chunks_exact(2).map(|t| ms(t[0], t[1])).collect(),
                whole_ms: match (ticks.first(), ticks.last()) {
                    (Some(&a), Some(&b)) => ms(a, b),
                    _ => 0.0,
                },
            }
        })
    }

    /// Block until the oldest run has landed and return its times (native only).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn wait(&mut self, ctx: &GpuContext) -> Result<KernelTimes> {
        self.read.wait_oldest(ctx)?;
        self.take(ctx)
            .ok_or_else(|| Error::Gpu("kernel timer: the oldest run did not land".into()))
    }
}
