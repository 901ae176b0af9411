//! The cast autocast inserts in front of a layer whose compute dtype differs from its input's
//! (`f32 → f16` before a Linear under amp-f16, `f16 → f32` before the loss). Not a JSON layer:
//! the network plans it from the policy. Its backward casts the gradient back.

use super::{Backward, BackwardPlan, ForwardPlan};
use crate::error::Result;
use crate::ops::elementwise;
use crate::tensor::{DType, Tensor};

/// `y = x` converted to `dtype` (round to nearest even, overflow to ±inf).
pub fn forward(
    f: &mut ForwardPlan<'_>,
    x: Tensor,
    dtype: DType,
) -> Result<(Tensor, Box<dyn Backward>)> {
    let y = Tensor::zeros(f.ctx(), x.shape(), dtype);
    f.push(elementwise::cast(f.ctx(), &x, &y)?);
    Ok((y, Box::new(CastBackward { x })))
}

struct CastBackward {
    x: Tensor,
}

impl Backward for CastBackward {
    /// `dx = dy` converted back to the input's dtype.
    fn backward(&self, b: &mut BackwardPlan<'_>, dy: Tensor) -> Result<Option<Tensor>> {
        if !b.wants_input_grad() {
            return Ok(None);
        }
        let dx = b.input_grad(&self.x)?;
        b.push(elementwise::cast(b.ctx(), &dy, &dx)?);
        Ok(Some(dx))
    }
}
