//! Running, and a run's periodic work: the one training loop ([`run`]), its blocking side
//! on native (`run_blocking`: validation, checkpoints, the summary), when periodic work is
//! due ([`periodic`]), validation and prediction ([`evaluate`]), loss estimates
//! ([`estimate`]) with flip test-time augmentation (`tta`), and the guards a run keeps
//! (`guards`: skipped steps, resume progress).

pub mod estimate;
pub mod evaluate;
pub(in crate::train) mod guards;
pub mod periodic;
pub mod run;
pub(in crate::train) mod tta;
// Native only: it waits for the GPU.
#[cfg(not(target_arch = "wasm32"))]
pub(in crate::train) mod run_blocking;
