//! Files the CLI error tests feed the binary, made through the library without training.

use std::path::Path;

use safetensors::tensor::{Dtype, TensorView};

use webgpu_amp::data::{DataSource, Vocab};
use webgpu_amp::nn::ModelSpec;
use webgpu_amp::train::checkpoint::{Checkpoint, NamedTensor, add_tied_aliases};
use webgpu_amp::train::{ModelChoice, model_and_data};

/// gpt-tiny on Hamlet's vocabulary, its initial weights (seed 0) as a checkpoint `sample`
/// reads (model and vocabulary in the metadata), written to `path`. No GPU, no training.
pub fn gpt_checkpoint(path: &Path) -> Checkpoint {
    let source: DataSource = "hamlet".parse().unwrap();
    let choice = ModelChoice::Preset("gpt-tiny".into());
    let (spec, split) = model_and_data(Some(&choice), &source, true).unwrap();
    let vocab = split.train.vocab().map(|v| Vocab::clone(v));
    let ck = checkpoint_of(&spec, vocab);
    ck.save(path).unwrap();
    ck
}

/// `spec`'s initial weights (seed 0) as a checkpoint with its description and `vocab`.
pub fn checkpoint_of(spec: &ModelSpec, vocab: Option<Vocab>) -> Checkpoint {
    let mut params: Vec<NamedTensor> = spec
        .init_params(0)
        .into_iter()
        .zip(spec.parameters())
        .map(|((name, values), p)| NamedTensor {
            name,
            shape: p.shape,
            values,
        })
        .collect();
    add_tied_aliases(&mut params, &spec.tied_parameters()).unwrap();
    Checkpoint {
        params,
        vocab,
        model: spec.description(),
        precision: Some("f32".into()),
        ..Default::default()
    }
}

/// A safetensors file of `tensors` (name, dtype, shape, little-endian bytes).
pub fn safetensors_file(tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)]) -> Vec<u8> {
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|(name, dtype, shape, bytes)| {
            (
                name.to_string(),
                TensorView::new(*dtype, shape.clone(), bytes).unwrap(),
            )
        })
        .collect();
    safetensors::serialize(views, None).unwrap()
}

pub fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

pub fn i64_bytes(values: &[i64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}
