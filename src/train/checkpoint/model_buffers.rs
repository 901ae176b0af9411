//! A model's buffers read from a checkpoint ([`Checkpoint::buffers_for_model`]), apart from
//! `buffers.rs` (how buffers are saved), which the checkpoint's own type names.

use super::Checkpoint;
use super::named_tensor::NamedTensor;
use crate::error::{Error, Result};
use crate::nn::ModelSpec;
use crate::nn::buffers::BufferValues;
use crate::nn::layers::BufferDType;

impl Checkpoint {
    /// The buffers of `spec` from this file, in the model's order: each under its name with
    /// the model's shape, in its dtype (an f32 buffer among the floating-point tensors). A
    /// missing, mis-shaped or mis-typed buffer is an error naming it.
    pub fn buffers_for_model(
        &self,
        spec: &ModelSpec,
        what: &str,
    ) -> Result<Vec<(String, BufferValues)>> {
        let mut problems = Vec::new();
        let mut out = Vec::new();
        for b in spec.buffers() {
            if !b.persistent {
                // Never saved: made from the model's definition (RoPE's table).
                let values = BufferValues::initial(&b);
                out.push((b.name, values));
                continue;
            }
            // Names read through the model family's table.
            let ours = |name: &str| spec.import_name(name) == b.name;
            let float = || self.params.iter().find(|t| ours(&t.name));
            let int = || self.buffers.iter().find(|t| ours(&t.name));
            let found = match b.dtype {
                BufferDType::F32 => float()
                    .map(|t: &NamedTensor| (t.shape.clone(), BufferValues::F32(t.values.clone()))),
                BufferDType::I64 => int().map(|t| (t.shape.clone(), t.values.clone())),
            };
            match found {
                None => problems.push(format!(
                    "missing buffer `{}` ({} {:?})",
                    b.name,
                    b.dtype.name(),
                    b.shape
                )),
                Some((shape, _)) if shape != b.shape => problems.push(format!(
                    "buffer `{}` has shape {shape:?}, the model needs {:?}",
                    b.name, b.shape
                )),
                Some((_, values)) => out.push((b.name, values)),
            }
        }
        for t in &self.buffers {
            if !spec
                .buffers()
                .iter()
                .any(|b| b.name == spec.import_name(&t.name))
            {
                problems.push(format!(
                    "unexpected integer tensor `{}` {:?}",
                    t.name, t.shape
                ));
            }
        }
        if problems.is_empty() {
            Ok(out)
        } else {
            Err(Error::Checkpoint(format!(
                "{what}: buffers do not match the model: {}",
                problems.join("; ")
            )))
        }
    }

    /// The buffers of `spec` from an initial-weights file (`--init`): none when the file
    /// holds none of the model's saved buffers (a file of parameters only: the buffers keep
    /// their initial values, as `load_state_dict(strict=False)` leaves them), else every one
    /// of them, as [`Self::buffers_for_model`] reads them (a trained ResNet's running
    /// statistics, which evaluation uses: never dropped).
    pub fn init_buffers_for_model(
        &self,
        spec: &ModelSpec,
        what: &str,
    ) -> Result<Vec<(String, BufferValues)>> {
        let saved: Vec<_> = spec
            .buffers()
            .into_iter()
            .filter(|b| b.persistent)
            .collect();
        let holds = |name: &str| saved.iter().any(|b| b.name == spec.import_name(name));
        let any = self.params.iter().any(|t| holds(&t.name))
            || self.buffers.iter().any(|t| holds(&t.name));
        if !any {
            return Ok(Vec::new());
        }
        self.buffers_for_model(spec, what)
    }
}
