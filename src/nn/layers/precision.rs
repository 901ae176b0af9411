//! The precision map, walked without the GPU: each layer in the order the forward plans it,
//! with the dtype it computes in and the casts autocast inserts.

use super::Layer;
use super::named::NamedLayer;
use crate::amp::policy::{Op, Policy, PrecisionRow};
use crate::tensor::DType;

/// The precision map's walk: the layers in the order [`ForwardPlan`] plans them, with the
/// dtype each one computes in and the casts autocast inserts, without touching the GPU.
pub struct PrecisionWalk<'a> {
    policy: &'a Policy,
    path: String,
    rows: Vec<PrecisionRow>,
}

impl<'a> PrecisionWalk<'a> {
    pub(in crate::nn) fn new(policy: &'a Policy) -> Self {
        Self {
            policy,
            path: String::new(),
            rows: Vec::new(),
        }
    }

    pub(in crate::nn) fn finish(self) -> Vec<PrecisionRow> {
        self.rows
    }

    /// The rows of `layers` run in order from an `x` input; returns the output dtype.
    pub fn run_layers(&mut self, layers: &[NamedLayer], x: DType) -> DType {
        layers
            .iter()
            .fold(x, |x, l| self.run_layer(&l.name, &*l.layer, x))
    }

    /// The row of one layer (and, for a layer made of layers, theirs after it).
    pub fn run_layer(&mut self, name: &str, layer: &dyn Layer, x: DType) -> DType {
        let parent = std::mem::take(&mut self.path);
        self.path = super::backward::join(&parent, name);
        let index = self.rows.len();
        let has_params = !layer.parameters().is_empty() || !layer.tied_parameters().is_empty();
        let row = self
            .policy
            .row(index, &self.path, layer.op(), x, has_params);
        let compute = row.compute_dtype;
        self.rows.push(row);
        let out = layer.walk_precision(self, compute);
        self.rows[index].output_dtype = out;
        self.path = parent;
        out
    }

    /// A row for an op outside the layers (the loss).
    pub(in crate::nn) fn run_op(&mut self, name: &str, op: Op, x: DType) -> DType {
        let row = self.policy.row(self.rows.len(), name, op, x, false);
        let out = row.output_dtype;
        self.rows.push(row);
        out
    }
}
