//! The forward loop: each layer of a run in order, with the cast the precision policy asks for
//! in front of it, its forward, and its backward recorded on the tape.

use super::ForwardPlan;
use crate::error::Result;
use crate::nn::layers::backward::{BackwardPlan, Like, join};
use crate::nn::layers::layer::{Backward, BackwardJoin, Layer, NamedLayer, own_parameters};
use crate::nn::layers::tape::{Flow, Tape, TapeOp};
use crate::nn::probes::ProbeTensor;
use crate::ops::elementwise;
use crate::tensor::{DType, Tensor};

impl ForwardPlan<'_> {
    /// Plan `layers` in order on `x`, the model's input (it needs no gradient): for each,
    /// the cast the policy asks for, then its forward. Returns the output and the tape the
    /// backward replays.
    pub fn run_layers(&mut self, layers: &[NamedLayer], x: Tensor) -> Result<(Tensor, Tape)> {
        let mut flow = Flow::new(x, false);
        let mut value = 0;
        for (i, l) in layers.iter().enumerate() {
            // A leaf takes index `layer_count`, so the next layer takes the one after it.
            let next = layers.get(i + 1).filter(|_| l.layer.sublayers().is_empty());
            let consumer = next.map(|n| self.compute_dtype_at(1, n.layer.op()));
            value = self.run_layer(&mut flow, &l.name, &*l.layer, value, consumer)?;
        }
        Ok(flow.finish(value))
    }

    /// Plan one layer named `name` (relative to the layer being planned) on value `input`
    /// of `flow`; `consumer` is the dtype the readers of its output compute in, when they
    /// agree ([`Self::consumer_dtype`]). Returns its output's value.
    pub(in crate::nn::layers) fn run_layer(
        &mut self,
        flow: &mut Flow,
        name: &str,
        layer: &dyn Layer,
        input: usize,
        consumer: Option<DType>,
    ) -> Result<usize> {
        let parent = (
            std::mem::take(&mut self.path),
            self.dtype,
            self.index,
            self.input_requires_grad,
        );
        self.path = join(&parent.0, name);
        self.index = self.layer_count;
        self.layer_count += 1;
        let x_dtype = flow.value(input).dtype();
        self.dtype = self.policy.compute_dtype(self.index, layer.op(), x_dtype);
        let mut input = input;
        // Casts convert activations; ids (an embedding's tokens) go in as they are. A value
        // cast once serves every layer reading it in that dtype.
        if self.dtype != x_dtype && x_dtype.is_float() {
            input = match flow.cast_of(input, self.dtype) {
                Some(cast) => cast,
                None => {
                    let x = flow.value(input).clone();
                    let (y, backward) = cast_forward(self, x, self.dtype)?;
                    let wants = flow.requires_grad(input);
                    let op = TapeOp::Layer(backward);
                    let cast = flow.record(self.path.clone(), &[input], op, None, (y, wants));
                    flow.note_cast(input, self.dtype, cast);
                    cast
                }
            };
        }
        // Whether this layer's input needs a gradient is decided by what came before it,
        // not by its own sub-layers (planned, and recorded, during its forward).
        let wants = flow.requires_grad(input);
        self.input_requires_grad = wants;
        let has_params = !layer.parameters().is_empty() || !layer.tied_parameters().is_empty();
        self.consumer = consumer.filter(|_| layer.sublayers().is_empty());
        let forward = layer.forward(self, flow.value(input).clone());
        self.consumer = None;
        let (y, backward) = forward?;
        let params = own_parameters(layer, &self.path);
        let at = (self.index, ProbeTensor::Output);
        self.probes
            .note(self.ctx.is_dry(), at, self.kernels.len(), &y);
        let record = (Some((self.index, params)), (y, wants || has_params));
        let op = TapeOp::Layer(backward);
        let out = flow.record(self.path.clone(), &[input], op, record.0, record.1);
        (self.path, self.dtype, self.index, self.input_requires_grad) = parent;
        Ok(out)
    }

    /// Record a join of values `inputs` of `flow`, planned already (`join.rs`): its output
    /// `y` and its backward. Returns the output's value.
    pub(in crate::nn::layers) fn record_join(
        &mut self,
        flow: &mut Flow,
        inputs: &[usize],
        (y, backward): (Tensor, Box<dyn BackwardJoin>),
    ) -> usize {
        let wants = inputs.iter().any(|&i| flow.requires_grad(i));
        let op = TapeOp::Join(backward);
        flow.record(self.path.clone(), inputs, op, None, (y, wants))
    }
}

// In front of a layer whose compute dtype differs from its input's (`f32 → f16` before a
// Linear under amp-f16, `f16 → f32` before the loss): not a JSON layer, the plan inserts it
// from the policy. Its backward casts the gradient back.

/// `y = x` converted to `dtype` (round to nearest even, overflow to ±inf).
fn cast_forward(
    f: &mut ForwardPlan<'_>,
    x: Tensor,
    dtype: DType,
) -> Result<(Tensor, Box<dyn Backward>)> {
    let y = f.named_activation("cast", &x.shape()[1..], dtype);
    f.push(elementwise::cast(f.ctx(), &x, &y)?);
    Ok((y, Box::new(CastBackward { x: Like::of(&x) })))
}

/// Only the input's shape and storage: a cast's backward needs no values.
struct CastBackward {
    x: Like,
}

impl Backward for CastBackward {
    /// `dx = dy` converted back to the input's dtype.
    fn backward(&self, b: &mut BackwardPlan<'_>, dy: Tensor) -> Result<Option<Tensor>> {
        if !b.wants_input_grad() {
            return Ok(None);
        }
        let dx = b.input_grad_like(&self.x)?;
        b.push(elementwise::cast(b.ctx(), &dy, &dx)?);
        Ok(Some(dx))
    }
}
