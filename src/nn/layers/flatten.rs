//! `nn.Flatten()`: all per-sample dimensions into one. A view: no kernel either way.

use serde::Deserialize;

use super::{
    Backward, BackwardPlan, ForwardPlan, Layer, LayerConfig, Resolved, checked_numel, too_large,
};
use crate::amp::policy::{CastRule, Op};
use crate::error::Result;
use crate::tensor::Tensor;

/// `{"flatten": {}}`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlattenConfig {}

impl LayerConfig for FlattenConfig {
    fn kind(&self) -> &'static str {
        "flatten"
    }

    fn resolve(&self, input: &[usize]) -> std::result::Result<Resolved, String> {
        let n = checked_numel(input).ok_or_else(|| too_large(input))?;
        Ok(Resolved::new(Flatten { features: n }, vec![n]))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flatten {
    /// Elements per sample.
    pub features: usize,
}

impl Layer for Flatten {
    fn kind(&self) -> &'static str {
        "flatten"
    }

    fn repr(&self) -> String {
        "Flatten(start_dim=1, end_dim=-1)".into()
    }

    fn op(&self) -> Op {
        Op::new("Flatten", CastRule::Input)
    }

    /// `y = x.reshape(batch, features)`.
    fn forward(&self, f: &mut ForwardPlan<'_>, x: Tensor) -> Result<(Tensor, Box<dyn Backward>)> {
        let y = x.reshape(&f.batched(&[self.features]))?;
        let input_shape = x.shape().to_vec();
        Ok((y, Box::new(FlattenBackward { input_shape })))
    }
}

struct FlattenBackward {
    input_shape: Vec<usize>,
}

impl Backward for FlattenBackward {
    /// `dx = dy.reshape(input shape)`.
    fn backward(&self, b: &mut BackwardPlan<'_>, dy: Tensor) -> Result<Option<Tensor>> {
        if !b.wants_input_grad() {
            return Ok(None);
        }
        Ok(Some(dy.reshape(&self.input_shape)?))
    }
}
