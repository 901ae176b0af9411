//! The one allocator every GPU buffer goes through. It counts live and peak bytes: the
//! "peak GPU memory" the FP32-vs-AMP comparison reports; and it counts every buffer and bind
//! group created, so a test can prove a planned step creates none.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Default, Debug)]
pub struct Allocator {
    live: AtomicU64,
    peak: AtomicU64,
    allocations: AtomicU64,
    bind_groups: AtomicU64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct MemoryStats {
    pub live_bytes: u64,
    pub peak_bytes: u64,
    pub allocations: u64,
}

impl Allocator {
    pub(crate) fn create(
        self: &Arc<Self>,
        device: &wgpu::Device,
        label: &str,
        size: u64,
        usage: wgpu::BufferUsages,
    ) -> GpuBuffer {
        // wgpu needs sizes in multiples of 4 for copies and storage bindings; never 0.
        let size = size.max(4).next_multiple_of(4);
        let buffer = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size,
            usage,
            mapped_at_creation: false,
        });
        let live = self.live.fetch_add(size, Ordering::Relaxed) + size;
        self.peak.fetch_max(live, Ordering::Relaxed);
        self.allocations.fetch_add(1, Ordering::Relaxed);
        GpuBuffer {
            buffer,
            size,
            allocator: Arc::clone(self),
        }
    }

    pub fn stats(&self) -> MemoryStats {
        MemoryStats {
            live_bytes: self.live.load(Ordering::Relaxed),
            peak_bytes: self.peak.load(Ordering::Relaxed),
            allocations: self.allocations.load(Ordering::Relaxed),
        }
    }

    /// Bind groups created on this context so far (every one is made by
    /// [`crate::gpu::GpuContext::kernel`], which counts it here).
    pub fn bind_groups(&self) -> u64 {
        self.bind_groups.load(Ordering::Relaxed)
    }

    pub(crate) fn count_bind_group(&self) {
        self.bind_groups.fetch_add(1, Ordering::Relaxed);
    }

    /// Start a new peak measurement from the current live bytes.
    pub fn reset_peak(&self) {
        self.peak
            .store(self.live.load(Ordering::Relaxed), Ordering::Relaxed);
    }
}

/// A wgpu buffer whose bytes are counted while it lives.
#[derive(Debug)]
pub struct GpuBuffer {
    buffer: wgpu::Buffer,
    size: u64,
    allocator: Arc<Allocator>,
}

impl GpuBuffer {
    pub fn raw(&self) -> &wgpu::Buffer {
        &self.buffer
    }

    pub fn size(&self) -> u64 {
        self.size
    }
}

impl Drop for GpuBuffer {
    fn drop(&mut self) {
        self.allocator.live.fetch_sub(self.size, Ordering::Relaxed);
    }
}
