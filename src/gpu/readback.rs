//! Reading GPU memory back to the host.
//!
//! [`ReadbackRing`] is the one asynchronous read-back path: step stats, the app's validation,
//! kernel profiles and gradient histograms all go through it. It is a small ring of
//! `MAP_READ` staging buffers; a submission copies into the next free slot and the slot is
//! mapped with `map_async`, remembering that submission's [`wgpu::SubmissionIndex`]. A later
//! call takes the oldest slot once its map has landed ([`ReadbackRing::take_ready`], never
//! blocking) or, on native, blocks for that one submission only
//! ([`ReadbackRing::wait_oldest`], one counted host wait), never for the whole queue.
//!
//! [`GpuContext::read_bytes`] is the blocking form for tests and the end of a run; each call
//! counts as a host wait too.

use std::sync::Arc;

use super::map_signal::{MapSignal, MapState};
use super::{GpuBuffer, GpuContext};
use crate::error::{Error, Result};

struct Slot<T> {
    buffer: Arc<GpuBuffer>,
    /// Free, pending (copy submitted, map requested), ready (mapped) or failed.
    map: Arc<MapSignal>,
    submission: Option<wgpu::SubmissionIndex>,
    tag: Option<T>,
}

/// A ring of staging buffers read back asynchronously, oldest first. `T` is what the
/// caller needs to know about each read (a step number, say). See the module docs.
pub struct ReadbackRing<T> {
    slots: Vec<Slot<T>>,
    /// The slot the next submission copies into.
    head: usize,
    /// Slots submitted and not yet taken; the oldest is `head - in_flight` (mod len).
    in_flight: usize,
    waits: u64,
}

impl<T> ReadbackRing<T> {
    /// `slots` staging buffers of `bytes` each.
    pub fn new(ctx: &GpuContext, label: &str, slots: usize, bytes: u64) -> Self {
        let slots = (0..slots.max(1))
            .map(|_| Slot {
                buffer: ctx.alloc(
                    label,
                    bytes,
                    wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                ),
                map: MapSignal::new(),
                submission: None,
                tag: None,
            })
            .collect();
        Self {
            slots,
            head: 0,
            in_flight: 0,
            waits: 0,
        }
    }

    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Slots submitted and not yet taken (mapped or not).
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Every slot is in flight: nothing can be submitted until the oldest is taken.
    pub fn is_full(&self) -> bool {
        self.in_flight == self.slots.len()
    }

    /// The staging buffer the next submission copies into (`None` while the ring is full).
    pub fn next_buffer(&self) -> Option<&GpuBuffer> {
        (!self.is_full()).then(|| &*self.slots[self.head].buffer)
    }

    /// Submit `encoder` (which copies into [`ReadbackRing::next_buffer`]) and start mapping
    /// that slot. Returns the submission's index. An error when the ring is full.
    pub fn submit(
        &mut self,
        ctx: &GpuContext,
        encoder: wgpu::CommandEncoder,
        tag: T,
    ) -> Result<wgpu::SubmissionIndex> {
        if self.is_full() {
            return Err(Error::Gpu(
                "read-back ring full: take or wait for its oldest slot first".into(),
            ));
        }
        let index = ctx.queue.submit([encoder.finish()]);
        let slot = &mut self.slots[self.head];
        slot.submission = Some(index.clone());
        slot.tag = Some(tag);
        slot.map.map_read(slot.buffer.raw());
        self.head = (self.head + 1) % self.slots.len();
        self.in_flight += 1;
        Ok(index)
    }

    /// [`ReadbackRing::submit`] with `encoder`'s work followed by a copy of the whole of
    /// `source` into the next slot (`source` must fit in a slot).
    pub fn submit_copy(
        &mut self,
        ctx: &GpuContext,
        mut encoder: wgpu::CommandEncoder,
        source: &GpuBuffer,
        tag: T,
    ) -> Result<wgpu::SubmissionIndex> {
        if let Some(staging) = self.next_buffer() {
            encoder.copy_buffer_to_buffer(source.raw(), 0, staging.raw(), 0, source.size());
        }
        self.submit(ctx, encoder, tag)
    }

    fn oldest_index(&self) -> Option<usize> {
        (self.in_flight > 0)
            .then(|| (self.head + self.slots.len() - self.in_flight) % self.slots.len())
    }

    /// The tag of the oldest slot in flight.
    pub fn oldest(&self) -> Option<&T> {
        self.oldest_index().and_then(|i| self.slots[i].tag.as_ref())
    }

    /// Whether the oldest slot's map failed (the device was lost or the buffer destroyed):
    /// it will never be ready.
    pub fn oldest_failed(&self) -> bool {
        self.oldest_index()
            .is_some_and(|i| self.slots[i].map.state() == MapState::Failed)
    }

