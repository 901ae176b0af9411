//! GPU tensors: a dtype, the storage that dtype has on this device, a shape, and a view
//! (offset + length) into a counted GPU buffer. Reshaping (flatten) never copies.

use std::sync::Arc;

use half::{bf16, f16};

use crate::error::{Error, Result};
use crate::gpu::{F16Storage, GpuBuffer, GpuContext};

/// The element type a tensor holds, as the user sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    F32,
    F16,
    BF16,
}

impl DType {
    pub const ALL: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
        }
    }

    /// Round an f32 to this dtype and back (the CPU reference of a store).
    pub fn round(self, x: f32) -> f32 {
        match self {
            DType::F32 => x,
            DType::F16 => f16::from_f32(x).to_f32(),
            DType::BF16 => bf16::from_f32(x).to_f32(),
        }
    }

    /// The wider of two dtypes (binary-op promotion). f16 and bf16 together promote to f32,
    /// as in PyTorch.
    pub fn promote(self, other: DType) -> DType {
        match (self, other) {
            (a, b) if a == b => a,
            _ => DType::F32,
        }
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How a dtype is laid out in a WGSL storage buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum Storage {
    /// `array<f32>`.
    F32,
    /// `array<f16>` (needs `shader-f16`).
    F16,
    /// `array<u32>`, two f16 per word (low half = even element).
    F16Packed,
    /// `array<u32>`, two bf16 per word (low half = even element).
    BF16,
}

impl Storage {
    pub const ALL: [Storage; 4] = [
        Storage::F32,
        Storage::F16,
        Storage::F16Packed,
        Storage::BF16,
    ];

    pub fn for_dtype(dtype: DType, f16: F16Storage) -> Storage {
        match (dtype, f16) {
            (DType::F32, _) => Storage::F32,
            (DType::F16, F16Storage::Native) => Storage::F16,
            (DType::F16, F16Storage::Packed) => Storage::F16Packed,
            (DType::BF16, _) => Storage::BF16,
        }
    }

    pub fn dtype(self) -> DType {
        match self {
            Storage::F32 => DType::F32,
            Storage::F16 | Storage::F16Packed => DType::F16,
            Storage::BF16 => DType::BF16,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Storage::F32 => "f32",
            Storage::F16 => "f16",
            Storage::F16Packed => "f16packed",
            Storage::BF16 => "bf16",
        }
    }

    /// Bytes that `n` elements occupy (before rounding the buffer to 4 bytes).
    pub fn bytes_for(self, n: usize) -> u64 {
        match self {
            Storage::F32 => 4 * n as u64,
            Storage::F16 => 2 * n as u64,
            Storage::F16Packed | Storage::BF16 => 4 * n.div_ceil(2) as u64,
        }
    }

    /// Encode f32 values in this storage's byte layout (rounding to nearest even).
    pub fn encode(self, data: &[f32]) -> Vec<u8> {
        let halves = |bits: Vec<u16>| -> Vec<u8> {
            let mut b: Vec<u8> = bytemuck::cast_slice(&bits).to_vec();
            b.resize(b.len().next_multiple_of(4), 0);
            b
        };
        match self {
            Storage::F32 => bytemuck::cast_slice(data).to_vec(),
            Storage::F16 | Storage::F16Packed => {
                halves(data.iter().map(|&x| f16::from_f32(x).to_bits()).collect())
            }
            Storage::BF16 => halves(data.iter().map(|&x| bf16::from_f32(x).to_bits()).collect()),
        }
    }

    /// Decode `n` elements of this storage's byte layout to f32.
    pub fn decode(self, bytes: &[u8], n: usize) -> Vec<f32> {
        match self {
            Storage::F32 => bytemuck::pod_collect_to_vec::<u8, f32>(&bytes[..4 * n]),
            Storage::F16 | Storage::F16Packed => {
                bytemuck::pod_collect_to_vec::<u8, u16>(&bytes[..2 * n])
                    .into_iter()
                    .map(|h| f16::from_bits(h).to_f32())
                    .collect()
            }
            Storage::BF16 => bytemuck::pod_collect_to_vec::<u8, u16>(&bytes[..2 * n])
                .into_iter()
                .map(|h| bf16::from_bits(h).to_f32())
                .collect(),
        }
    }
}

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
        let n: usize = shape.iter().product();
        let buffer = ctx.alloc_storage("tensor", storage.bytes_for(n));
        Tensor {
            buffer,
            offset: 0,
            shape: shape.to_vec(),
            storage,
        }
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

    /// A view into an existing buffer at `offset` bytes. The offset must respect the device's
    /// storage-buffer offset alignment (use [`GpuContext::align_offset`]).
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
        ctx.queue
            .write_buffer(self.buffer.raw(), self.offset, &bytes);
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

impl GpuContext {
    /// Round a byte offset up to the storage-buffer offset alignment.
    pub fn align_offset(&self, offset: u64) -> u64 {
        offset.next_multiple_of(self.caps.min_storage_buffer_offset_alignment as u64)
    }
}
