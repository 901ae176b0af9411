//! Joins: where a composition's branches meet. `sum` (`a + b + ...`), `product` (`a * b`)
//! and `concat` (`torch.cat(xs, dim=-1)`). Like PyTorch's `add`, `mul` and `cat` under
//! autocast they are on no list: they promote, computing in f32 and writing the widest of
//! their inputs' dtypes. Forward and backward side by side; the plan records them on the tape
//! like a layer ([`super::tape`]), without a row of their own in the precision map (the
//! composition's row stands for them).

use super::BackwardJoin;
use super::backward::{BackwardPlan, Like};
use super::fusion::Fusable;
use super::plan::ForwardPlan;
use crate::error::{Error, Result};
use crate::ops::{concat, elementwise};
use crate::tensor::{DType, Tensor};

/// How the inputs of a join combine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Join {
    /// Elementwise sum of two or more inputs of one shape.
    Sum,
    /// Elementwise product of two inputs of one shape.
    Product,
    /// Concatenation along the last dimension (the others equal).
    Concat,
}

impl Join {
    pub fn name(self) -> &'static str {
        match self {
            Join::Sum => "sum",
            Join::Product => "product",
            Join::Concat => "concat",
        }
    }

    /// The per-sample output shape of inputs shaped `inputs`, or why they do not join.
    pub fn resolve(self, inputs: &[&[usize]]) -> std::result::Result<Vec<usize>, String> {
        let (first, rest) = inputs
            .split_first()
            .ok_or_else(|| format!("a {} join needs inputs", self.name()))?;
        match self {
            Join::Product if inputs.len() != 2 => {
                return Err(format!(
                    "a product join takes two inputs, got {}",
                    inputs.len()
                ));
            }
            _ if inputs.len() < 2 => {
                return Err(format!("a {} join needs two inputs or more", self.name()));
            }
            _ => {}
        }
        match self {
            Join::Sum | Join::Product => match rest.iter().find(|s| *s != first) {
                Some(other) => Err(format!(
                    "a {} join needs inputs of one shape, got {first:?} and {other:?}",
                    self.name()
                )),
                None => Ok(first.to_vec()),
            },
            Join::Concat => {
                let lead = |s: &[usize]| s.len().checked_sub(1).map(|n| s[..n].to_vec());
                let mut out = first.to_vec();
                for s in rest {
                    if s.is_empty() || lead(s) != lead(first) {
                        return Err(format!(
                            "a concat join needs inputs equal but in the last dimension, got \
                             {first:?} and {s:?}"
                        ));
                    }
                    *out.last_mut().expect("not empty") += s[s.len() - 1];
                }
                Ok(out)
            }
        }
    }

    /// The dtype the join writes: its inputs', or f32 when they differ (PyTorch's type
    /// promotion: f16 with bf16 gives f32 too).
    pub fn output_dtype(inputs: &[DType]) -> DType {
        match inputs.split_first() {
            Some((first, rest)) if rest.iter().all(|d| d == first) => *first,
            _ => DType::F32,
        }
    }

    /// Plan the forward of `inputs`; returns the output and what the backward needs (the
    /// caller records both: [`ForwardPlan::record_join`]).
    pub(super) fn forward(
        self,
        f: &mut ForwardPlan<'_>,
        inputs: &[Tensor],
    ) -> Result<(Tensor, JoinBackward)> {
        let shapes: Vec<&[usize]> = inputs.iter().map(|t| &t.shape()[1..]).collect();
        let shape = self.resolve(&shapes).map_err(Error::Model)?;
        let dtypes: Vec<DType> = inputs.iter().map(Tensor::dtype).collect();
        let y = f.activation_in(&shape, Join::output_dtype(&dtypes));
        let ctx = f.ctx();
        let kept = match self {
            Join::Sum => {
                // The kernel takes a low-precision second input beside an f32 first one.
                let swap = inputs[1].dtype() == DType::F32 && inputs[0].dtype() != DType::F32;
                let (a, b) = if swap {
                    (&inputs[1], &inputs[0])
                } else {
                    (&inputs[0], &inputs[1])
                };
                let add = elementwise::add(ctx, a, b, &y)?;
                if inputs.len() == 2 {
                    // Offered to the layer after it: a LayerNorm reading the sum writes it.
                    let sum = Fusable::Add {
                        a: a.clone(),
                        b: b.clone(),
                    };
                    f.push_fusable(add, &y, sum);
                } else {
                    f.push(add);
                    for c in &inputs[2..] {
                        f.push(elementwise::accumulate(ctx, c, &y)?);
                    }
                }
                Kept::Shapes(inputs.iter().map(Like::of).collect())
            }
            Join::Product => {
                f.push(elementwise::mul(ctx, &inputs[0], &inputs[1], &y)?);
                Kept::Values(inputs.to_vec())
            }
            Join::Concat => {
                let mut offset = 0;
                for x in inputs {
                    f.push(concat::write_part(ctx, &flat(x)?, &flat(&y)?, offset)?);
                    offset += x.shape().last().copied().unwrap_or(1);
                }
                Kept::Shapes(inputs.iter().map(Like::of).collect())
            }
        };
        Ok((y, JoinBackward { join: self, kept }))
    }
}

