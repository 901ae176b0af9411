//! The shapes of run the loop tests share, made with the library's run builder.

use webgpu_amp::amp::policy::Precision;
use webgpu_amp::nn::LossKind;
use webgpu_amp::optim::OptimizerConfig;
use webgpu_amp::train::{RunConfig, StepConfig};

/// An amp-f16 step (GradScaler on) on class labels with `optimizer`.
pub fn amp_step(optimizer: OptimizerConfig) -> StepConfig {
    StepConfig::new(Precision::AmpF16, LossKind::CrossEntropy, optimizer)
}

/// `steps` optimizer steps of `step` on shuffled batches of `batch` (seed 0), without
/// validation at the epoch ends.
pub fn steps_run(step: StepConfig, batch: usize, steps: u64) -> RunConfig {
    RunConfig::new(step, batch)
        .steps(steps)
        .validate_each_epoch(false)
}
