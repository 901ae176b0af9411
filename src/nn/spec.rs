//! Model descriptions: layers with resolved shapes, PyTorch parameter names and PyTorch's
//! default initialisation. No GPU here; the GPU layers iterate [`ModelSpec::layers`].
//!
//! A model comes from a preset ([`preset`]) or from JSON ([`ModelSpec::from_json`]):
//!
//! ```json
//! {"input": [1, 28, 28], "layers": [
//!   {"conv2d": {"out": 32, "kernel": 3, "padding": 1}}, {"relu": {}},
//!   {"maxpool2d": {"kernel": 2}}, {"flatten": {}}, {"linear": {"out": 10}}]}
//! ```
//!
//! Layer kinds and their fields (defaults after `=`):
//! `linear {out, bias=true}`, `conv2d {out, kernel, stride=1, padding=0, bias=true}` (square
//! kernels, zero padding), `relu {}`, `gelu {}` (tanh approximation, PyTorch's
//! `nn.GELU(approximate='tanh')`), `maxpool2d {kernel, stride=kernel}` (no padding, floor
//! mode), `flatten {}` (all per-sample dimensions, like `nn.Flatten()`).
//!
//! Shapes are per sample, without the batch dimension: `[features]` or `[channels, height,
//! width]`. A JSON model is a `torch.nn.Sequential`: every layer, activations included, takes
//! its index as its name, so parameters are `{index}.weight` and `{index}.bias`. Layouts are
//! PyTorch's: Linear weight `[out, in]`, Conv2d weight `[out, in, kh, kw]`.

use std::fmt;

use serde::Deserialize;

use crate::data::Rng;
use crate::{Error, Result};

/// A layer with its sizes resolved from the input shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LayerSpec {
    Linear {
        in_features: usize,
        out_features: usize,
        bias: bool,
    },
    Conv2d {
        in_channels: usize,
        out_channels: usize,
        kernel: usize,
        stride: usize,
        padding: usize,
        bias: bool,
    },
    Relu,
    /// GELU, tanh approximation.
    Gelu,
    MaxPool2d {
        kernel: usize,
        stride: usize,
    },
    Flatten,
}

impl LayerSpec {
    /// The JSON name of the kind (`linear`, `conv2d`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            LayerSpec::Linear { .. } => "linear",
            LayerSpec::Conv2d { .. } => "conv2d",
            LayerSpec::Relu => "relu",
            LayerSpec::Gelu => "gelu",
            LayerSpec::MaxPool2d { .. } => "maxpool2d",
            LayerSpec::Flatten => "flatten",
        }
    }

    /// `(weight shape, fan_in, has bias)` for layers with parameters.
    fn weight(&self) -> Option<(Vec<usize>, usize, bool)> {
        match *self {
            LayerSpec::Linear {
                in_features,
                out_features,
                bias,
            } => Some((vec![out_features, in_features], in_features, bias)),
            LayerSpec::Conv2d {
                in_channels,
                out_channels,
                kernel,
                bias,
                ..
            } => Some((
                vec![out_channels, in_channels, kernel, kernel],
                in_channels * kernel * kernel,
                bias,
            )),
            _ => None,
        }
    }

    /// `fan_in` of the weight (in_features, or in_channels · kh · kw); `None` without weights.
    pub fn fan_in(&self) -> Option<usize> {
        self.weight().map(|(_, fan_in, _)| fan_in)
    }
}

/// PyTorch's `repr` of the module.
impl fmt::Display for LayerSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let py_bool = |b: bool| if b { "True" } else { "False" };
        match *self {
            LayerSpec::Linear {
                in_features,
                out_features,
                bias,
            } => write!(
                f,
                "Linear(in_features={in_features}, out_features={out_features}, bias={})",
                py_bool(bias)
            ),
            LayerSpec::Conv2d {
                in_channels,
                out_channels,
                kernel,
                stride,
                padding,
                bias,
            } => {
                write!(
                    f,
                    "Conv2d({in_channels}, {out_channels}, kernel_size=({kernel}, {kernel}), stride=({stride}, {stride})"
                )?;
                if padding != 0 {
                    write!(f, ", padding=({padding}, {padding})")?;
                }
                if !bias {
                    write!(f, ", bias=False")?;
                }
                write!(f, ")")
            }
            LayerSpec::Relu => write!(f, "ReLU()"),
            LayerSpec::Gelu => write!(f, "GELU(approximate='tanh')"),
            LayerSpec::MaxPool2d { kernel, stride } => write!(
                f,
                "MaxPool2d(kernel_size={kernel}, stride={stride}, padding=0, dilation=1, ceil_mode=False)"
            ),
            LayerSpec::Flatten => write!(f, "Flatten(start_dim=1, end_dim=-1)"),
        }
    }
}

