//! `nn.BatchNorm2d(C)` and `nn.BatchNorm1d(C)` with PyTorch's names and defaults
//! (`momentum=0.1`, `null` for the cumulative average; `eps=1e-5`; `affine`;
//! `track_running_stats`). Its `running_mean`, `running_var` and `num_batches_tracked` (int64)
//! are model buffers ([`super::Layer::buffers`]), laid out one after the other as
//! `ops::batchnorm::RunningStats` reads them: a training forward normalises with the batch's
//! statistics and updates the buffers' working copy, which the step commits (or rolls back
//! when the GradScaler skips the step: `nn::buffers`, the one mechanism); an eval plan
//! normalises with the committed running statistics.
//!
//! Under autocast it is on no list (PyTorch's `batch_norm` is not): it runs in its input's
//! dtype, f16 or bf16 in and out, with statistics, accumulation and the affine parameters in
//! f32 (the master weights), as cuDNN runs it.

use serde::Deserialize;

use super::fusion::Fusable;
use super::{
    Backward, BackwardPlan, BufferDType, BufferDef, ForwardPlan, Init, Layer, LayerConfig,
    ParamDef, Resolved, plan::Mode, positive, py_bool,
};
use crate::amp::policy::{CastRule, Op};
use crate::error::Result;
use crate::ops::batchnorm::{Affine, BatchNorm as BatchNormOp, RunningStats};
use crate::tensor::{DType, Tensor};

/// PyTorch's defaults.
const EPS: f32 = 1e-5;
const MOMENTUM: f32 = 0.1;

/// Which of PyTorch's two modules: the per-sample input shapes each takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dims {
    /// `BatchNorm1d`: `[C]` or `[C, L]` per sample.
    One,
    /// `BatchNorm2d`: `[C, H, W]` per sample.
    Two,
}

impl Dims {
    fn kind(self) -> &'static str {
        match self {
            Dims::One => "batchnorm1d",
            Dims::Two => "batchnorm2d",
        }
    }

    fn module(self) -> &'static str {
        match self {
            Dims::One => "BatchNorm1d",
            Dims::Two => "BatchNorm2d",
        }
    }
}

/// `{"batchnorm2d": {"momentum": 0.1, "eps": 1e-5, "affine": true,
/// "track_running_stats": true}}` (every field optional; `"momentum": null` is PyTorch's
/// `momentum=None`, the cumulative average); `batchnorm1d` likewise.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchNormFields {
    #[serde(default = "default_momentum")]
    pub momentum: Option<f32>,
    #[serde(default = "default_eps")]
    pub eps: f32,
    #[serde(default = "yes")]
    pub affine: bool,
    #[serde(default = "yes")]
    pub track_running_stats: bool,
}

fn default_momentum() -> Option<f32> {
    Some(MOMENTUM)
}

fn default_eps() -> f32 {
    EPS
}

fn yes() -> bool {
    true
}

impl Default for BatchNormFields {
    fn default() -> Self {
        Self {
            momentum: default_momentum(),
            eps: EPS,
            affine: true,
            track_running_stats: true,
        }
    }
}

/// `{"batchnorm2d": {...}}`.
#[derive(Clone, Debug, Deserialize)]
#[serde(transparent)]
pub struct BatchNorm2dConfig(pub BatchNormFields);

/// `{"batchnorm1d": {...}}`.
#[derive(Clone, Debug, Deserialize)]
#[serde(transparent)]
pub struct BatchNorm1dConfig(pub BatchNormFields);

impl LayerConfig for BatchNorm2dConfig {
    fn kind(&self) -> &'static str {
        Dims::Two.kind()
    }

    fn resolve(&self, input: &[usize]) -> std::result::Result<Resolved, String> {
        resolve(Dims::Two, &self.0, input)
    }
}

impl LayerConfig for BatchNorm1dConfig {
    fn kind(&self) -> &'static str {
        Dims::One.kind()
    }

    fn resolve(&self, input: &[usize]) -> std::result::Result<Resolved, String> {
        resolve(Dims::One, &self.0, input)
    }
}

