//! What a step lends the gradient exchange (`exchange.rs`), apart from `rank.rs`, which
//! holds the exchange: so neither file imports the other.

use crate::gpu::GpuBuffer;

/// The buffers of a step that the ranks all-reduce: the flat gradients, the metrics (the
/// micro-batch losses from word [`crate::train::stats::METRIC_LOSSES`]) and, where the scaler is
/// enabled, its state (the found-inf word the ranks agree on).
#[cfg_attr(target_arch = "wasm32", allow(dead_code))] // the web never all-reduces
pub(crate) struct StepBuffers<'a> {
    pub grads: &'a GpuBuffer,
    pub metrics: &'a GpuBuffer,
    pub scaler_state: Option<&'a GpuBuffer>,
}