/// One layer of a model, in execution order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layer {
    pub spec: LayerSpec,
    /// The module's name, the prefix of its parameters: `"conv1"`, or `"0"` in a Sequential.
    pub name: String,
    /// Per-sample input shape (no batch dimension).
    pub input_shape: Vec<usize>,
    /// Per-sample output shape (no batch dimension).
    pub output_shape: Vec<usize>,
}

impl Layer {
    /// This layer's parameters in `state_dict` order (weight, then bias).
    pub fn parameters(&self) -> Vec<ParamSpec> {
        let Some((weight_shape, _, bias)) = self.spec.weight() else {
            return Vec::new();
        };
        let out = weight_shape[0];
        let mut params = vec![ParamSpec {
            name: format!("{}.weight", self.name),
            shape: weight_shape,
        }];
        if bias {
            params.push(ParamSpec {
                name: format!("{}.bias", self.name),
                shape: vec![out],
            });
        }
        params
    }
}

/// A parameter tensor: PyTorch `state_dict` name and shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamSpec {
    pub name: String,
    pub shape: Vec<usize>,
}

impl ParamSpec {
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// A model: input shape and layers with resolved shapes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelSpec {
    /// The preset's name, or `"json"` for a JSON description.
    pub name: String,
    /// Per-sample input shape.
    pub input_shape: Vec<usize>,
    pub layers: Vec<Layer>,
}

/// Names accepted by [`preset`].
pub const PRESETS: [&str; 4] = ["linear", "mlp", "simple-cnn", "mnist-cnn"];

/// Hidden width of the `mlp` preset.
pub const MLP_HIDDEN: usize = 256;

/// Stream tag so initialisation never shares numbers with shuffling or synthetic data.
const INIT_STREAM: u64 = 0x494e_4954; // "INIT"

/// A layer as described, before shapes are known.
#[derive(Clone, Copy, Debug)]
enum Desc {
    Linear {
        out: usize,
        bias: bool,
    },
    Conv2d {
        out: usize,
        kernel: usize,
        stride: usize,
        padding: usize,
        bias: bool,
    },
    Relu,
    Gelu,
    MaxPool2d {
        kernel: usize,
        stride: usize,
    },
    Flatten,
}

impl Desc {
    fn kind(&self) -> &'static str {
        match self {
            Desc::Linear { .. } => "linear",
            Desc::Conv2d { .. } => "conv2d",
            Desc::Relu => "relu",
            Desc::Gelu => "gelu",
            Desc::MaxPool2d { .. } => "maxpool2d",
            Desc::Flatten => "flatten",
        }
    }
}