fn resolve(
    dims: Dims,
    fields: &BatchNormFields,
    input: &[usize],
) -> std::result::Result<Resolved, String> {
    let channels = match (dims, input) {
        (Dims::Two, &[c, _, _]) | (Dims::One, &[c] | &[c, _]) => c,
        (Dims::Two, _) => {
            return Err(format!(
                "batchnorm2d needs a per-sample input [channels, height, width], got {input:?}"
            ));
        }
        (Dims::One, _) => {
            return Err(format!(
                "batchnorm1d needs a per-sample input [features] or [channels, length], got {input:?}"
            ));
        }
    };
    positive(channels, "the channel count")?;
    if !(fields.eps > 0.0 && fields.eps.is_finite()) {
        return Err(format!("`eps` must be finite and > 0, not {}", fields.eps));
    }
    if let Some(m) = fields.momentum
        && !(0.0..=1.0).contains(&m)
    {
        return Err(format!(
            "`momentum` must be in [0, 1] (or null for a cumulative average), not {m}"
        ));
    }
    let layer = BatchNorm {
        dims,
        channels,
        fields: fields.clone(),
    };
    Ok(Resolved::new(layer, input.to_vec()))
}

#[derive(Clone, Debug)]
pub struct BatchNorm {
    pub dims: Dims,
    pub channels: usize,
    pub fields: BatchNormFields,
}

impl BatchNorm {
    fn op_settings(&self) -> BatchNormOp {
        BatchNormOp {
            eps: self.fields.eps,
            momentum: self.fields.momentum,
            ..BatchNormOp::default()
        }
    }

    /// The running statistics in the plan's copy of the buffers (working in training,
    /// committed in evaluation).
    fn running(&self, f: &ForwardPlan<'_>) -> Result<RunningStats> {
        let c = self.channels;
        let (buffer, mean) = f.buffer_location("running_mean")?;
        let (_, var) = f.buffer_location("running_var")?;
        let (_, count) = f.buffer_location("num_batches_tracked")?;
        // The store lays a layer's buffers out in the order `buffers()` lists them.
        if var != mean + c || count != mean + 2 * c {
            return Err(crate::Error::InvalidArgument(format!(
                "{}: running statistics not laid out [mean | var | count]",
                f.path()
            )));
        }
        RunningStats::at(buffer, mean, c)
    }
}

