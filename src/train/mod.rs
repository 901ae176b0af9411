//! Training: the planned step and, on top of it, the one training loop, metrics and
//! checkpoints.
//!
//! - [`trainer`]: the planned step (forward, backward, unscale, clip, optimizer, scale
//!   update), one submit per micro-batch;
//! - [`batch`]: a batch's inputs and targets, uploaded into a planned network;
//! - [`stats`]: step stats coming back through a ring of asynchronously mapped buffers;
//! - [`evaluate`]: validation and prediction (forward only);
//! - [`estimate`]: loss estimates on random batches (nanoGPT's `estimate_loss`);
//! - [`generate`]: text generation from a GPT checkpoint (forward and sampling on the GPU);
//! - [`prepare`]: a model and its data resolved together (text cut to the block size);
//! - [`planning`]: device limits and out-of-memory as errors while planning;
//! - [`profile`]: where a step's time goes (GPU time per kernel and phase, host time);
//! - [`run`]: the training loop, [`Run::advance`], which the CLI (blocking, [`Run::run`] on
//!   native) and the app (one call per frame, native and web) both drive;
//! - [`checkpoint`]: safetensors checkpoints and resume;
//! - `distributed` (native): one rank of a data-parallel job, the gradient all-reduce
//!   inside the step ([`crate::dist`] for the collectives).

pub mod batch;
pub mod checkpoint;
#[cfg(not(target_arch = "wasm32"))]
pub mod distributed;
pub mod estimate;
pub mod evaluate;
#[cfg(not(target_arch = "wasm32"))]
pub mod generate;
pub mod planning;
pub mod prepare;
pub mod profile;
pub mod run;
#[cfg(not(target_arch = "wasm32"))]
mod run_blocking;
pub mod stats;
pub mod trainer;

pub use batch::{BatchInput, BatchTargets};
pub use estimate::{EVAL_BATCHES, EvalConfig, EvalReport};
pub use evaluate::{EvalTally, Evaluation};
pub use prepare::{ModelChoice, model_and_data, model_for_split};
pub use profile::{HostTimes, Phase, StepProfile};
pub use run::{Advance, EpochReport, Event, Run, RunConfig};
#[cfg(not(target_arch = "wasm32"))]
pub use run_blocking::RunSummary;
pub use stats::{RING, StepStats};
pub use trainer::{DropoutStream, StepConfig, Trainer};
pub use trainer::{MAX_SAMPLE_TOKENS, SampleRequest};
