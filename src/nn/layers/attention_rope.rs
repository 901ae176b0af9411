//! RoPE in the attention layer ([`super::attention`]): q and k rotated into tensors of their
//! own before attention, their gradients rotated back into the packed projections' after it,
//! and the cos/sin table, a non-persistent buffer of the layer.

use super::{BackwardPlan, BufferDef, ForwardPlan};
use crate::error::Result;
use crate::ops::qkv::{HeadRows, QkvLayout};
use crate::ops::rope::{self, Positions, RopeTable};
use crate::tensor::Tensor;

/// RoPE on q and k: its base and the table's positions (the layer's `T`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rope {
    pub theta: f64,
    pub positions: usize,
}

/// The buffer holding a RoPE's cos/sin table.
pub const ROPE_TABLE: &str = "rope_table";

/// q and k after RoPE (tensors of their own) and the table that rotated them.
pub struct Rotated {
    pub q: Tensor,
    pub k: Tensor,
    table: RopeTable,
}

/// Rows of `heads` heads of `layout`'s size, one after the other.
fn dense(layout: &QkvLayout, heads: usize) -> HeadRows {
    HeadRows {
        offset: 0,
        row: heads * layout.head_size,
    }
}

/// Which rows of a `[B, T, width]` tensor hold which positions.
fn positions(t: &Tensor) -> Positions {
    Positions {
        batch: t.shape()[0],
        t: t.shape()[1],
        first_position: 0,
    }
}

impl Rope {
    /// The cos/sin table of the layer's positions for heads of `head_size`: never trained,
    /// never saved (transformers recomputes it from the config too).
    pub fn buffers(&self, head_size: usize) -> Vec<BufferDef> {
        let values = rope::table_values(self.theta, head_size, self.positions)
            .expect("checked when the layer was resolved");
        let shape = vec![self.positions, head_size / 2, 2];
        vec![BufferDef::table(ROPE_TABLE, shape, values.into())]
    }

    /// q and k of the packed `qkv` (laid out as `layout`) rotated into tensors of their
    /// own: one kernel.
    pub fn rotate(
        &self,
        f: &mut ForwardPlan<'_>,
        layout: &QkvLayout,
        qkv: &Tensor,
    ) -> Result<Rotated> {
        let table = RopeTable {
            tensor: f.buffer(ROPE_TABLE)?,
            head_size: layout.head_size,
            positions: self.positions,
        };
        let (nh, nkv, t) = (layout.heads, layout.kv_heads, qkv.shape()[1]);
        let q = f.named_activation("rope q", &[t, nh * layout.head_size], f.dtype());
        let k = f.named_activation("rope k", &[t, nkv * layout.head_size], f.dtype());
        let rq = rope::Rotate {
            x: qkv,
            x_at: layout.q,
            y: &q,
            y_at: dense(layout, nh),
            heads: nh,
        };
        let rk = rope::Rotate {
            x: qkv,
            x_at: layout.k,
            y: &k,
            y_at: dense(layout, nkv),
            heads: nkv,
        };
        f.push(rope::forward(
            f.ctx(),
            &table,
            positions(qkv),
            rq,
            Some(rk),
        )?);
        Ok(Rotated { q, k, table })
    }
}

/// The gradients of the rotated q and k (scratch), rotated back into their places in the
/// packed projections' gradient by [`RopeGrads::push`] once attention's backward has
/// written them.
pub struct RopeGrads {
    pub dq: Tensor,
    pub dk: Tensor,
}

impl RopeGrads {
    pub fn new(b: &mut BackwardPlan<'_>, rotated: &Rotated) -> Result<Self> {
        Ok(RopeGrads {
            dq: b.scratch("rope dq", &rotated.q)?,
            dk: b.scratch("rope dk", &rotated.k)?,
        })
    }

    /// dq and dk rotated by −θ into their places in `dqkv` (laid out as `layout`): a kernel
    /// each (one kernel cannot write two ranges of one tensor).
    pub fn push(
        &self,
        b: &mut BackwardPlan<'_>,
        layout: &QkvLayout,
        rotated: &Rotated,
        dqkv: &Tensor,
    ) -> Result<()> {
        for (grad, place, heads) in [
            (&self.dq, layout.q, layout.heads),
            (&self.dk, layout.k, layout.kv_heads),
        ] {
            let back = rope::Rotate {
                x: grad,
                x_at: dense(layout, heads),
                y: dqkv,
                y_at: place,
                heads,
            };
            b.push(rope::backward(
                b.ctx(),
                &rotated.table,
                positions(dqkv),
                back,
                None,
            )?);
        }
        Ok(())
    }
}