impl Layer for BatchNorm {
    fn kind(&self) -> &'static str {
        self.dims.kind()
    }

    fn repr(&self) -> String {
        let f = &self.fields;
        let momentum = f.momentum.map_or("None".to_string(), |m| format!("{m}"));
        format!(
            "{}({}, eps={}, momentum={momentum}, affine={}, track_running_stats={})",
            self.dims.module(),
            self.channels,
            python_float(f.eps),
            py_bool(f.affine),
            py_bool(f.track_running_stats)
        )
    }

    fn op(&self) -> Op {
        Op::new(self.dims.module(), CastRule::Input)
    }

    fn parameters(&self) -> Vec<ParamDef> {
        if !self.fields.affine {
            return Vec::new();
        }
        vec![
            ParamDef::new("weight", vec![self.channels], Init::Ones),
            ParamDef::new("bias", vec![self.channels], Init::Zeros),
        ]
    }

    fn buffers(&self) -> Vec<BufferDef> {
        if !self.fields.track_running_stats {
            return Vec::new();
        }
        let c = vec![self.channels];
        vec![
            BufferDef::new("running_mean", c.clone(), BufferDType::F32, 0.0),
            BufferDef::new("running_var", c, BufferDType::F32, 1.0),
            BufferDef::new("num_batches_tracked", Vec::new(), BufferDType::I64, 0.0),
        ]
    }

    /// Training: `y = (x − mean) · invstd · weight + bias` on the batch's statistics, the
    /// running statistics updated; evaluation: on the running statistics (on the batch's
    /// without `track_running_stats`, as PyTorch does).
    fn forward(&self, f: &mut ForwardPlan<'_>, x: Tensor) -> Result<(Tensor, Box<dyn Backward>)> {
        let c = self.channels;
        // The f32 master weights whatever the activations' dtype (cuDNN's affine in f32).
        let param = |name| f.param_f32(name);
        let (weight, bias) = if self.fields.affine {
            (Some(param("weight")?), Some(param("bias")?))
        } else {
            (None, None)
        };
        let affine = Affine {
            weight: weight.as_ref(),
            bias: bias.as_ref(),
        };
        let y = f.activation(&x.shape()[1..]);
        let bn = self.op_settings();
        let saved = Tensor::zeros_labelled(
            f.ctx(),
            &format!("activation {} (batchnorm statistics)", f.path()),
            &[2 * c],
            f.ctx().storage_for(DType::F32),
        );
        let running = self
            .fields
            .track_running_stats
            .then(|| self.running(f))
            .transpose()?;
        let normalise = match (f.mode(), &running) {
            (Mode::Eval, Some(r)) => bn.eval_normalise((&x, &y), affine, r)?,
            (mode, _) => {
                // An eval plan without running statistics normalises with the batch's and
                // updates nothing.
                let update = running.as_ref().filter(|_| mode == Mode::Train);
                let (statistics, normalise) =
                    bn.train_statistics(f.ctx(), (&x, &y), affine, &saved, update)?;
                for k in statistics {
                    f.push(k);
                }
                normalise
            }
        };
        // Offered to a ReLU or GELU after it (`fusion`).
        let kernel = normalise.kernel(f.ctx())?;
        f.push_fusable(kernel, &y, Fusable::Normalised(Box::new(normalise)));
        let backward = BatchNormBackward {
            bn,
            x,
            weight,
            bias,
            saved,
        };
        Ok((y, Box::new(backward)))
    }
}

/// Python's repr of an f32 setting as PyTorch prints it (`1e-05`, `0.001`).
fn python_float(v: f32) -> String {
    if v != 0.0 && v.abs() < 1e-4 {
        let s = format!("{v:e}");
        // Rust's `1e-5` is Python's `1e-05`.
        match s.split_once("e-") {
            Some((m, e)) if e.len() == 1 => format!("{m}e-0{e}"),
            _ => s,
        }
    } else {
        format!("{v}")
    }
}

struct BatchNormBackward {
    bn: BatchNormOp,
    x: Tensor,
    weight: Option<Tensor>,
    bias: Option<Tensor>,
    saved: Tensor,
}

impl Backward for BatchNormBackward {
    /// `dx = (g − mean(g) − x̂ · mean(g·x̂)) · invstd · weight`, `dweight += Σ g·x̂`,
    /// `dbias += Σ g`, on the batch's statistics (a training plan's).
    fn backward(&self, b: &mut BackwardPlan<'_>, dy: Tensor) -> Result<Option<Tensor>> {
        let affine = Affine {
            weight: self.weight.as_ref(),
            bias: self.bias.as_ref(),
        };
        // A frozen parameter's sum is left out (airbench freezes BatchNorm's weight).
        let grad = |name| b.param_grad(name);
        let trained = |name: &str, p: Option<&Tensor>| p.filter(|_| b.trains(name)).is_some();
        let dweight = (trained("weight", self.weight.as_ref()))
            .then(|| grad("weight"))
            .transpose()?;
        let dbias = (trained("bias", self.bias.as_ref()))
            .then(|| grad("bias"))
            .transpose()?;
        // The kernels write dx whether or not it is needed: scratch from the arena then.
        let dx = b.input_grad(&self.x)?;
        let kernels = self.bn.backward(
            b.ctx(),
            (&self.x, &dy, &dx),
            affine,
            &self.saved,
            (dweight.as_ref(), dbias.as_ref()),
        )?;
        for k in kernels {
            b.push(k);
        }
        if b.wants_input_grad() {
            Ok(Some(dx))
        } else {
            b.release(&dx);
            Ok(None)
        }
    }
}
