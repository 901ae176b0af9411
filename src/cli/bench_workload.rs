//! What `bench step` measures: a model, a batch of its data and the step's optimizer (the
//! family's recipe on its bench text, kuangliu's SGD for a ResNet on random images, Adam for
//! the tutorials' networks).

use std::io::Write;

use webgpu_amp::data::{Batch, DataSource, Dataset, Labels, Rng, Split};
use webgpu_amp::nn::families as family;
use webgpu_amp::nn::preset;
use webgpu_amp::nn::presets::meant_input;
use webgpu_amp::nn::{AttentionKernel, ModelSpec};
use webgpu_amp::optim::OptimizerConfig;
use webgpu_amp::train::{ModelChoice, model_and_data};
use webgpu_amp::{Error, GpuContext, Result};

/// A model to measure, its batch and its step's optimizer.
pub(super) struct Workload {
    pub(super) spec: ModelSpec,
    pub(super) batch: Batch,
    pub(super) classes: usize,
    pub(super) optimizer: OptimizerConfig,
    pub(super) clip_grad_norm: Option<f32>,
    /// Tokens per sample (GPT).
    pub(super) tokens: Option<usize>,
}

/// A family's preset on its bench data (text), cut into its windows (`seq_len` tokens where
/// given): the text's ids are characters, which a model with a vocabulary of its own
/// (SmolLM2's 49152) reads as ids of its vocabulary, as fast as any others.
fn family_model_and_data(model: &str, seq_len: Option<usize>) -> Result<(ModelSpec, Split)> {
    let family = family::of_preset(model).expect("a family's preset");
    let source: DataSource = family.bench_data().parse()?;
    let Some(corpus) = source.load_text()? else {
        let choice = ModelChoice::Preset(model.into());
        return model_and_data(Some(&choice), &source, true);
    };
    let mut found = family.preset(model, corpus.vocab().len())?;
    if let Some(n) = seq_len {
        found = found.with_seq_len(n)?;
    }
    let tokens = found.tokens().ok_or_else(|| {
        Error::InvalidArgument(format!(
            "{model} takes no tokens, but its bench data is text"
        ))
    })?;
    let mut split = corpus.split(tokens.block_size)?;
    if tokens.vocab_size > split.train.output_dim() {
        split.train = split
            .train
            .without_vocab()
            .with_num_classes(tokens.vocab_size)?;
    }
    let spec = ModelSpec::of_family(found, model, tokens.block_size)?;
    spec.check_dataset(&split.train)?;
    Ok((spec, split))
}

pub(super) fn workload(
    ctx: &GpuContext,
    model: &str,
    (b, seq_len): (usize, Option<usize>),
    attention: AttentionKernel,
) -> Result<Workload> {
    if let Some(family) = family::of_preset(model).filter(|f| f.takes_tokens()) {
        // The family's step on its data (a GPT's: nanoGPT's, AdamW at lr 1e-3, betas
        // (0.9, 0.99), weight decay 0.1, clip at 1, on hamlet).
        let (spec, split) = family_model_and_data(model, seq_len)?;
        let spec = spec.with_attention(attention);
        let batch = split.train.gather(&(0..b).collect::<Vec<_>>())?;
        let recipe = family.recipe();
        let optimizer = match (OptimizerConfig::adamw(1e-3), recipe) {
            (OptimizerConfig::AdamW { beta1, eps, .. }, Some(r)) => OptimizerConfig::AdamW {
                lr: r.lr,
                beta1,
                beta2: r.beta2,
                eps,
                weight_decay: r.weight_decay,
            },
            (other, _) => other,
        };
        return Ok(Workload {
            tokens: family
                .takes_tokens()
                .then(|| spec.input_shape.iter().product()),
            classes: split.train.output_dim(),
            spec,
            batch,
            optimizer,
            clip_grad_norm: recipe.map(|r| r.clip_grad_norm),
        });
    }
    // A preset of features, on random data of the shape it is meant for: a family's (a
    // ResNet's) builds its own input.
    let family_input = family::of_preset(model)
        .map(|f| -> Result<Vec<usize>> {
            let built = f.preset(model, 10)?.build(model, 0)?;
            Ok(built.0)
        })
        .transpose()?;
    let meant = family_input.or_else(|| meant_input(model).filter(|_| model != "linear"));
    let Some(shape) = meant else {
        return Err(Error::InvalidArgument(format!(
            "bench step measures mlp, mnist-cnn, simple-cnn or a family's preset ({}), not \
             `{model}`",
            family::FAMILIES
                .iter()
                .flat_map(|f| f.presets().iter().copied())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    };
    // The random batch is made on the host only if the device can hold it.
    let bytes = 4 * (b as u64) * shape.iter().product::<usize>() as u64;
    if bytes > ctx.caps.max_storage_buffer_binding_size {
        return Err(Error::InvalidArgument(format!(
            "--batch-size {b}: the {model} input batch alone is {bytes} bytes, over this \
             adapter's max_storage_buffer_binding_size ({}); use a smaller --batch-size",
            ctx.caps.max_storage_buffer_binding_size
        )));
    }
    let mut rng = Rng::new(1);
    let x: Vec<f32> = (0..b * shape.iter().product::<usize>())
        .map(|_| rng.normal() as f32)
        .collect();
    let labels: Vec<u32> = (0..b).map(|_| rng.below(10) as u32).collect();
    let classes = Labels::Classes {
        labels,
        num_classes: 10,
    };
    let random = Dataset::new("random", x, shape.clone(), classes)?;
    // kuangliu/pytorch-cifar's step for a ResNet (SGD, lr 0.1, momentum 0.9, weight decay
    // 5e-4); Adam for the tutorials' networks.
    let optimizer = match family::of_preset(model) {
        Some(_) => OptimizerConfig::Sgd {
            lr: 0.1,
            momentum: 0.9,
            dampening: 0.0,
            nesterov: false,
            weight_decay: 5e-4,
        },
        None => OptimizerConfig::adam(1e-3),
    };
    Ok(Workload {
        spec: preset(model, &shape, 10)?,
        batch: random.gather(&(0..b).collect::<Vec<_>>())?,
        classes: 10,
        optimizer,
        clip_grad_norm: None,
        tokens: None,
    })
}

/// The batch `model` is measured at: `requested`, or for a GPT at most its data's training
/// windows (with a note on stderr when that is fewer).
pub(super) fn batch_for(model: &str, requested: usize, seq_len: Option<usize>) -> Result<usize> {
    let Some(family) = family::of_preset(model).filter(|f| f.takes_tokens()) else {
        return Ok(requested);
    };
    let (_, split) = family_model_and_data(model, seq_len)?;
    let windows = split.train.n;
    if requested > windows {
        // A note, not data: a closed stderr is no reason to stop.
        let _ = writeln!(
            std::io::stderr(),
            "note: --batch-size {requested} is larger than the {windows} training windows of \
             {}; measuring {model} at batch {windows}",
            family.bench_data()
        );
    }
    Ok(requested.min(windows))
}
