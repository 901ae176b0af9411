//! Reading GPU memory back to the host. The async form is the only one on the web; native
//! code may block on it (tests, end of run), and each blocking read counts as a host wait.

use super::{GpuBuffer, GpuContext};
use crate::error::{Error, Result};

impl GpuContext {
    /// Copy `size` bytes at `offset` of `buffer` into a staging buffer and map it.
    /// On native the future must be driven with a device poll; [`GpuContext::read_bytes`]
    /// does that. On the web the browser resolves it.
    pub async fn read_bytes_async(
        &self,
        buffer: &GpuBuffer,
        offset: u64,
        size: u64,
    ) -> Result<Vec<u8>> {
        let padded = size.max(4).next_multiple_of(4);
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
        self.queue.submit([encoder.finish()]);

        let (tx, rx) = futures_channel::oneshot::channel();
        staging
            .raw()
            .slice(..)
            .map_async(wgpu::MapMode::Read, move |r| {
                let _ = tx.send(r);
            });
        #[cfg(not(target_arch = "wasm32"))]
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
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
