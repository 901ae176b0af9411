//! Element types as plain data: the dtype a tensor holds ([`DType`]), how the device stores
//! f16 ([`F16Storage`]), and the storage layout that follows from both ([`Storage`]), with the
//! host-side encoding of each. Nothing here touches the GPU; `shader`, `gpu` and everything
//! above build on these.

use half::{bf16, f16};

/// How f16 tensors are stored on the GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum F16Storage {
    /// `array<f16>` through the `shader-f16` feature.
    Native,
    /// Two halves per `u32`, math in f32: runs on every WebGPU device.
    Packed,
}

/// The element type a tensor holds, as the user sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    F32,
    F16,
    BF16,
    /// Integer ids (token ids of a sequence model's input): never computed in, never cast.
    U32,
}

impl DType {
    /// The floating-point dtypes (what the precision modes compute in).
    pub const ALL: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::U32 => "u32",
        }
    }

    /// Whether values of this dtype are numbers to compute with (not ids).
    pub fn is_float(self) -> bool {
        self != DType::U32
    }

    /// Round an f32 to this dtype and back (the CPU reference of a store).
    pub fn round(self, x: f32) -> f32 {
        match self {
            DType::F32 => x,
            DType::F16 => f16::from_f32(x).to_f32(),
            DType::BF16 => bf16::from_f32(x).to_f32(),
            DType::U32 => (x as u32) as f32,
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
    /// `array<u32>`: integer ids.
    U32,
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
            (DType::U32, _) => Storage::U32,
        }
    }

    pub fn dtype(self) -> DType {
        match self {
            Storage::F32 => DType::F32,
            Storage::F16 | Storage::F16Packed => DType::F16,
            Storage::BF16 => DType::BF16,
            Storage::U32 => DType::U32,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Storage::F32 => "f32",
            Storage::F16 => "f16",
            Storage::F16Packed => "f16packed",
            Storage::BF16 => "bf16",
            Storage::U32 => "u32",
        }
    }

    /// How this storage holds values, for people (`webgpu-amp info`).
    pub fn layout(self) -> &'static str {
        match self {
            Storage::F32 => "f32",
            Storage::F16 => "f16 as array<f16> (shader-f16)",
            Storage::F16Packed => "f16 packed two per u32, math in f32",
            Storage::BF16 => "bf16 packed two per u32 (WGSL has no bf16), math in f32",
            Storage::U32 => "u32 ids",
        }
    }

    /// Bytes that `n` elements occupy (before rounding the buffer to 4 bytes).
    pub fn bytes_for(self, n: usize) -> u64 {
        match self {
            Storage::F32 | Storage::U32 => 4 * n as u64,
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
            Storage::U32 => data
                .iter()
                .flat_map(|&x| (x as u32).to_le_bytes())
                .collect(),
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
            Storage::U32 => bytemuck::pod_collect_to_vec::<u8, u32>(&bytes[..4 * n])
                .into_iter()
                .map(|v| v as f32)
                .collect(),
        }
    }
}
