//! The step and its planning: one step in order ([`step`]), its data augmentation
//! (`augmenting`; the trainer's setters in `augment_settings`), the kernels and buffers planned
//! for it ([`planning`]: device limits as errors; [`memory`]: a step's memory planned dry),
//! what a trainer has in flight (`in_flight`), the stats coming home ([`stats`]), the host's
//! time in the steps ([`host_time`]) and where a step's GPU time goes ([`profile`]).

mod augment_settings;
pub(in crate::train) mod augmenting;
pub mod host_time;
pub(in crate::train) mod in_flight;
pub mod memory;
pub mod planning;
// Native only: it waits for the GPU.
#[cfg(not(target_arch = "wasm32"))]
pub mod profile;
pub mod stats;
pub mod step;
