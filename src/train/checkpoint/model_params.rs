//! A model's parameters read from a checkpoint ([`Checkpoint::params_for_model`]): checked
//! against the model's names and shapes (through its family's name table), in the model's
//! order, with tied weights under either name or both, as PyTorch's `state_dict` has them.

use super::Checkpoint;
use super::named_tensor::NamedTensor;
use crate::error::{Error, Result};

impl Checkpoint {
    /// Check the parameters against the model's `(name, shape)` list and return them in the
    /// model's order. Missing, unexpected and mis-shaped names are listed in the error.
    pub fn params_for(
        &self,
        expected: &[(String, Vec<usize>)],
        what: &str,
    ) -> Result<Vec<(String, Vec<f32>)>> {
        self.params_for_tied(expected, &[], what)
    }

    /// The parameters of `spec` (see [`Checkpoint::params_for_tied`]: tied weights may
    /// appear under both names, as PyTorch's `state_dict` has them, or under either one).
    pub fn params_for_model(
        &self,
        spec: &crate::nn::ModelSpec,
        what: &str,
    ) -> Result<Vec<(String, Vec<f32>)>> {
        let expected: Vec<(String, Vec<usize>)> = spec
            .parameters()
            .into_iter()
            .map(|p| (p.name, p.shape))
            .collect();
        // Names read through the model family's table; the model's f32 buffers are among
        // the floating-point tensors too: not parameters.
        let buffers = spec.buffers();
        let is_buffer = |name: &str| buffers.iter().any(|b| b.name == spec.import_name(name));
        let only_params = Checkpoint {
            params: (self.params.iter())
                .map(|t| NamedTensor {
                    name: spec.import_name(&t.name),
                    ..t.clone()
                })
                .filter(|t| !is_buffer(&t.name))
                .collect(),
            // Integer tensors that are none of the model's buffers are reported there.
            buffers: (self.buffers.iter())
                .filter(|b| !is_buffer(&b.name))
                .cloned()
                .collect(),
            ..Checkpoint::default()
        };
        only_params.params_for_tied(&expected, &spec.tied_parameters(), what)
    }

    /// Like [`Checkpoint::params_for`], with tied weights `(alias, owner)` (GPT's
    /// `("lm_head.weight", "transformer.wte.weight")`): a file may hold the owner, the alias
    /// (what `safetensors.torch.save_model` keeps of a shared tensor may be either) or both
    /// (PyTorch's `state_dict`, and our checkpoints). Both must then hold the same values.
    pub fn params_for_tied(
        &self,
        expected: &[(String, Vec<usize>)],
        tied: &[(String, String)],
        what: &str,
    ) -> Result<Vec<(String, Vec<f32>)>> {
        let mut problems = Vec::new();
        let mut out = Vec::new();
        let find = |name: &str| self.params.iter().find(|t| t.name == name);
        for (name, shape) in expected {
            // The owner, or else one of its aliases.
            let aliases: Vec<&NamedTensor> = tied
                .iter()
                .filter(|(_, owner)| owner == name)
                .filter_map(|(alias, _)| find(alias))
                .collect();
            let found = find(name).or(aliases.first().copied());
            match found {
                None => problems.push(format!("missing `{name}` {shape:?}")),
                Some(t) if &t.shape != shape => problems.push(format!(
                    "`{}` has shape {:?}, the model needs {shape:?}",
                    t.name, t.shape
                )),
                Some(t) => {
                    for a in aliases.iter().filter(|a| a.name != t.name) {
                        if let Some(problem) = tied_mismatch(t, a) {
                            problems.push(problem);
                        }
                    }
                    out.push((name.clone(), t.values.clone()));
                }
            }
        }
        for t in &self.params {
            let known = expected.iter().any(|(n, _)| *n == t.name)
                || tied.iter().any(|(alias, _)| *alias == t.name);
            if !known {
                problems.push(format!("unexpected `{}` {:?}", t.name, t.shape));
            }
        }
        // Integer tensors are buffers (`num_batches_tracked`): never parameters.
        for b in &self.buffers {
            problems.push(format!(
                "`{}` has dtype {:?}; parameters must be floating point (integer tensors are \
                 buffers, and the model has none of that name)",
                b.name, b.stored
            ));
        }
        if problems.is_empty() {
            Ok(out)
        } else {
            Err(Error::Checkpoint(format!(
                "{what}: parameters do not match the model: {}",
                problems.join("; ")
            )))
        }
    }
}

/// Adds the tied weights' second names `(alias, owner)` to `params`, each a copy of its
/// owner, so the file has every key of PyTorch's `state_dict` (nanoGPT's has both
/// `transformer.wte.weight` and `lm_head.weight`) and loads there with `strict=True`.
pub fn add_tied_aliases(params: &mut Vec<NamedTensor>, tied: &[(String, String)]) -> Result<()> {
    for (alias, owner) in tied {
        let t = params.iter().find(|t| t.name == *owner).ok_or_else(|| {
            Error::Checkpoint(format!(
                "`{alias}` is tied to `{owner}`, which is not saved"
            ))
        })?;
        let copy = NamedTensor {
            name: alias.clone(),
            ..t.clone()
        };
        params.push(copy);
    }
    Ok(())
}

/// Why a tied weight's two copies in a file disagree, if they do.
fn tied_mismatch(owner: &NamedTensor, alias: &NamedTensor) -> Option<String> {
    if alias.shape != owner.shape {
        return Some(format!(
            "`{}` {:?} is tied to `{}` {:?} but their shapes differ",
            alias.name, alias.shape, owner.name, owner.shape
        ));
    }
    let i = owner
        .values
        .iter()
        .zip(&alias.values)
        .position(|(a, b)| a.to_bits() != b.to_bits())?;
    Some(format!(
        "`{}` is tied to `{}` but holds other values (element {i}: {} vs {})",
        alias.name, owner.name, alias.values[i], owner.values[i]
    ))
}
