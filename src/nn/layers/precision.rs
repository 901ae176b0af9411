//! The precision map, walked without the GPU: each layer in the order the forward plans it,
//! with the dtype it computes in and the casts autocast inserts.

use crate::amp::policy::{Op, Policy, PrecisionRow};
use crate::tensor::DType;

/// The precision map's walk: the layers in the order [`super::ForwardPlan`] plans them, with the
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

    /// Opens the row of a layer named `name` (under the current one) computing `op` on an
    /// `x` input: the caller walks the layer in the row's compute dtype, then closes it.
    pub(super) fn open_row(&mut self, name: &str, op: Op, x: DType, has_params: bool) -> OpenRow {
        let parent = std::mem::take(&mut self.path);
        self.path = super::backward::join(&parent, name);
        let index = self.rows.len();
        let row = self.policy.row(index, &self.path, op, x, has_params);
        let compute = row.compute_dtype;
        self.rows.push(row);
        OpenRow {
            index,
            parent,
            compute,
        }
    }

    /// Closes a row with the layer's output dtype; returns it.
    pub(super) fn close_row(&mut self, row: OpenRow, out: DType) -> DType {
        self.rows[row.index].output_dtype = out;
        self.path = row.parent;
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

/// A row being walked ([`PrecisionWalk::open_row`]): its index, the path it nests in, and the
/// dtype the layer computes in.
pub(super) struct OpenRow {
    index: usize,
    parent: String,
    pub(super) compute: DType,
}