fn default_true() -> bool {
    true
}
fn default_one() -> usize {
    1
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LinearJson {
    out: usize,
    #[serde(default = "default_true")]
    bias: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Conv2dJson {
    out: usize,
    kernel: usize,
    #[serde(default = "default_one")]
    stride: usize,
    #[serde(default)]
    padding: usize,
    #[serde(default = "default_true")]
    bias: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MaxPoolJson {
    kernel: usize,
    stride: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EmptyJson {}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
enum LayerJson {
    Linear(LinearJson),
    Conv2d(Conv2dJson),
    Relu(EmptyJson),
    Gelu(EmptyJson),
    Maxpool2d(MaxPoolJson),
    Flatten(EmptyJson),
}

impl From<LayerJson> for Desc {
    fn from(layer: LayerJson) -> Desc {
        match layer {
            LayerJson::Linear(l) => Desc::Linear {
                out: l.out,
                bias: l.bias,
            },
            LayerJson::Conv2d(c) => Desc::Conv2d {
                out: c.out,
                kernel: c.kernel,
                stride: c.stride,
                padding: c.padding,
                bias: c.bias,
            },
            LayerJson::Relu(_) => Desc::Relu,
            LayerJson::Gelu(_) => Desc::Gelu,
            LayerJson::Maxpool2d(m) => Desc::MaxPool2d {
                kernel: m.kernel,
                stride: m.stride.unwrap_or(m.kernel),
            },
            LayerJson::Flatten(_) => Desc::Flatten,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelJson {
    input: Vec<usize>,
    layers: Vec<serde_json::Value>,
}

/// Most elements one tensor (per-sample activation or parameter) may have: kernels index
/// with `u32`. Shapes beyond it, or whose sizes overflow, are description errors.
pub const MAX_ELEMENTS: u64 = u32::MAX as u64;

/// Product of `dims` when it is at most [`MAX_ELEMENTS`].
fn checked_numel(dims: &[usize]) -> Option<usize> {
    dims.iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n as u64 <= MAX_ELEMENTS)
}

fn positive(value: usize, what: &str) -> std::result::Result<(), String> {
    if value == 0 {
        Err(format!("{what} must be at least 1"))
    } else {
        Ok(())
    }
}

fn chw(kind: &str, input: &[usize]) -> std::result::Result<(usize, usize, usize), String> {
    match *input {
        [c, h, w] => Ok((c, h, w)),
        _ => Err(format!(
            "{kind} needs a per-sample input [channels, height, width], got {input:?} ({}-D)",
            input.len()
        )),
    }
}

/// Resolves one layer against its input shape.
fn resolve(desc: Desc, input: &[usize]) -> std::result::Result<(LayerSpec, Vec<usize>), String> {
    match desc {
        Desc::Linear { out, bias } => {
            positive(out, "`out`")?;
            let &[in_features] = input else {
                return Err(format!(
                    "linear takes a 1-D input per sample, got {input:?} ({}-D); add {{\"flatten\": {{}}}} before it",
                    input.len()
                ));
            };
            Ok((
                LayerSpec::Linear {
                    in_features,
                    out_features: out,
                    bias,
                },
                vec![out],
            ))
        }
        Desc::Conv2d {
            out,
            kernel,
            stride,
            padding,
            bias,
        } => {
            positive(out, "`out`")?;
            positive(kernel, "`kernel`")?;
            positive(stride, "`stride`")?;
            let (c, h, w) = chw("conv2d", input)?;
            let padded = |d: usize| {
                padding
                    .checked_mul(2)
                    .and_then(|p| p.checked_add(d))
                    .ok_or_else(|| format!("padding {padding} is too large"))
            };
            let (ph, pw) = (padded(h)?, padded(w)?);
            if kernel > ph || kernel > pw {
                return Err(format!(
                    "kernel {kernel}×{kernel} is larger than the padded input {ph}×{pw} (input {h}×{w}, padding {padding})"
                ));
            }
            Ok((
                LayerSpec::Conv2d {
                    in_channels: c,
                    out_channels: out,
                    kernel,
                    stride,
                    padding,
                    bias,
                },
                vec![out, (ph - kernel) / stride + 1, (pw - kernel) / stride + 1],
            ))
        }
        Desc::Relu => Ok((LayerSpec::Relu, input.to_vec())),
        Desc::Gelu => Ok((LayerSpec::Gelu, input.to_vec())),
        Desc::MaxPool2d { kernel, stride } => {
            positive(kernel, "`kernel`")?;
            positive(stride, "`stride`")?;
            let (c, h, w) = chw("maxpool2d", input)?;
            if kernel > h || kernel > w {
                return Err(format!(
                    "kernel {kernel}×{kernel} is larger than the input {h}×{w}"
                ));
            }
            Ok((
                LayerSpec::MaxPool2d { kernel, stride },
                vec![c, (h - kernel) / stride + 1, (w - kernel) / stride + 1],
            ))
        }
        Desc::Flatten => Ok((
            LayerSpec::Flatten,
            vec![checked_numel(input).ok_or_else(|| too_large(input))?],
        )),
    }
}

fn too_large(shape: &[usize]) -> String {
    format!("shape {shape:?} has more than {MAX_ELEMENTS} elements")
}

/// Checks a resolved layer's output and parameter sizes against [`MAX_ELEMENTS`].
fn check_sizes(spec: &LayerSpec, output: &[usize]) -> std::result::Result<(), String> {
    checked_numel(output).ok_or_else(|| too_large(output))?;
    if let Some((weight, _, _)) = spec.weight() {
        checked_numel(&weight).ok_or_else(|| format!("weight {}", too_large(&weight)))?;
    }
    Ok(())
}

impl ModelSpec {
    /// Resolves named layer descriptions in order; errors name the layer's index and name.
    fn build(name: &str, input_shape: &[usize], layers: &[(String, Desc)]) -> Result<ModelSpec> {
        if input_shape.is_empty() || input_shape.contains(&0) {
            return Err(Error::model(format!(
                "{name}: input shape {input_shape:?} must be non-empty with no zero dimension"
            )));
        }
        if checked_numel(input_shape).is_none() {
            return Err(Error::model(format!(
                "{name}: input {}",
                too_large(input_shape)
            )));
        }
        if layers.is_empty() {
            return Err(Error::model(format!("{name}: the model has no layers")));
        }
        let mut shape = input_shape.to_vec();
        let mut resolved = Vec::with_capacity(layers.len());
        for (index, (layer_name, desc)) in layers.iter().enumerate() {
            let (spec, output_shape) = resolve(*desc, &shape)
                .and_then(|(spec, out)| check_sizes(&spec, &out).map(|()| (spec, out)))
                .map_err(|msg| {
                    let label = if *layer_name == index.to_string() {
                        String::new()
                    } else {
                        format!(" `{layer_name}`")
                    };
                    Error::model(format!(
                        "{name}: layer {index}{label} ({}): {msg}",
                        desc.kind()
                    ))
                })?;
            resolved.push(Layer {
                spec,
                name: layer_name.clone(),
                input_shape: shape,
                output_shape: output_shape.clone(),
            });
            shape = output_shape;
        }
        Ok(ModelSpec {
            name: name.to_string(),
            input_shape: input_shape.to_vec(),
            layers: resolved,
        })
    }

    /// Parses a JSON description (see the module docs). Unknown layer kinds or fields,
    /// impossible shapes and zero sizes are errors naming the layer's index.
    pub fn from_json(json: &str) -> Result<ModelSpec> {
        let model: ModelJson = serde_json::from_str(json).map_err(|e| {
            Error::model(format!(
                "json: {e} (expected {{\"input\": [C, H, W] or [features], \"layers\": [...]}})"
            ))
        })?;
        let layers = model
            .layers
            .into_iter()
            .enumerate()
            .map(|(index, value)| {
                let layer: LayerJson = serde_json::from_value(value).map_err(|e| {
                    Error::model(format!(
                        "json: layer {index}: {e} (a layer is one of {{\"linear\": {{...}}}}, \
                         {{\"conv2d\": {{...}}}}, {{\"relu\": {{}}}}, {{\"gelu\": {{}}}}, \
                         {{\"maxpool2d\": {{...}}}}, {{\"flatten\": {{}}}})"
                    ))
                })?;
                Ok((index.to_string(), Desc::from(layer)))
            })
            .collect::<Result<Vec<_>>>()?;
        ModelSpec::build("json", &model.input, &layers)
    }

    /// Per-sample output shape (of the last layer).
    pub fn output_shape(&self) -> &[usize] {
        self.layers
            .last()
            .map_or(&self.input_shape, |l| &l.output_shape)
    }

    /// Every parameter in PyTorch `state_dict` order.
    pub fn parameters(&self) -> Vec<ParamSpec> {
        self.layers.iter().flat_map(Layer::parameters).collect()
    }

    /// Total number of parameter values.
    pub fn num_parameters(&self) -> usize {
        self.parameters().iter().map(ParamSpec::numel).sum()
    }

    /// Checks that the model fits the data: its input is the data's sample shape and its
    /// output is `[output_dim]` (the class count or the target width).
    pub fn check_data(&self, sample_shape: &[usize], output_dim: usize) -> Result<()> {
        if self.input_shape != sample_shape {
            return Err(Error::model(format!(
                "{}: the model takes input {:?} per sample but the data's samples are {sample_shape:?}",
                self.name, self.input_shape
            )));
        }
        if self.output_shape() != [output_dim] {
            return Err(Error::model(format!(
                "{}: the model's output is {:?} per sample but the data needs [{output_dim}] \
                 (classes or target width)",
                self.name,
                self.output_shape()
            )));
        }
        Ok(())
    }

    /// PyTorch's default initialisation (`reset_parameters` of Linear and Conv2d), from a
    /// seeded generator: weight ~ U(-b, b) with b = gain · sqrt(3 / fan_in), gain =
    /// sqrt(2 / (1 + a²)), a = √5 (kaiming_uniform_), so b = 1/sqrt(fan_in); bias ~
    /// U(-1/sqrt(fan_in), 1/sqrt(fan_in)). Drawn in `state_dict` order from one stream;
    /// deterministic per seed on every platform, but not torch's RNG stream.
    pub fn init_params(&self, seed: u64) -> Vec<(String, Vec<f32>)> {
        let mut rng = Rng::from_words(&[seed, INIT_STREAM]);
        let mut out = Vec::new();
        for layer in &self.layers {
            let Some((_, fan_in, _)) = layer.spec.weight() else {
                continue;
            };
            let bound = init_bound(fan_in);
            for param in layer.parameters() {
                let values = (0..param.numel())
                    .map(|_| rng.uniform(-bound, bound))
                    .collect();
                out.push((param.name, values));
            }
        }
        out
    }

    /// One line per layer: name, PyTorch repr, input → output shape.
    pub fn summary(&self) -> String {
        let mut s = format!("{} (input {:?})\n", self.name, self.input_shape);
        for layer in &self.layers {
            s.push_str(&format!(
                "  ({}): {}  {:?} -> {:?}\n",
                layer.name, layer.spec, layer.input_shape, layer.output_shape
            ));
        }
        s.push_str(&format!("  parameters: {}\n", self.num_parameters()));
        s
    }
}

/// The uniform bound of PyTorch's default init for `fan_in`, computed as PyTorch does:
/// kaiming_uniform_ with a = √5 for weights (gain · sqrt(3/fan_in)), 1/sqrt(fan_in) for
/// biases; the two agree.
pub fn init_bound(fan_in: usize) -> f32 {
    let a = 5f64.sqrt();
    let gain = (2.0 / (1.0 + a * a)).sqrt();
    (gain * (3.0 / fan_in as f64).sqrt()) as f32
}

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
pub fn preset(name: &str, input_shape: &[usize], output_dim: usize) -> Result<ModelSpec> {
    if output_dim == 0 {
        return Err(Error::model(format!(
            "{name}: output size must be at least 1"
        )));
    }
    let named = |n: &str, d: Desc| (n.to_string(), d);
    let linear = |out| Desc::Linear { out, bias: true };
    let conv = |out| Desc::Conv2d {
        out,
        kernel: 3,
        stride: 1,
        padding: 1,
        bias: true,
    };
    let pool = Desc::MaxPool2d {
        kernel: 2,
        stride: 2,
    };
    let layers = match name {
        "linear" => {
            let mut layers = Vec::new();
            if input_shape.len() > 1 {
                layers.push(named("flatten", Desc::Flatten));
            }
            layers.push(named("linear", linear(output_dim)));
            layers
        }
        "mlp" => vec![
            named("0", Desc::Flatten),
            named("1", linear(MLP_HIDDEN)),
            named("2", Desc::Relu),
            named("3", linear(output_dim)),
        ],
        "simple-cnn" | "mnist-cnn" => vec![
            named("conv1", conv(32)),
            named("relu", Desc::Relu),
            named("pool", pool),
            named("conv2", conv(64)),
            named("relu", Desc::Relu),
            named("pool", pool),
            named("flatten", Desc::Flatten),
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

/// Build a model from Rust, layer by layer, named like `torch.nn.Sequential` (`0`, `1`, …):
///
/// ```
/// # use webgpu_amp::nn::spec::ModelSpec;
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
#[derive(Clone, Debug)]
pub struct SequentialBuilder {
    input_shape: Vec<usize>,
    layers: Vec<Desc>,
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
    fn push(mut self, desc: Desc) -> Self {
        self.layers.push(desc);
        self
    }

    /// `nn.Linear(in, out)` with bias.
    pub fn linear(self, out: usize) -> Self {
        self.push(Desc::Linear { out, bias: true })
    }

    pub fn linear_with_bias(self, out: usize, bias: bool) -> Self {
        self.push(Desc::Linear { out, bias })
    }

    /// `nn.Conv2d(in, out, kernel, stride, padding)` with bias.
    pub fn conv2d(self, out: usize, kernel: usize, stride: usize, padding: usize) -> Self {
        self.push(Desc::Conv2d {
            out,
            kernel,
            stride,
            padding,
            bias: true,
        })
    }

    pub fn relu(self) -> Self {
        self.push(Desc::Relu)
    }

    /// `nn.GELU(approximate='tanh')`.
    pub fn gelu(self) -> Self {
        self.push(Desc::Gelu)
    }

    pub fn maxpool2d(self, kernel: usize, stride: usize) -> Self {
        self.push(Desc::MaxPool2d { kernel, stride })
    }

    pub fn flatten(self) -> Self {
        self.push(Desc::Flatten)
    }

    /// Resolve shapes; errors name the layer like the JSON path does.
    pub fn build(self) -> Result<ModelSpec> {
        let named: Vec<(String, Desc)> = self
            .layers
            .into_iter()
            .enumerate()
            .map(|(i, d)| (i.to_string(), d))
            .collect();
        ModelSpec::build("sequential", &self.input_shape, &named)
    }
}
