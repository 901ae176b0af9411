//! Training: the planned step (forward, backward, unscale, clip, optimizer, scale update in
//! one submit) and, on top of it, the training loop, metrics and checkpoints.

pub mod step;

pub use step::{BatchTargets, Evaluation, StepConfig, StepStats, Trainer};
pub mod checkpoint;
#[cfg(not(target_arch = "wasm32"))]
pub mod run;
