//! Training: the planned step and, on top of it, the one training loop, metrics and
//! checkpoints. Its parts are in folders that name them: [`stepping`] (the step and its
//! planning), [`running`] (the loop and its periodic work), [`sampling`] (sampling and
//! generation), [`hooks`] (test hooks), [`checkpoint`], [`numerics`] and `rank`; each
//! module is also here under its own name (`train::evaluate`, `train::step`).
//!
//! - [`config`]: how a run is set up ([`StepConfig::new`], [`RunConfig::new`]) and the one
//!   place its settings are checked; [`settings`]: each setting's range;
//! - [`trainer`]: a model, its optimizer and GradScaler planned for training; it plans a
//!   network per batch size and hands each micro-batch to the step;
//! - [`step`]: one step in order (begin, forward, loss, backward, unscale, clip, optimizer,
//!   scale update, stats), one submit per micro-batch, and the kernels of each phase
//!   (`StepKernels`), planned in that order;
//! - `in_flight`: the steps a trainer has in flight (metrics, stats ring, the AMP doctor's
//!   counts, micro-batch and submission counts, host times);
//! - [`batch`]: a batch's inputs and targets (the data's pair), uploaded into a planned
//!   network;
//! - [`stats`]: step stats coming back through a ring of asynchronously mapped buffers;
//! - [`numerics`]: the AMP doctor, per-layer numerics counted on the GPU, skip causes and
//!   advice;
//! - [`host_time`]: the host's time in the steps;
//! - [`evaluate`]: validation and prediction (forward only);
//! - [`estimate`]: loss estimates on random batches (nanoGPT's `estimate_loss`);
//! - [`sample`]: text from a GPT, the one sampling core of `sample` and the app;
//! - [`generate`] (native): `sample`'s text generation from a GPT checkpoint;
//! - [`prepare`]: a model and its data resolved together (text cut to the block size);
//! - [`planning`]: device limits and out-of-memory as errors while planning;
//! - [`memory`]: a step's GPU memory planned without allocating it, and the check that a
//!   network binds within the adapter's limits before it is allocated;
//! - [`profile`] (native): where a step's time goes (GPU time per kernel and phase);
//! - [`run`]: the training loop, [`Run::advance`], which the CLI (blocking, `Run::run` on
//!   native) and the app (one call per frame, native and web) both drive;
//! - [`periodic`]: when a run's periodic work is due (the CLI's loop and the app's probes);
//! - [`checkpoint`]: safetensors checkpoints and resume;
//! - [`fault_hooks`]: test hooks that raise a signal or lose the device at a chosen step;
//! - `rank`: a process's place in a data-parallel job, as the trainer and the run hold it;
//!   `distributed` (native): joining a job ([`crate::dist`] for the collectives).

pub mod batch;
pub mod checkpoint;
pub mod config;
pub mod hooks;
pub mod numerics;
pub mod prepare;
mod rank;
pub mod running;
pub mod sampling;
pub mod settings;
pub mod stepping;
pub mod trainer;
// Native only: it waits for the GPU.
#[cfg(not(target_arch = "wasm32"))]
pub mod distributed;

// The parts' modules where they were before `train/` had folders (`train::evaluate`, ...).
pub use hooks::fault_hooks;
pub(in crate::train) use running::guards;
#[cfg(not(target_arch = "wasm32"))]
pub(in crate::train) use running::run_blocking;
pub use running::{estimate, evaluate, periodic, run};
#[cfg(not(target_arch = "wasm32"))]
pub use sampling::generate;
pub use sampling::sample;
#[cfg(not(target_arch = "wasm32"))]
pub use stepping::profile;
pub(in crate::train) use stepping::{augmenting, in_flight};
pub use stepping::{host_time, memory, planning, stats, step};

pub use batch::{BatchInput, BatchTargets};
pub use config::{EvalConfig, Interrupt, RunConfig, StepConfig};
pub use estimate::EvalReport;
pub use evaluate::{EvalTally, Evaluation};
pub use guards::SKIPPING_HINT;
pub use host_time::HostTimes;
pub use periodic::Periodic;
pub use prepare::{ModelChoice, model_and_data, model_and_tokenized, model_for_split};
#[cfg(not(target_arch = "wasm32"))]
pub use profile::StepProfile;
pub use run::{Advance, EpochReport, Event, Run};
#[cfg(not(target_arch = "wasm32"))]
pub use run_blocking::RunSummary;
pub use sample::{MAX_SAMPLE_TOKENS, SampleOptions};
pub use settings::{
    EVAL_BATCHES, MAX_BATCH_SIZE, MAX_COUNT, MAX_EVAL_BATCHES, MAX_GRAD_ACCUM, MAX_SKIPPED_STEPS,
    MIN_SCALE, Setting,
};
pub use stats::{RING, StepStats};
pub use step::Phase;
pub use trainer::{DropoutStream, Trainer};
