//! Layers' buffers in a checkpoint (`nn::buffers`): saved as tensors under their names in
//! their own dtype (f32, or int64 like PyTorch's `num_batches_tracked`), beside the
//! parameters, as PyTorch's `state_dict` holds them; read back by the model's buffer list.

use safetensors::tensor::{Dtype, TensorView};

use super::{Checkpoint, NamedTensor};
use crate::error::{Error, Result};
use crate::nn::ModelSpec;
use crate::nn::buffers::BufferValues;
use crate::nn::layers::BufferDType;

/// A buffer as saved: name, shape and values in its dtype.
#[derive(Clone, Debug, PartialEq)]
pub struct NamedBuffer {
    pub name: String,
    pub shape: Vec<usize>,
    pub values: BufferValues,
    /// The dtype the file holds it in (I64, or I32 widened).
    pub stored: Dtype,
}

impl NamedBuffer {
    /// A buffer to save, stored in its own dtype.
    pub fn new(name: String, shape: Vec<usize>, values: BufferValues) -> Self {
        let stored = match values.dtype() {
            BufferDType::F32 => Dtype::F32,
            BufferDType::I64 => Dtype::I64,
        };
        Self {
            name,
            shape,
            values,
            stored,
        }
    }

    /// The tensor safetensors writes.
    pub(super) fn view(&self) -> Result<(String, TensorView<'_>)> {
        let (dtype, bytes): (Dtype, &[u8]) = match &self.values {
            BufferValues::F32(v) => (Dtype::F32, bytemuck::cast_slice(v)),
            BufferValues::I64(v) => (Dtype::I64, bytemuck::cast_slice(v)),
        };
        TensorView::new(dtype, self.shape.clone(), bytes)
            .map(|v| (self.name.clone(), v))
            .map_err(|e| Error::Checkpoint(format!("buffer `{}`: {e}", self.name)))
    }
}

/// An integer tensor of a file as a buffer (int64; int32 widened), or `None` for a dtype
/// that is not an integer.
pub(super) fn read_integer(
    name: &str,
    view: &safetensors::tensor::TensorView<'_>,
) -> Option<NamedBuffer> {
    let data = view.data();
    let values: Vec<i64> = match view.dtype() {
        Dtype::I64 => bytemuck::pod_collect_to_vec(data),
        Dtype::I32 => bytemuck::pod_collect_to_vec::<u8, i32>(data)
            .into_iter()
            .map(i64::from)
            .collect(),
        _ => return None,
    };
    Some(NamedBuffer {
        name: name.to_string(),
        shape: view.shape().to_vec(),
        values: BufferValues::I64(values),
        stored: view.dtype(),
    })
}

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
}
