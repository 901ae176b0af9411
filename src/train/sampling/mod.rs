//! Sampling and generation: the one sampling core of the app's panel and of `sample`
//! ([`sample`]), and `sample`'s generation from a checkpoint ([`generate`], native).

// Native only: it waits for the GPU.
#[cfg(not(target_arch = "wasm32"))]
pub mod generate;
pub mod sample;
