//! Models from Rust: [`ModelSpec::sequential`] and its [`SequentialBuilder`].

use super::layers::{self, LayerConfig};
use super::model::ModelSpec;
use crate::Result;
use crate::ops::unary::{self, UnaryOp};

/// Build a model from Rust, layer by layer, named like `torch.nn.Sequential` (`0`, `1`, …):
///
/// ```
/// # use webgpu_amp::nn::ModelSpec;
/// let spec = ModelSpec::sequential(&[1, 28, 28])
///     .conv2d(8, 3, 1, 1)
///     .relu()
///     .maxpool2d(2, 2)
///     .flatten()
///     .linear(10)
///     .build()
///     .unwrap();
/// assert_eq!(spec.parameters()[0].name, "0.weight");
/// ```
#[derive(Debug)]
pub struct SequentialBuilder {
    input_shape: Vec<usize>,
    layers: Vec<Box<dyn LayerConfig>>,
}

impl ModelSpec {
    pub fn sequential(input_shape: &[usize]) -> SequentialBuilder {
        SequentialBuilder {
            input_shape: input_shape.to_vec(),
            layers: Vec::new(),
        }
    }
}

impl SequentialBuilder {
    /// Append any layer config.
    pub fn layer(mut self, config: impl LayerConfig + 'static) -> Self {
        self.layers.push(Box::new(config));
        self
    }

    /// `nn.Linear(in, out)` with bias.
    pub fn linear(self, out: usize) -> Self {
        self.layer(layers::linear::LinearConfig::new(out, true))
    }

    /// `nn.Conv2d(in, out, kernel, stride, padding)` with bias.
    pub fn conv2d(self, out: usize, kernel: usize, stride: usize, padding: usize) -> Self {
        self.layer(layers::conv2d::Conv2dConfig {
            out,
            kernel,
            stride,
            padding,
            bias: true,
        })
    }

    /// Any row of the unary table (`ops::unary::RELU`, ...).
    pub fn unary(self, op: &'static UnaryOp) -> Self {
        self.layer(layers::unary::UnaryConfig::new(op))
    }

    pub fn relu(self) -> Self {
        self.unary(&unary::RELU)
    }

    /// `nn.GELU()` (exact).
    pub fn gelu(self) -> Self {
        self.unary(&unary::GELU)
    }

    /// `nn.GELU(approximate='tanh')`.
    pub fn gelu_tanh(self) -> Self {
        self.unary(&unary::GELU_TANH)
    }

    pub fn maxpool2d(self, kernel: usize, stride: usize) -> Self {
        self.layer(layers::pool::MaxPool2dConfig {
            kernel,
            stride: Some(stride),
        })
    }

    pub fn flatten(self) -> Self {
        self.layer(layers::flatten::FlattenConfig {})
    }

    /// Resolve shapes; errors name the layer like the JSON path does.
    pub fn build(self) -> Result<ModelSpec> {
        let named: Vec<(String, Box<dyn LayerConfig>)> = self
            .layers
            .into_iter()
            .enumerate()
            .map(|(i, d)| (i.to_string(), d))
            .collect();
        ModelSpec::build("sequential", &self.input_shape, &named)
    }
}