/// `[rows, last]`: a tensor as rows of its last dimension.
fn flat(t: &Tensor) -> Result<Tensor> {
    let last = t.shape().last().copied().unwrap_or(1);
    t.reshape(&[t.numel() / last.max(1), last])
}

/// What a join's backward keeps: its inputs' shapes and storages (a sum, a concat), or
/// their values (a product).
enum Kept {
    Shapes(Vec<Like>),
    Values(Vec<Tensor>),
}

/// A join's backward: each input's gradient from the output's.
pub(super) struct JoinBackward {
    join: Join,
    kept: Kept,
}

impl BackwardJoin for JoinBackward {
    /// Inputs are served last first: a cast of `dy` right after the kernels that wrote it
    /// may be written by them ([`BackwardPlan::cast_grad`]), and a residual's branch, its
    /// last input, is where one is needed.
    fn backward(
        &self,
        b: &mut BackwardPlan<'_>,
        dy: &Tensor,
        wants: &[bool],
    ) -> Result<Vec<Option<Tensor>>> {
        let mut grads = vec![None; wants.len()];
        for i in (0..wants.len()).rev().filter(|&i| wants[i]) {
            grads[i] = Some(self.input_grad(b, dy, i)?);
        }
        Ok(grads)
    }
}

impl JoinBackward {
    fn input_grad(&self, b: &mut BackwardPlan<'_>, dy: &Tensor, i: usize) -> Result<Tensor> {
        let ctx = b.ctx();
        match (&self.kept, self.join) {
            // d(a + b)/da = 1: dy itself where the storages agree (no kernel), else a cast.
            (Kept::Shapes(like), Join::Sum) => {
                if dy.storage() == like[i].storage {
                    Ok(dy.clone())
                } else {
                    b.cast_grad(dy, &like[i])
                }
            }
            // d(a · b)/da = dy · b, computed in f32 and stored as a is.
            (Kept::Values(values), Join::Product) => {
                let other = &values[1 - i];
                let dx = b.input_grad(&values[i])?;
                b.push(elementwise::mul(ctx, dy, other, &dx)?);
                Ok(dx)
            }
            // The input's columns of dy.
            (Kept::Shapes(like), Join::Concat) => {
                let offset: usize = like[..i]
                    .iter()
                    .map(|l| *l.shape.last().unwrap_or(&1))
                    .sum();
                let dx = b.input_grad_like(&like[i])?;
                b.push(concat::read_part(ctx, &flat(dy)?, &flat(&dx)?, offset)?);
                Ok(dx)
            }
            _ => unreachable!("a join keeps what its backward reads"),
        }
    }
}
