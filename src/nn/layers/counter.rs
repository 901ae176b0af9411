//! `{"batch_counter": {}}`: the identity, counting the batches it trained on in an int64
//! buffer, `num_batches_tracked` (BatchNorm's counter, alone). In training each forward
//! adds one to the buffer's working copy, which the step commits, or rolls back when the
//! GradScaler skips it: the count is of the batches of applied steps. In evaluation it does
//! nothing. The smallest layer with a buffer ([`super::Layer::buffers`]), and the recipe
//! for one (docs/architecture.md).

use serde::Deserialize;

use super::dropout::Identity;
use super::plan::Mode;
use super::{Backward, BufferDType, BufferDef, ForwardPlan, Layer, LayerConfig, Resolved};
use crate::amp::policy::{CastRule, Op};
use crate::error::Result;
use crate::ops::buffers;
use crate::tensor::Tensor;

/// `{"batch_counter": {}}`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchCounterConfig {}

impl LayerConfig for BatchCounterConfig {
    fn kind(&self) -> &'static str {
        "batch_counter"
    }

    fn resolve(&self, input: &[usize]) -> std::result::Result<Resolved, String> {
        Ok(Resolved::new(BatchCounter, input.to_vec()))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchCounter;

impl Layer for BatchCounter {
    fn kind(&self) -> &'static str {
        "batch_counter"
    }

    fn repr(&self) -> String {
        "BatchCounter()".into()
    }

    fn op(&self) -> Op {
        Op::new("Identity", CastRule::Input)
    }

    fn buffers(&self) -> Vec<BufferDef> {
        vec![BufferDef::new(
            "num_batches_tracked",
            Vec::new(),
            BufferDType::I64,
            0.0,
        )]
    }

    /// `y = x`; in training, `num_batches_tracked += 1`.
    fn forward(&self, f: &mut ForwardPlan<'_>, x: Tensor) -> Result<(Tensor, Box<dyn Backward>)> {
        if f.mode() == Mode::Train {
            let counter = f.buffer("num_batches_tracked")?;
            f.push(buffers::count(f.ctx(), &counter)?);
        }
        Ok((x, Box::new(Identity)))
    }
}
