//! The one allocator every GPU buffer goes through. It counts live and peak bytes: the
//! "peak GPU memory" the FP32-vs-AMP comparison reports; live bytes by buffer label (what
//! a memory plan breaks down); the largest storage binding any kernel made; and every
//! buffer and bind group created, so a test can prove a planned step creates none.
//!
//! A *dry* allocator ([`crate::gpu::GpuContext::dry_twin`]) counts every buffer at its
//! full size but backs it with 4 bytes: planning runs unchanged and nothing is allocated.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

#[derive(Default, Debug)]
pub struct Allocator {
    live: AtomicU64,
    peak: AtomicU64,
    allocations: AtomicU64,
    bind_groups: AtomicU64,
    dry: bool,
    by_label: Mutex<HashMap<String, u64>>,
    largest_binding: Mutex<Option<Binding>>,
}

/// One storage binding of one kernel: its size and what it binds.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Binding {
    pub bytes: u64,
    /// The label of the buffer bound (a layer's activation names the layer).
    pub buffer: String,
    /// `shader::entry`.
    pub kernel: String,
    /// The WGSL global bound.
    pub name: String,
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
        let size = GpuBuffer::padded_size(size);
        let buffer = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: if self.dry { 4 } else { size },
            usage,
            mapped_at_creation: false,
        });
        let live = self.live.fetch_add(size, Ordering::Relaxed) + size;
        self.peak.fetch_max(live, Ordering::Relaxed);
        self.allocations.fetch_add(1, Ordering::Relaxed);
        *self
            .by_label
            .lock()
            .expect("allocator labels")
            .entry(label.to_string())
            .or_default() += size;
        GpuBuffer {
            buffer,
            size,
            label: label.to_string(),
            allocator: Arc::clone(self),
        }
    }

    /// An allocator that counts buffers without backing them (see the module docs).
    pub(crate) fn dry() -> Self {
        Self {
            dry: true,
            ..Self::default()
        }
    }

    pub fn is_dry(&self) -> bool {
        self.dry
    }

    /// Live bytes by buffer label, largest first.
    pub fn live_by_label(&self) -> Vec<(String, u64)> {
        let map = self.by_label.lock().expect("allocator labels");
        let mut v: Vec<(String, u64)> = map
            .iter()
            .filter(|(_, b)| **b > 0)
            .map(|(l, b)| (l.clone(), *b))
            .collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        v
    }

    /// The largest storage binding of any kernel made so far.
    pub fn largest_binding(&self) -> Option<Binding> {
        self.largest_binding
            .lock()
            .expect("allocator bindings")
            .clone()
    }

    pub(crate) fn record_binding(&self, binding: Binding) {
        let mut largest = self.largest_binding.lock().expect("allocator bindings");
        if largest.as_ref().is_none_or(|l| binding.bytes > l.bytes) {
            *largest = Some(binding);
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
    label: String,
    allocator: Arc<Allocator>,
}

impl GpuBuffer {
    /// The size of a buffer asked for `bytes`: wgpu needs sizes in multiples of 4 for copies
    /// and storage bindings; never 0.
    pub fn padded_size(bytes: u64) -> u64 {
        bytes.max(4).next_multiple_of(4)
    }

    pub fn raw(&self) -> &wgpu::Buffer {
        &self.buffer
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn label(&self) -> &str {
        &self.label
    }
}

impl Drop for GpuBuffer {
    fn drop(&mut self) {
        self.allocator.live.fetch_sub(self.size, Ordering::Relaxed);
        if let Ok(mut map) = self.allocator.by_label.lock()
            && let Some(bytes) = map.get_mut(&self.label)
        {
            *bytes -= self.size;
        }
    }
}
