//! One forward and backward of a model on one batch, written out for comparison with
//! PyTorch (`scripts/nanogpt_compat.py` runs it): the logits, the loss and every parameter's
//! gradient, exactly as a `webgpu-amp train` step computes them.
//!
//! ```sh
//! cargo run --example gpt_grads -- MODEL.json INIT.safetensors DATA.safetensors PRECISION OUT.safetensors [ATTENTION]
//! ```
//!
//! - `MODEL.json`: a model description (`{"gpt": {...}}`, see `webgpu-amp train --model`);
//! - `INIT.safetensors`: its parameters under PyTorch's names (a tied weight under one name
//!   or both, as `train --init` accepts them);
//! - `DATA.safetensors`: the batch, every sample of a data set `train --dataset` reads (for a
//!   GPT: integer tokens `x` and targets `y`, both `[N, T]`);
//! - `PRECISION`: `f32`, `amp-f16`, `amp-bf16` or `f16`; under `amp-f16` the GradScaler is on
//!   with its default initial scale 2^16, so the gradients are those of `scale · loss`,
//!   unscaled, as the optimizer sees them;
//! - `ATTENTION`: `fused` (the default) or `unfused`, as `train --attention`.
//!
//! What it does: plans the model as `train` does (same trainer, same kernels) for a batch of
//! all N samples; runs the forward alone on the initial weights and reads the output
//! (`logits`, f32, `[N, T, V]` for a GPT: under AMP the f16 values widened) and validates
//! the batch twice (`eval_loss`: the mean loss of the evaluation plan, PyTorch's
//! `model.eval()`, which two runs must give to the bit); then runs one
//! training step, forward, loss and backward with the loss gradient seeded by the scale,
//! and unscaling, and reads back the mean loss of that step (`loss`, `[1]`) and every
//! parameter's f32 gradient (`grad.NAME`). The step's optimizer is SGD with no momentum and
//! no weight decay, which leaves the gradient buffer as the backward wrote it. The scale that
//! step used and whether it found inf/NaN are in the file's metadata (`scale`, `skipped`).

use std::collections::HashMap;
use std::process::ExitCode;

use safetensors::tensor::{Dtype, TensorView};
use webgpu_amp::amp::policy::Precision;
use webgpu_amp::data::DataSource;
use webgpu_amp::nn::{AttentionKernel, LossKind};
use webgpu_amp::optim::OptimizerConfig;
use webgpu_amp::train::checkpoint::Checkpoint;
use webgpu_amp::train::evaluate::{evaluate_indices, predict};
use webgpu_amp::train::{ModelChoice, StepConfig, Trainer, model_and_data};
use webgpu_amp::{Error, GpuContext, GpuOptions, Result};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (files, attention) = match args.as_slice() {
        [files @ .., a] if args.len() == 6 => (files, a.as_str()),
        files => (files, "fused"),
    };
    let [model, init, data, precision, out] = files else {
        eprintln!(
            "usage: gpt_grads MODEL.json INIT.safetensors DATA.safetensors PRECISION OUT.safetensors [fused|unfused]"
        );
        return ExitCode::from(2);
    };
    match run(model, init, data, precision, out, attention) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(
    model: &str,
    init: &str,
    data: &str,
    precision: &str,
    out: &str,
    attention: &str,
) -> Result<()> {
    let precision = Precision::parse(precision)?;
    let attention = AttentionKernel::parse(attention)?;
    let text = std::fs::read_to_string(model)
        .map_err(|e| Error::Model(format!("{model}: cannot read: {e}")))?;
    let source: DataSource = data.parse()?;
    let (spec, split) = model_and_data(Some(&ModelChoice::Json(text)), &source, false)?;
    let spec = spec.with_attention(attention);
    let train = &split.train;
    let params = Checkpoint::load(std::path::Path::new(init))?.params_for_model(&spec, init)?;
    let ctx = GpuContext::new(&GpuOptions::from_env()?)?;
    let config = StepConfig::new(
        precision,
        LossKind::CrossEntropy,
        OptimizerConfig::sgd(0.01),
    );
    let names: Vec<(String, Vec<usize>)> = spec
        .parameters()
        .into_iter()
        .map(|p| (p.name, p.shape))
        .collect();
    let output_shape: Vec<usize> = std::iter::once(train.n)
        .chain(spec.output_shape().iter().copied())
        .collect();
    let mut trainer = Trainer::new(&ctx, spec, config, train.output_dim(), &params)?;
    let all: Vec<usize> = (0..train.n).collect();
    let batch = train.gather(&all)?;
    let logits = predict(&ctx, &mut trainer, train.n, batch.input())?;
    // Validation of the same batch, twice: an evaluation plan has no dropout, so the two
    // must agree to the bit.
    let eval_loss: Vec<f32> = (0..2)
        .map(|_| evaluate_indices(&ctx, &mut trainer, train, [&all[..]]).map(|e| e.loss))
        .collect::<Result<_>>()?;
    if eval_loss[0].to_bits() != eval_loss[1].to_bits() {
        return Err(Error::Gpu(format!(
            "two validations of the same weights gave {} and {}",
            eval_loss[0], eval_loss[1]
        )));
    }
    let eval_loss = [eval_loss[0]];
    trainer.train_batch(&ctx, train.n, batch.input(), batch.targets())?;
    let stats = trainer.finish(&ctx)?;
    let step = stats
        .last()
        .ok_or_else(|| Error::Gpu("the step reported no stats".into()))?;
    let grads = trainer.store.download_grads(&ctx)?;
    ctx.check()?;

    let loss = [step.loss];
    let mut tensors: Vec<(String, Vec<usize>, &[f32])> = vec![
        ("logits".into(), output_shape, &logits),
        ("loss".into(), vec![1], &loss),
        ("eval_loss".into(), vec![1], &eval_loss),
    ];
    for ((name, values), (_, shape)) in grads.iter().zip(&names) {
        tensors.push((format!("grad.{name}"), shape.clone(), values));
    }
    let views = tensors
        .iter()
        .map(|(name, shape, values)| {
            TensorView::new(Dtype::F32, shape.clone(), bytemuck::cast_slice(values))
                .map(|v| (name.clone(), v))
                .map_err(|e| Error::Checkpoint(format!("{name}: {e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    let metadata = HashMap::from([
        ("scale".to_string(), step.scale.to_string()),
        ("skipped".to_string(), step.skipped.to_string()),
        ("adapter".to_string(), ctx.report.name.clone()),
        ("tensor_cores".to_string(), tensor_cores(&ctx, precision)),
    ]);
    let bytes = safetensors::serialize(views, Some(metadata))
        .map_err(|e| Error::Checkpoint(format!("{out}: {e}")))?;
    std::fs::write(out, bytes).map_err(|e| Error::Checkpoint(format!("{out}: {e}")))?;
    Ok(())
}

/// The tensor cores the step's low-precision products ran on, or `none`.
fn tensor_cores(ctx: &GpuContext, precision: Precision) -> String {
    let low = ctx.storage_for(precision.low_dtype());
    match ctx.caps.tensor_cores.config() {
        Some(c) if webgpu_amp::ops::matmul::uses_tensor_cores(&ctx.caps, &[low]) => {
            format!("tensor cores {}", c.describe())
        }
        _ => "none".to_string(),
    }
}
