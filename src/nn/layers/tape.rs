//! What the forward records and the backward replays: a [`Tape`] of ops over numbered
//! values (value 0 is the tape's input, value k + 1 the output of op k), so a value may feed
//! several ops (a fork) and an op may read several values (a join). The forward builds it
//! through a [`Flow`] ([`super::plan`]); [`BackwardPlan::run_tape`] replays it in reverse.
//!
//! The replay keeps one gradient slot per value, and this is the one place where gradients
//! that meet at a fork are summed, for every composition: the first contribution to a value
//! is kept as it is; a later one is added onto it. The op about to contribute is first
//! offered the slot's gradient to add onto in its own kernel (a LayerNorm's input gradient
//! onto a residual's skip gradient: [`BackwardPlan::take_accumulation`]); otherwise the sum
//! is one `accumulate` kernel, in place when no pending gradient shares the slot's buffer
//! (a sum join hands its output gradient to each input without a copy), else into a new
//! buffer. No layer writes any of this itself.

use std::sync::Arc;

use super::backward::{BackwardPlan, Like, same_buffer};
use crate::error::Result;
use crate::gpu::GpuBuffer;
use crate::nn::probes::ProbeTensor;
use crate::ops::elementwise;
use crate::tensor::{DType, Tensor};

/// One recorded op: a layer's backward, or a join's.
pub(super) enum TapeOp {
    Layer(Box<dyn super::Backward>),
    Join(Box<dyn super::BackwardJoin>),
}

/// What the forward recorded for one op (a layer, a cast autocast inserted, or a join).
pub(super) struct Recorded {
    /// The full name of the layer, the prefix of its parameters' gradients.
    pub(super) path: String,
    /// The values it reads, each with whether it needs a gradient (it does when a parameter
    /// went into it: the data needs none).
    pub(super) inputs: Vec<(usize, bool)>,
    pub(super) op: TapeOp,
    /// A layer's precision-map row and its own parameters' full names (none for a cast or a
    /// join): where the AMP doctor looks at its gradients ([`crate::nn::probes`]).
    pub(super) layer: Option<(usize, Vec<String>)>,
}

/// The recorded backward of a composition (or of the model's chain of layers), replayed by
/// [`BackwardPlan::run_tape`].
pub struct Tape {
    pub(super) ops: Vec<Recorded>,
    /// The shape and storage of value 0, the input.
    pub(in crate::nn) input: Like,
    /// The value that is the tape's output.
    pub(super) output: usize,
}

impl Tape {
    /// A tape with nothing to replay (what an evaluation plan keeps: it has no backward).
    pub(in crate::nn) fn empty(input: Like) -> Self {
        Self {
            ops: Vec::new(),
            input,
            output: 0,
        }
    }
}

/// The forward side of a tape being recorded: each value's tensor and whether it needs a
/// gradient, and the casts made so far (a value cast once to a dtype serves every reader).
/// Dropped once the forward is planned, so that it keeps no activation alive
/// ([`crate::nn::transient`]).
pub struct Flow {
    tape: Tape,
    values: Vec<Tensor>,
    requires_grad: Vec<bool>,
    casts: Vec<(usize, DType, usize)>,
}

impl Flow {
    /// A tape whose input is `x`; `requires_grad` says whether its gradient is wanted.
    pub(super) fn new(x: Tensor, requires_grad: bool) -> Self {
        Self {
            tape: Tape {
                ops: Vec::new(),
                input: Like::of(&x),
                output: 0,
            },
            values: vec![x],
            requires_grad: vec![requires_grad],
            casts: Vec::new(),
        }
    }

    /// The tensor of value `id`.
    pub(super) fn value(&self, id: usize) -> &Tensor {
        &self.values[id]
    }

    pub(super) fn requires_grad(&self, id: usize) -> bool {
        self.requires_grad[id]
    }

    /// Record `op` reading `inputs`, writing `y`; returns the new value.
    pub(super) fn record(
        &mut self,
        path: String,
        inputs: &[usize],
        op: TapeOp,
        layer: Option<(usize, Vec<String>)>,
        (y, requires_grad): (Tensor, bool),
    ) -> usize {
        let inputs = inputs.iter().map(|&i| (i, self.requires_grad[i])).collect();
        self.tape.ops.push(Recorded {
            path,
            inputs,
            op,
            layer,
        });
        self.values.push(y);
        self.requires_grad.push(requires_grad);
        self.values.len() - 1
    }

    /// The value that is `id` cast to `dtype`, if one was made.
    pub(super) fn cast_of(&self, id: usize, dtype: DType) -> Option<usize> {
        self.casts
            .iter()
            .find(|(v, d, _)| *v == id && *d == dtype)
            .map(|c| c.2)
    }

    pub(super) fn note_cast(&mut self, id: usize, dtype: DType, cast: usize) {
        self.casts.push((id, dtype, cast));
    }

    /// The tape, with `output` as its output, and that value's tensor.
    pub(super) fn finish(mut self, output: usize) -> (Tensor, Tape) {
        self.tape.output = output;
        let y = self.values.swap_remove(output);
        (y, self.tape)
    }
}

/// The gradient slots of one replay: a gradient per value, the buffer of the gradient the
/// replay was given (the caller's: never given back here), and whether the replay may
/// write into it.
struct Slots {
    grads: Vec<Option<Tensor>>,
    caller: Arc<GpuBuffer>,
    caller_writable: bool,
}

impl Slots {
    /// How many pending gradients live in `buffer`.
    fn holding(&self, buffer: &Arc<GpuBuffer>) -> usize {
        self.grads
            .iter()
            .flatten()
            .filter(|g| Arc::ptr_eq(g.buffer(), buffer))
            .count()
    }

