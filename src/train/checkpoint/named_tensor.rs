//! A checkpoint's f32 tensor, apart from `checkpoint.rs` so that the parts reading and
//! checking tensors do not reach themselves through it.

/// A named parameter: name, PyTorch shape, f32 values.
#[derive(Clone, Debug, PartialEq)]
pub struct NamedTensor {
    pub name: String,
    pub shape: Vec<usize>,
    pub values: Vec<f32>,
}
