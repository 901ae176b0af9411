//! GPU runtime: instance, adapter and device selection, capabilities, faults, the one buffer
//! allocator, the pipeline cache and readbacks.
//!
//! Everything that touches `wgpu` directly at the device level lives here; ops only ask the
//! context for buffers ([`GpuContext::alloc`]) and kernels ([`GpuContext::kernel`]). The
//! layer knows buffers and storages ([`crate::dtype`]), not tensors or precision modes.
//!
//! - `adapter`: backend, adapter, f16-storage and tensor-core choice ([`GpuOptions`])
//! - `capabilities`: what an adapter can do and its description ([`AdapterDescription`])
//! - `faults`: uncaptured GPU errors and device loss, surfaced by [`GpuContext::check`]
//! - `context`: [`GpuContext`]
//! - `flat_pieces`: the ranges a flat parameter buffer is bound in ([`GpuContext::flat_pieces`])
//! - `tensor_cores`: whether f16 matmuls and convolutions run on cooperative matrices, and on
//!   which fragment shape ([`TensorCores`], [`TensorCoreChoice`])
//! - `alloc`, `kernel`, `readback`: counted buffers, cached pipelines, reading back
//! - `map_signal`: a buffer map's outcome, waited for whichever thread's poll fires it
//! - `timing`: GPU time per kernel from timestamp queries ([`KernelTimer`])
//! - `adapter_class`, `kernel_table`, `tuning_file`: how the heavy kernels are shaped per
//!   adapter class ([`KernelTable`]), and the tuned tables `bench tune` writes ([`TuningFile`])

mod adapter;
mod adapter_class;
mod alloc;
mod capabilities;
mod context;
mod faults;
mod flat_pieces;
mod kernel;
mod kernel_checks;
pub mod kernel_rules;
pub mod kernel_table;
mod map_signal;
mod readback;
mod tensor_cores;
mod timing;
pub mod tuning_file;

pub use adapter::{BackendChoice, F16StorageChoice, GpuOptions, enumerate_adapters};
pub use alloc::{Allocator, Binding, GpuBuffer, MemoryStats};
pub use capabilities::{AdapterDescription, Capabilities};
pub use context::{CompiledEntry, GpuContext};
pub use flat_pieces::{PIECE_ALIGN, pieces_under};
pub use kernel::{Arg, CHECKED_KERNELS_ENV, Kernel, KernelDesc, grid_1d};
pub use kernel_rules::KernelLimits;
pub use kernel_table::{
    AdapterClass, CoopTile, CoopTiles, KernelTable, SimtTile, SplitK, TileSize,
};
pub use map_signal::{LATE_MAPS_ENV, MapSignal, MapState};
pub use readback::ReadbackRing;
pub use tensor_cores::{
    COOP_MIN_WORKGROUP_BYTES, COOP_WORKGROUP_BYTES, TensorCoreChoice, TensorCoreConfig, TensorCores,
};
pub use timing::{KernelTimer, KernelTimes};
pub use tuning_file::{
    AdapterKernels, Measurement, TUNING_ENV, TUNING_FORMAT, TableOrigin, TuningFile, escaped,
    set_tuning_file,
};

/// Bytes for people: `313.6 MB`, `2.1 GB`.
pub fn human_bytes(bytes: u64) -> String {
    match bytes {
        b if b >= 1_000_000_000 => format!("{:.1} GB", b as f64 / 1e9),
        b if b >= 1_000_000 => format!("{:.1} MB", b as f64 / 1e6),
        b if b >= 1_000 => format!("{:.1} kB", b as f64 / 1e3),
        b => format!("{b} bytes"),
    }
}
