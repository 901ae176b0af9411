//! Named models: the tutorials' networks, adapted to the data's shapes.

use super::families;
use super::layers::LayerConfig;
use super::layers::conv2d::Conv2dConfig;
use super::layers::flatten::FlattenConfig;
use super::layers::linear::LinearConfig;
use super::layers::pool::MaxPool2dConfig;
use super::layers::unary::UnaryConfig;
use super::model::ModelSpec;
use crate::ops::unary;
use crate::{Error, Result};

/// Names accepted by [`preset`], in the order the CLI and the app list them.
pub const PRESETS: [&str; 6] = [
    "linear",
    "mlp",
    "simple-cnn",
    "mnist-cnn",
    "gpt-tiny",
    "gpt-char",
];

/// The per-sample input each preset of features is meant for (the tutorials' data: MNIST's
/// 1×28×28, CIFAR-10's 3×32×32); every preset adapts to the data's shape. A family's presets
/// say theirs through their family's data ([`super::family::Family::bench_data`]).
pub fn meant_input(name: &str) -> Option<Vec<usize>> {
    match name {
        "mlp" | "mnist-cnn" | "linear" => Some(vec![1, 28, 28]),
        "simple-cnn" => Some(vec![3, 32, 32]),
        _ => None,
    }
}

/// Hidden width of the `mlp` preset.
pub const MLP_HIDDEN: usize = 256;

/// A named model for data with per-sample `input_shape` and `output_dim` outputs:
///
/// - `linear`: the tutorials' `SimpleModel` (`self.linear = nn.Linear(in, out)`), parameters
///   `linear.weight`, `linear.bias`. A multi-dimensional input is flattened first by a module
///   named `flatten` (no parameters), so on MNIST it is logistic regression over 784 pixels.
/// - `mlp`: `nn.Sequential(nn.Flatten(), nn.Linear(in, 256), nn.ReLU(), nn.Linear(256, out))`,
///   parameters `1.weight`, `1.bias`, `3.weight`, `3.bias`.
/// - `simple-cnn`: the tutorial's `SimpleCNN` (conv1 C→32 k3 p1, ReLU, max-pool 2,
///   conv2 32→64 k3 p1, ReLU, max-pool 2, flatten, fc 64·(H/4)·(W/4)→out; 64·8·8 for 3×32×32),
///   parameters `conv1.*`, `conv2.*`, `fc.*`; the ReLU and pool modules are shared, as in the
///   tutorial, so both uses are named `relu` and `pool`.
/// - `mnist-cnn`: the same network for 1×28×28 (fc 64·7·7→10); the two presets differ only in
///   the input they are meant for, and both adapt to the data's `[C, H, W]`.
/// - a family's presets ([`super::family`]): `gpt-tiny`, `gpt-char`, nanoGPT's GPT
///   ([`super::gpt::gpt_preset`]) over a vocabulary of `output_dim`, on sequences of
///   `input_shape = [T]` tokens (T at most the block size).
pub fn preset(name: &str, input_shape: &[usize], output_dim: usize) -> Result<ModelSpec> {
    if output_dim == 0 {
        return Err(Error::model(format!(
            "{name}: output size must be at least 1"
        )));
    }
    if let Some(family) = families::of_preset(name) {
        let model = family.preset(name, output_dim)?;
        let t = match (model.tokens(), input_shape) {
            (Some(_), &[t]) => t,
            (Some(_), _) => {
                return Err(Error::model(format!(
                    "{name}: a language model takes sequences of token ids ([T] per sample), \
                     not {input_shape:?}"
                )));
            }
            (None, _) => 0,
        };
        // A family that takes its input shape from the data (a ResNet's channels and image
        // size) adapts to it, as the presets below do.
        let model = model.with_input(input_shape).unwrap_or(model);
        return ModelSpec::of_family(model, name, t);
    }
    type Named = (String, Box<dyn LayerConfig>);
    fn named(name: &str, config: impl LayerConfig + 'static) -> Named {
        (name.to_string(), Box::new(config))
    }
    let linear = |out| LinearConfig::new(out, true);
    let conv = |out| Conv2dConfig {
        out,
        kernel: 3,
        stride: 1,
        padding: 1,
        bias: true,
    };
    let pool = || MaxPool2dConfig {
        kernel: 2,
        stride: Some(2),
    };
    let layers: Vec<Named> = match name {
        "linear" => {
            let mut layers = Vec::new();
            if input_shape.len() > 1 {
                layers.push(named("flatten", FlattenConfig {}));
            }
            layers.push(named("linear", linear(output_dim)));
            layers
        }
        "mlp" => vec![
            named("0", FlattenConfig {}),
            named("1", linear(MLP_HIDDEN)),
            named("2", UnaryConfig::new(&unary::RELU)),
            named("3", linear(output_dim)),
        ],
        "simple-cnn" | "mnist-cnn" => vec![
            named("conv1", conv(32)),
            named("relu", UnaryConfig::new(&unary::RELU)),
            named("pool", pool()),
            named("conv2", conv(64)),
            named("relu", UnaryConfig::new(&unary::RELU)),
            named("pool", pool()),
            named("flatten", FlattenConfig {}),
            named("fc", linear(output_dim)),
        ],
        _ => {
            return Err(Error::model(format!(
                "unknown preset `{name}` (expected one of {}, or a JSON file)",
                PRESETS.join(", ")
            )));
        }
    };
    ModelSpec::build(name, input_shape, &layers)
}
