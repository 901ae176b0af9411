//! GPU tensors: a dtype, the storage that dtype has on this device, a shape, and a view
//! (offset + length) into a counted GPU buffer. Reshaping (flatten) never copies.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::gpu::{Arg, GpuBuffer, GpuContext};

/// A tensor's element types live below the GPU layer ([`crate::dtype`]); they are named from
/// here too, where tensors are.
pub use crate::dtype::{DType, Storage};

/// A typed view of GPU memory.
#[derive(Clone, Debug)]
pub struct Tensor {
    buffer: Arc<GpuBuffer>,
    offset: u64,
    shape: Vec<usize>,
    storage: Storage,
}

impl Tensor {
    /// A new zero-filled tensor in its own buffer.
    pub fn zeros(ctx: &GpuContext, shape: &[usize], dtype: DType) -> Tensor {
        let storage = ctx.storage_for(dtype);
        Self::zeros_with_storage(ctx, shape, storage)
    }

    pub fn zeros_with_storage(ctx: &GpuContext, shape: &[usize], storage: Storage) -> Tensor {
        Self::zeros_labelled(ctx, "tensor", shape, storage)
    }

    /// A new zero-filled tensor in its own buffer labelled `label` (what a memory plan and
    /// a binding error name it by).
    pub fn zeros_labelled(
        ctx: &GpuContext,
        label: &str,
        shape: &[usize],
        storage: Storage,
    ) -> Tensor {
        let n: usize = shape.iter().product();
        let buffer = ctx.alloc_storage(label, storage.bytes_for(n));
        Tensor {
            buffer,
            offset: 0,
            shape: shape.to_vec(),
            storage,
        }
    }

    /// Bytes of the buffer a `[shape]` tensor in `storage` gets of its own (padded as every
    /// buffer is: [`GpuBuffer::padded_size`]).
    pub fn buffer_bytes(shape: &[usize], storage: Storage) -> u64 {
        GpuBuffer::padded_size(storage.bytes_for(shape.iter().product()))
    }

    /// Upload f32 data, converted to `dtype`'s storage on this device.
    pub fn from_f32(
        ctx: &GpuContext,
        data: &[f32],
        shape: &[usize],
        dtype: DType,
    ) -> Result<Tensor> {
        Self::from_f32_with_storage(ctx, data, shape, ctx.storage_for(dtype))
    }

    pub fn from_f32_with_storage(
        ctx: &GpuContext,
        data: &[f32],
        shape: &[usize],
        storage: Storage,
    ) -> Result<Tensor> {
        let n: usize = shape.iter().product();
        if n != data.len() {
            return Err(Error::shape(
                "upload",
                format!(
                    "shape {shape:?} holds {n} elements but {} were given",
                    data.len()
                ),
            ));
        }
        let t = Self::zeros_with_storage(ctx, shape, storage);
        t.write_f32(ctx, data)?;
        Ok(t)
    }

    /// A view into an existing buffer at `offset` bytes. The offset must be a multiple of the
    /// device's storage-buffer offset alignment (`caps.min_storage_buffer_offset_alignment`).
    pub fn view(
        ctx: &GpuContext,
        buffer: Arc<GpuBuffer>,
        offset: u64,
        shape: &[usize],
        storage: Storage,
    ) -> Result<Tensor> {
        let align = ctx.caps.min_storage_buffer_offset_alignment as u64;
        if !offset.is_multiple_of(align) {
            return Err(Error::shape(
                "view",
                format!("offset {offset} is not a multiple of the device alignment {align}"),
            ));
        }
        let n: usize = shape.iter().product();
        let end = offset + storage.bytes_for(n).next_multiple_of(4);
        if end > buffer.size() {
            return Err(Error::shape(
                "view",
                format!(
                    "view ends at byte {end}, past the buffer's {} bytes",
                    buffer.size()
                ),
            ));
        }
        Ok(Tensor {
            buffer,
            offset,
            shape: shape.to_vec(),
            storage,
        })
    }

    /// Same memory, new shape (flatten and friends: no copy).
    pub fn reshape(&self, shape: &[usize]) -> Result<Tensor> {
        let n: usize = shape.iter().product();
        if n != self.numel() {
            return Err(Error::shape(
                "reshape",
                format!("cannot view {:?} as {shape:?}", self.shape),
            ));
        }
        Ok(Tensor {
            shape: shape.to_vec(),
            ..self.clone()
        })
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn dtype(&self) -> DType {
        self.storage.dtype()
    }

    pub fn storage(&self) -> Storage {
        self.storage
    }

    pub fn buffer(&self) -> &Arc<GpuBuffer> {
        &self.buffer
    }

    pub fn byte_offset(&self) -> u64 {
        self.offset
    }

    /// Bytes of the binding (rounded up to 4 so packed tensors of odd length bind whole words).
    pub fn binding_size(&self) -> u64 {
        self.storage
            .bytes_for(self.numel())
            .max(4)
            .next_multiple_of(4)
    }

    /// This tensor as a kernel argument: its bytes, and the storage that picks the variant of
    /// the `#tensor` declaration it binds.
    pub fn arg(&self) -> Arg<'_> {
        Arg::Typed {
            buffer: &self.buffer,
            offset: self.offset,
            size: self.binding_size(),
            storage: self.storage,
        }
    }

    /// Queue a write of f32 values (converted to this tensor's storage). No wait.
    pub fn write_f32(&self, ctx: &GpuContext, data: &[f32]) -> Result<()> {
        if data.len() != self.numel() {
            return Err(Error::shape(
                "write",
                format!(
                    "tensor {:?} holds {} elements but {} were given",
                    self.shape,
                    self.numel(),
                    data.len()
                ),
            ));
        }
        let bytes = self.storage.encode(data);
        ctx.write_buffer(&self.buffer, self.offset, &bytes);
        Ok(())
    }

    /// Read the values back as f32 (async: works on the web).
    pub async fn read_f32_async(&self, ctx: &GpuContext) -> Result<Vec<f32>> {
        let bytes = ctx
            .read_bytes_async(&self.buffer, self.offset, self.binding_size())
            .await?;
        Ok(self.storage.decode(&bytes, self.numel()))
    }

    /// Blocking read (native only: tests and the end of a run).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn read_f32(&self, ctx: &GpuContext) -> Result<Vec<f32>> {
        let bytes = ctx.read_bytes(&self.buffer, self.offset, self.binding_size())?;
        Ok(self.storage.decode(&bytes, self.numel()))
    }
}
