//! A residual connection around a branch of layers: `y = x + branch(x)`, nanoGPT's
//! `x = x + self.attn(self.ln_1(x))`. The add is on no autocast list, so it promotes to the
//! wider of its inputs (an f32 residual stream stays f32 when the branch ends in f16). The
//! residual has no name of its own in parameter paths: its branch's layers are named
//! relative to whatever contains it (`transformer.h.0` → `transformer.h.0.ln_1`).

use serde::Deserialize;

use super::backward::{Tape, same_buffer};
use super::fusion::Fusable;
use super::named::{NamedLayer, layer_from_json, resolve_layers};
use super::precision::PrecisionWalk;
use super::{Backward, BackwardPlan, ForwardPlan, Layer, LayerConfig, Like, ParamDef, Resolved};
use crate::amp::policy::{CastRule, Op};
use crate::error::Result;
use crate::ops::elementwise;
use crate::tensor::{DType, Tensor};

/// `{"residual": {"layers": [...]}}`: the branch's layers are named by index, like a
/// Sequential's.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ResidualJson {
    layers: Vec<serde_json::Value>,
}

/// The registry's parser: the branch's layers parse like the model's.
pub fn parse(fields: serde_json::Value) -> serde_json::Result<Box<dyn LayerConfig>> {
    use serde::de::Error as _;
    let json: ResidualJson = serde_json::from_value(fields)?;
    let branch = json
        .layers
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            layer_from_json(v)
                .map(|c| (i.to_string(), c))
                .map_err(|e| serde_json::Error::custom(format!("layer {i}: {e}")))
        })
        .collect::<serde_json::Result<Vec<_>>>()?;
    Ok(Box::new(ResidualConfig { branch }))
}

/// A residual around named layer configs.
#[derive(Debug)]
pub struct ResidualConfig {
    pub branch: Vec<(String, Box<dyn LayerConfig>)>,
}

impl LayerConfig for ResidualConfig {
    fn kind(&self) -> &'static str {
        "residual"
    }

    fn resolve(&self, input: &[usize]) -> std::result::Result<Resolved, String> {
        let branch = resolve_layers(input, &self.branch)?;
        let out = branch.last().map_or(input, |l| &l.output_shape[..]);
        if out != input {
            return Err(format!(
                "the branch maps {input:?} to {out:?}; a residual needs the same shape back"
            ));
        }
        Ok(Resolved::new(Residual { branch }, input.to_vec()))
    }
}

#[derive(Clone, Debug)]
pub struct Residual {
    pub branch: Vec<NamedLayer>,
}

/// The dtype of `a + b`: the wider of the two (PyTorch's type promotion).
fn promote(a: DType, b: DType) -> DType {
    if a == b { a } else { DType::F32 }
}

impl Layer for Residual {
    fn kind(&self) -> &'static str {
        "residual"
    }

    fn repr(&self) -> String {
        let inner: Vec<String> = self
            .branch
            .iter()
            .map(|l| format!("({}): {}", l.name, l.layer.repr()))
            .collect();
        format!("Residual({})", inner.join(", "))
    }

    fn op(&self) -> Op {
        Op::new("Add", CastRule::Input)
    }

    fn parameters(&self) -> Vec<ParamDef> {
        self.branch
            .iter()
            .flat_map(|l| l.layer.parameters().into_iter().map(|p| p.under(&l.name)))
            .collect()
    }

    fn sublayers(&self) -> &[NamedLayer] {
        &self.branch
    }

    fn walk_precision(&self, w: &mut PrecisionWalk<'_>, x: DType) -> DType {
        let h = w.run_layers(&self.branch, x);
        promote(x, h)
    }

    /// `y = x + branch(x)`.
    fn forward(&self, f: &mut ForwardPlan<'_>, x: Tensor) -> Result<(Tensor, Box<dyn Backward>)> {
        let (h, branch) = f.run_layers(&self.branch, x.clone())?;
        let y = f.activation_in(&x.shape()[1..], promote(x.dtype(), h.dtype()));
        // Offered to the layer after it: a LayerNorm reading the sum writes it itself.
        let add = elementwise::add(f.ctx(), &x, &h, &y)?;
        let sum = Fusable::Add {
            a: x.clone(),
            b: h.clone(),
        };
        f.push_fusable(add, &y, sum);
        let (x, h) = (Like::of(&x), Like::of(&h));
        let backward = ResidualBackward { branch, x, h };
        Ok((y, Box::new(backward)))
    }
}

/// Of x and h only their shapes and dtypes: an add needs no values.
struct ResidualBackward {
    branch: Tape,
    x: Like,
    h: Like,
}

impl Backward for ResidualBackward {
    /// `dx = dy + branch'(dy)`: the branch's backward from `dy`, accumulated onto `dy`.
    fn backward(&self, b: &mut BackwardPlan<'_>, dy: Tensor) -> Result<Option<Tensor>> {
        let ctx = b.ctx();
        // The gradient of the branch's output, in its dtype.
        let dh = if dy.dtype() == self.h.dtype() {
            dy.clone()
        } else {
            b.cast_grad(&dy, &self.h)?
        };
        // The skip path is dy itself, accumulated in place (nothing reads it after this
        // layer): the branch's first layer may add its gradient onto it in its own kernel.
        let wants = b.wants_input_grad();
        if wants && dy.dtype() == self.x.dtype() {
            b.offer_accumulation(dy.clone());
        }
        let d_branch = b.run_tape(&self.branch, dh.clone())?;
        if b.accumulation_taken(&dy) {
            if !same_buffer(&dh, &dy) {
                b.release(&dh);
            }
            return Ok(Some(dy));
        }
        let mut done = vec![dh];
        let dx = if wants {
            // Unless dy has another dtype or the branch handed it straight back.
            let reuse = dy.dtype() == self.x.dtype()
                && !d_branch.as_ref().is_some_and(|d| same_buffer(d, &dy));
            let dx = if reuse {
                dy.clone()
            } else {
                let dx = b.input_grad_like(&self.x)?;
                b.push(elementwise::cast(ctx, &dy, &dx)?);
                dx
            };
            if let Some(d_branch) = &d_branch {
                b.push(elementwise::accumulate(ctx, d_branch, &dx)?);
            }
            Some(dx)
        } else {
            None
        };
        done.extend(d_branch);
        // Release what this layer made (never the caller's dy, nor the result).
        for t in done {
            if !same_buffer(&t, &dy) && !dx.as_ref().is_some_and(|d| same_buffer(d, &t)) {
                b.release(&t);
            }
        }
        Ok(dx)
    }
}
