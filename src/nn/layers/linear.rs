//! `nn.Linear`: `y = x · Wᵀ + b`, weight `[out, in]`, on autocast's low-precision list.
//! Forward and backward are the three products of `ops::matmul`.

use serde::Deserialize;

use super::{
    Backward, BackwardPlan, ForwardPlan, Layer, LayerConfig, ParamDef, Resolved,
    default_weight_and_bias, positive, py_bool,
};
use crate::amp::policy::{CastRule, Op};
use crate::error::Result;
use crate::ops::matmul::{MatmulOpts, matmul};
use crate::ops::reduce;
use crate::tensor::Tensor;

/// `{"linear": {"out": N, "bias": true}}`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinearConfig {
    pub out: usize,
    #[serde(default = "yes")]
    pub bias: bool,
}

fn yes() -> bool {
    true
}

impl LayerConfig for LinearConfig {
    fn kind(&self) -> &'static str {
        "linear"
    }

    fn resolve(&self, input: &[usize]) -> std::result::Result<Resolved, String> {
        positive(self.out, "`out`")?;
        let &[in_features] = input else {
            return Err(format!(
                "linear takes a 1-D input per sample, got {input:?} ({}-D); add {{\"flatten\": {{}}}} before it",
                input.len()
            ));
        };
        let layer = Linear {
            in_features,
            out_features: self.out,
            bias: self.bias,
        };
        Ok(Resolved::new(layer, vec![self.out]))
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Linear {
    pub in_features: usize,
    pub out_features: usize,
    pub bias: bool,
}

impl Layer for Linear {
    fn kind(&self) -> &'static str {
        "linear"
    }

    fn repr(&self) -> String {
        format!(
            "Linear(in_features={}, out_features={}, bias={})",
            self.in_features,
            self.out_features,
            py_bool(self.bias)
        )
    }

    fn op(&self) -> Op {
        Op::new("Linear", CastRule::LowPrecision)
    }

    fn parameters(&self) -> Vec<ParamDef> {
        default_weight_and_bias(
            vec![self.out_features, self.in_features],
            self.in_features,
            self.bias,
        )
    }

    /// `y = x · Wᵀ (+ b)`.
    fn forward(&self, f: &mut ForwardPlan<'_>, x: Tensor) -> Result<(Tensor, Box<dyn Backward>)> {
        let w = f.param("weight")?;
        let b = self.bias.then(|| f.param("bias")).transpose()?;
        let y = f.activation(&[self.out_features]);
        let opts = MatmulOpts {
            trans_b: true,
            bias: b.as_ref(),
            ..Default::default()
        };
        f.push(matmul(f.ctx(), &x, &w, &y, opts)?);
        let backward = LinearBackward {
            x,
            w,
            bias: self.bias,
        };
        Ok((y, Box::new(backward)))
    }
}

/// What the gradient of a Linear needs: its input and weight (in the compute dtype).
struct LinearBackward {
    x: Tensor,
    w: Tensor,
    bias: bool,
}

impl Backward for LinearBackward {
    /// `dW += dyᵀ · x`, `db += Σ_rows dy`, `dx = dy · W`.
    fn backward(&self, b: &mut BackwardPlan<'_>, dy: Tensor) -> Result<Option<Tensor>> {
        let ctx = b.ctx();
        let dw = b.param_grad("weight")?;
        let opts = MatmulOpts {
            trans_a: true,
            accumulate: true,
            ..Default::default()
        };
        b.push(matmul(ctx, &dy, &self.x, &dw, opts)?);
        if self.bias {
            let db = b.param_grad("bias")?;
            b.push(reduce::bias_grad(ctx, &dy, &db, true)?);
        }
        if !b.wants_input_grad() {
            return Ok(None);
        }
        let dx = b.input_grad(&self.x)?;
        b.push(matmul(ctx, &dy, &self.w, &dx, MatmulOpts::default())?);
        Ok(Some(dx))
    }
}
