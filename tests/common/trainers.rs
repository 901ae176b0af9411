//! A trainer of a model as the step benchmarks plan one: cross-entropy, AdamW at 1e-3, and a
//! GPT clipping at 1.0 (nanoGPT's recipe), a CNN not.

use webgpu_amp::GpuContext;
use webgpu_amp::amp::policy::Precision;
use webgpu_amp::nn::{LossKind, ModelSpec};
use webgpu_amp::optim::OptimizerConfig;
use webgpu_amp::train::{StepConfig, Trainer};

/// A trainer of `spec` (named `model`: a name starting with `gpt` clips) with `classes`
/// outputs under `precision`, from seed 0's initial weights.
pub fn bench_trainer(
    ctx: &GpuContext,
    (model, spec): (&str, ModelSpec),
    classes: usize,
    precision: Precision,
) -> Trainer {
    let init = spec.init_params(0);
    let config = StepConfig::new(
        precision,
        LossKind::CrossEntropy,
        OptimizerConfig::adamw(1e-3),
    )
    .clip_grad_norm(takes_tokens(model).then_some(1.0));
    Trainer::new(ctx, spec, config, classes, &init).unwrap()
}

/// Whether a preset is a language model (a GPT or a Llama): it takes token ids and its recipe
/// clips, as nanoGPT's and transformers' do.
pub fn takes_tokens(model: &str) -> bool {
    model.starts_with("gpt") || model.starts_with("llama")
}