    /// Whether `t`'s buffer may go back to the arena: not the caller's, and no pending
    /// gradient in it.
    fn unused(&self, t: &Tensor) -> bool {
        !Arc::ptr_eq(t.buffer(), &self.caller) && self.holding(t.buffer()) == 0
    }

    /// Whether a kernel may write into `t`'s buffer: at most `held` pending gradients live
    /// in it (the slot `t` is in, when it is in one), and it is not a caller's buffer the
    /// caller still reads.
    fn writable(&self, t: &Tensor, held: usize) -> bool {
        self.holding(t.buffer()) <= held
            && (self.caller_writable || !Arc::ptr_eq(t.buffer(), &self.caller))
    }
}

impl BackwardPlan<'_> {
    /// Replay `tape` in reverse from `dy`, the gradient of its output. Returns the gradient
    /// of its input, or `None` when it needs none. `dy` is never given back to the arena
    /// here, and is written only where [`Self::dy_writable`] says the caller allows it (a
    /// residual's skip path then becomes the input's gradient in place).
    ///
    /// An accumulation target offered to the op planning this tape (its input's gradient so
    /// far, [`Self::take_accumulation`]) becomes the input's slot: the tape's ops add onto it.
    pub fn run_tape(&mut self, tape: &Tape, dy: Tensor) -> Result<Option<Tensor>> {
        let outer = (
            std::mem::take(&mut self.path),
            self.wants_input_grad,
            self.dy_writable,
        );
        let mut slots = Slots {
            grads: vec![None; tape.ops.len() + 1],
            caller: dy.buffer().clone(),
            caller_writable: self.dy_writable,
        };
        // A composition takes an offered target for its input by starting from it.
        let input = &tape.input;
        let seed = self.offered.take().filter(|t| {
            outer.1 && t.shape() == input.shape.as_slice() && t.storage() == input.storage
        });
        let seeded = seed.is_some();
        slots.grads[0] = seed;
        slots.grads[tape.output] = Some(dy);
        for (k, r) in tape.ops.iter().enumerate().rev() {
            let Some(g) = slots.grads[k + 1].take() else {
                continue; // nothing downstream of this value needs a gradient
            };
            self.path.clone_from(&r.path);
            self.dy_writable = slots.writable(&g, 0);
            let dxs = match &r.op {
                TapeOp::Layer(backward) => {
                    let (input, wants) = r.inputs[0];
                    self.wants_input_grad = wants;
                    // Fork gradients meet here: the op may add onto what its input has.
                    self.offered = slots.grads[input].clone().filter(|t| {
                        slots.writable(t, 1) && !same_buffer(t, &g) && t.dtype() == DType::F32
                    });
                    let dx = backward.backward(self, g.clone())?;
                    self.offered = None;
                    let taken = self.taken.take();
                    let includes_slot = matches!((&dx, &taken),
                        (Some(d), Some(t)) if Arc::ptr_eq(d.buffer(), t));
                    if let Some((layer, params)) = &r.layer {
                        for name in params {
                            let grad = self.param_grad_at(name)?;
                            self.probe(*layer, ProbeTensor::WeightGrad, &grad);
                        }
                        if let Some(dx) = &dx {
                            self.probe(*layer, ProbeTensor::InputGrad, dx);
                        }
                    }
                    vec![(input, dx, includes_slot)]
                }
                TapeOp::Join(join) => {
                    let wants: Vec<bool> = r.inputs.iter().map(|i| i.1).collect();
                    self.wants_input_grad = wants.iter().any(|w| *w);
                    let dxs = join.backward(self, &g, &wants)?;
                    r.inputs
                        .iter()
                        .zip(dxs)
                        .map(|(i, d)| (i.0, d, false))
                        .collect()
                }
            };
            // The output's gradient is read: back to the arena, unless it goes on.
            let goes_on = dxs
                .iter()
                .any(|(_, d, _)| d.as_ref().is_some_and(|d| same_buffer(d, &g)));
            if !goes_on && slots.unused(&g) {
                self.release(&g);
            }
            for (input, dx, includes_slot) in dxs {
                if let Some(dx) = dx {
                    self.deposit(&mut slots, input, dx, includes_slot)?;
                }
            }
        }
        (self.path, self.wants_input_grad, self.dy_writable) = outer;
        let dx = slots.grads[0].take().filter(|_| self.wants_input_grad);
        // The input's gradient includes the target it started from: say so to the caller.
        if seeded {
            self.taken = dx.as_ref().map(|d| d.buffer().clone());
        }
        Ok(dx)
    }

    /// Add `dx` to value `id`'s gradient: the one place fork gradients are summed.
    /// `includes_slot`: the op already added the slot's gradient into `dx`.
    fn deposit(
        &mut self,
        slots: &mut Slots,
        id: usize,
        dx: Tensor,
        includes_slot: bool,
    ) -> Result<()> {
        let Some(acc) = slots.grads[id].take() else {
            slots.grads[id] = Some(dx);
            return Ok(());
        };
        let sum = if includes_slot {
            dx.clone()
        } else if slots.writable(&acc, 0) && !same_buffer(&acc, &dx) {
            self.push(elementwise::accumulate(self.ctx(), &dx, &acc)?);
            acc.clone()
        } else {
            // Another pending gradient shares acc's buffer: the sum goes to a new one.
            let sum = self.input_grad(&acc)?;
            self.push(elementwise::add(self.ctx(), &acc, &dx, &sum)?);
            sum
        };
        for t in [acc, dx] {
            if !same_buffer(&t, &sum) && slots.unused(&t) {
                self.release(&t);
            }
        }
        slots.grads[id] = Some(sum);
        Ok(())
    }
}
