//! GPU work the app reads back asynchronously next to training, each through a
//! [`crate::gpu::ReadbackRing`] of its own and never blocking a frame:
//! - [`eval`]: validation accuracy on held-out batches, with the run's current weights;
//! - [`profile`]: per-kernel GPU time of a step, on a twin trainer (timestamp queries);
//! - [`histogram`]: log2 histograms of one parameter's gradients, unscaled and scaled;
//! - [`sample`]: text sampled from a GPT run with its current weights.
//!
//! Each is due on a [`crate::train::Periodic`] schedule, the one the CLI's loop uses for its
//! loss estimates and checkpoints.

pub mod eval;
pub mod histogram;
pub mod profile;
pub mod sample;
