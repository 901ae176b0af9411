//! Where the AMP doctor may look (`train::numerics`): each layer's output, input gradient
//! and weight gradients, with the point in the forward's or backward's kernel list where
//! each is complete. The two loops note them as they plan ([`super::layers::plan`]);
//! nothing is dispatched for them unless numerics are on, and then only a counting pass at
//! or after that point, before a later kernel may overwrite the values.

use crate::tensor::Tensor;

/// Which of a layer's tensors a probe reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeTensor {
    /// The layer's forward output, in the dtype it computed in.
    Output,
    /// The gradient of its input, in the input's storage (the loss: of the network output).
    InputGrad,
    /// The gradients of its own parameters, in the flat f32 gradient buffer.
    WeightGrad,
}

impl ProbeTensor {
    pub const ALL: [ProbeTensor; 3] = [
        ProbeTensor::Output,
        ProbeTensor::InputGrad,
        ProbeTensor::WeightGrad,
    ];

    /// For people: "output", "input gradient", "weight gradient".
    pub fn name(self) -> &'static str {
        match self {
            ProbeTensor::Output => "output",
            ProbeTensor::InputGrad => "input gradient",
            ProbeTensor::WeightGrad => "weight gradient",
        }
    }

    /// Whether the forward or the backward makes it.
    pub fn in_forward(self) -> bool {
        self == ProbeTensor::Output
    }
}

/// One tensor a counting pass may read.
#[derive(Clone, Debug)]
pub struct ProbePoint {
    /// The layer's row in the precision map (the policy's per-layer index); the loss is the
    /// row after the last layer.
    pub layer: usize,
    pub tensor: ProbeTensor,
    /// Kernels of its list recorded before it is complete: a pass goes right after them.
    pub after: usize,
    pub values: Tensor,
}

/// The probe points one loop notes as it plans (none on a dry twin: nothing backs its
/// buffers, and a noted tensor would keep one alive for the transient-activation count).
#[derive(Default)]
pub struct ProbeLog {
    points: Vec<ProbePoint>,
}

impl ProbeLog {
    /// Note `values` as layer `layer`'s `tensor`, complete after `after` kernels.
    pub fn note(
        &mut self,
        dry: bool,
        (layer, tensor): (usize, ProbeTensor),
        after: usize,
        values: &Tensor,
    ) {
        if !dry {
            let values = values.clone();
            self.points.push(ProbePoint {
                layer,
                tensor,
                after,
                values,
            });
        }
    }

    pub fn take(&mut self) -> Vec<ProbePoint> {
        std::mem::take(&mut self.points)
    }
}

/// The probe points of a planned network.
#[derive(Clone, Debug, Default)]
pub struct Probes {
    /// In the forward's kernel list.
    pub forward: Vec<ProbePoint>,
    /// In the backward's kernel list (the loss gradient at its start).
    pub backward: Vec<ProbePoint>,
}