    /// The oldest slot's tag and bytes, through `read`, once its map has landed; frees the
    /// slot. Never blocks. On native the map callbacks run inside a device poll
    /// ([`GpuContext::poll_ready`]); on the web the browser runs them between frames.
    pub fn take_ready<R>(&mut self, read: impl FnOnce(T, &[u8]) -> R) -> Option<R> {
        let i = self.oldest_index()?;
        let slot = &mut self.slots[i];
        if slot.map.state() != MapState::Ready {
            return None;
        }
        let result = {
            let view = slot.buffer.raw().slice(..).get_mapped_range().ok();
            let tag = slot.tag.take();
            match (view, tag) {
                (Some(view), Some(tag)) => Some(read(tag, &view)),
                _ => None,
            }
        };
        slot.buffer.raw().unmap();
        slot.submission = None;
        slot.map.free();
        self.in_flight -= 1;
        result
    }

    /// Block until the oldest slot's submission has finished and its map has landed
    /// (native). Waits for that one submission, not the whole queue, and counts as one host
    /// wait. Does nothing when no slot is in flight.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn wait_oldest(&mut self, ctx: &GpuContext) -> Result<()> {
        let Some(i) = self.oldest_index() else {
            return Ok(());
        };
        let slot = &self.slots[i];
        if slot.map.state() == MapState::Pending {
            ctx.count_host_wait();
            self.waits += 1;
        }
        slot.map.wait(ctx, slot.submission.clone())
    }

    /// Block until every slot in flight has landed (native; the end of a run), so that
    /// [`ReadbackRing::take_ready`] takes them all. Meant to follow [`GpuContext::sync`],
    /// which counts the host wait: this one waits for map callbacks that another thread's
    /// poll may still be firing, and counts nothing.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn wait_all(&self, ctx: &GpuContext) -> Result<()> {
        let len = self.slots.len();
        for k in 0..self.in_flight {
            let slot = &self.slots[(self.head + len - self.in_flight + k) % len];
            slot.map.wait(ctx, slot.submission.clone())?;
        }
        Ok(())
    }

    /// Blocking waits made by [`ReadbackRing::wait_oldest`] so far.
    pub fn waits(&self) -> u64 {
        self.waits
    }
}

impl GpuContext {
    /// Let finished work's callbacks run (map callbacks of [`ReadbackRing`]s) without
    /// blocking: a non-blocking device poll on native; nothing on the web, where the browser
    /// runs them.
    pub fn poll_ready(&self) {
        #[cfg(not(target_arch = "wasm32"))]
        let _ = self.device.poll(wgpu::PollType::Poll);
    }

    /// Copy `size` bytes at `offset` of `buffer` into a staging buffer and map it.
    /// On native the future must be driven with a device poll; [`GpuContext::read_bytes`]
    /// does that. On the web the browser resolves it.
    pub async fn read_bytes_async(
        &self,
        buffer: &GpuBuffer,
        offset: u64,
        size: u64,
    ) -> Result<Vec<u8>> {
        let padded = GpuBuffer::padded_size(size);
        let staging = self.alloc(
            "readback",
            padded,
            wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        );
        let mut encoder = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("readback"),
            });
        encoder.copy_buffer_to_buffer(buffer.raw(), offset, staging.raw(), 0, padded);
        #[cfg_attr(target_arch = "wasm32", allow(unused_variables))]
        let index = self.queue.submit([encoder.finish()]);

        let (tx, rx) = futures_channel::oneshot::channel();
        staging
            .raw()
            .slice(..)
            .map_async(wgpu::MapMode::Read, move |r| {
                let _ = tx.send(r);
            });
        #[cfg(not(target_arch = "wasm32"))]
        self.device
            .poll(wgpu::PollType::Wait {
                submission_index: Some(index),
                timeout: None,
            })
            .map_err(|e| self.poll_error(e))?;
        // A GPU error recorded by now (an invalid buffer, a lost device) makes these bytes
        // meaningless: report it instead of returning them.
        self.check()?;
        rx.await
            .map_err(|_| Error::Gpu("readback cancelled (device lost?)".into()))?
            .map_err(|e| match self.device_lost() {
                Some(reason) => Error::DeviceLost(reason),
                None => Error::Gpu(format!("readback failed: {e}")),
            })?;
        let bytes = {
            let view = staging
                .raw()
                .slice(..)
                .get_mapped_range()
                .map_err(|e| Error::Gpu(format!("readback mapping failed: {e}")))?;
            view[..size as usize].to_vec()
        };
        staging.raw().unmap();
        Ok(bytes)
    }

    /// Blocking readback (native only). Counts as one host wait.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn read_bytes(&self, buffer: &GpuBuffer, offset: u64, size: u64) -> Result<Vec<u8>> {
        self.count_host_wait();
        pollster::block_on(self.read_bytes_async(buffer, offset, size))
    }
}
