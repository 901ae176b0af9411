//! airbench94's net (Keller Jordan's CIFAR-10 speedrun, `airbench94.py`), a family of its own
//! beside the ResNets: its `state_dict` is an `nn.Sequential`'s, parameter for parameter
//! `scripts/gpu_report_torch_models.py`'s `airbench_net`:
//!
//! - `0`: the 2×2 whitening conv, 3 → 24 channels with a bias, no padding; its weight frozen;
//! - `1`: GELU;
//! - `2`, `3`, `4`: conv groups of `widths` (64/256/256), each `conv1` (3×3, same padding, no
//!   bias), `pool` (max pool 2), `norm1` (BatchNorm), `activ` (GELU), `conv2`, `norm2`,
//!   `activ`; every BatchNorm with eps 1e-12, momentum 0.4 in PyTorch's convention (airbench's
//!   `batchnorm_momentum` 0.6 is `1 - momentum`) and its weight frozen at 1;
//! - `5`: max pool 3 (a 3×3 map to 1×1), `6`: flatten, `7`: a linear head without bias,
//!   `8`: the head's output times `scaling` (1/9).
//!
//! A run that starts from the seeded init (no `--init`, no `--resume`) sets the whitening
//! conv's weight as airbench does, from the eigenvectors of the first 5,000 training images'
//! 2×2-patch covariance ([`super::whitening`]).
//! `airbench-tiny` is the same net at widths 8/16/16, for tests.
//!
//! JSON: `{"airbench": {"widths": [64, 256, 256], "bn_momentum": 0.6, "scaling": 0.11111111,
//! "num_classes": 10}}` (the defaults).

use std::sync::Arc;

use serde::Deserialize;

use super::builder::Named;
use super::whitening::{WHITEN_IMAGES, whitening_weight};
use crate::data::Dataset;
use crate::nn::family::{Built, Described, Family, FamilyModel, NameTable, describe_keyed};
use crate::nn::layers::batchnorm::{BatchNorm2dConfig, BatchNormFields};
use crate::nn::layers::conv2d::Conv2dConfig;
use crate::nn::layers::flatten::FlattenConfig;
use crate::nn::layers::linear::LinearConfig;
use crate::nn::layers::pool::MaxPool2dConfig;
use crate::nn::layers::scale::ScaleConfig;
use crate::nn::layers::unary::UnaryConfig;
use crate::ops::unary;
use crate::{Error, Result};

/// airbench94's `hyp['net']`.
#[derive(Clone, Debug, Deserialize, PartialEq, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct AirbenchConfig {
    /// Channels of the three conv groups (`block1`, `block2`, `block3`).
    #[serde(default = "defaults::widths")]
    pub widths: [usize; 3],
    /// airbench's `batchnorm_momentum`: the running statistics keep this share of their
    /// value each step (PyTorch's `momentum` is 1 minus it).
    #[serde(default = "defaults::bn_momentum")]
    pub bn_momentum: f32,
    /// The factor on the head's output (`scaling_factor`).
    #[serde(default = "defaults::scaling")]
    pub scaling: f32,
    #[serde(default = "defaults::num_classes")]
    pub num_classes: usize,
}

const FIELDS: [&str; 4] = ["widths", "bn_momentum", "scaling", "num_classes"];

mod defaults {
    pub fn widths() -> [usize; 3] {
        [64, 256, 256]
    }
    pub fn bn_momentum() -> f32 {
        0.6
    }
    pub fn scaling() -> f32 {
        1.0 / 9.0
    }
    pub fn num_classes() -> usize {
        10
    }
}

/// Its presets: the net, and a small one for tests.
pub const AIRBENCH_PRESETS: [&str; 2] = ["airbench", "airbench-tiny"];

/// Channels out of the whitening conv: the 2×2 patches' 12 eigenvectors and their negatives.
pub const WHITEN_WIDTH: usize = 2 * 3 * 2 * 2;

/// CIFAR-10's images: 3×32×32.
const INPUT: [usize; 3] = [3, 32, 32];

/// Preset `name` with `num_classes` outputs.
pub fn airbench_preset(name: &str, num_classes: usize) -> Result<AirbenchConfig> {
    let widths = match name {
        "airbench" => defaults::widths(),
        "airbench-tiny" => [8, 16, 16],
        _ => {
            return Err(Error::model(format!(
                "unknown airbench preset `{name}` (expected one of {})",
                AIRBENCH_PRESETS.join(", ")
            )));
        }
    };
    Ok(AirbenchConfig {
        widths,
        num_classes,
        ..AirbenchConfig::default()
    })
}

impl Default for AirbenchConfig {
    fn default() -> Self {
        AirbenchConfig {
            widths: defaults::widths(),
            bn_momentum: defaults::bn_momentum(),
            scaling: defaults::scaling(),
            num_classes: defaults::num_classes(),
        }
    }
}

fn named(name: impl Into<String>, config: impl crate::nn::LayerConfig + 'static) -> Named {
    (name.into(), Box::new(config))
}

fn gelu() -> UnaryConfig {
    UnaryConfig::new(&unary::GELU)
}

impl AirbenchConfig {
    /// The layers, named as `nn.Sequential(whiten, GELU, ConvGroup × 3, MaxPool2d(3),
    /// Flatten, Linear, Mul)` names its modules.
    pub fn layers(&self, name: &str) -> Result<Vec<Named>> {
        let err = |m: String| Error::model(format!("{name}: {m}"));
        if self.widths.contains(&0) || self.num_classes == 0 {
            return Err(err(format!(
                "widths {:?} and num_classes {} must be at least 1",
                self.widths, self.num_classes
            )));
        }
        if !(0.0..=1.0).contains(&self.bn_momentum) || !self.scaling.is_finite() {
            return Err(err(format!(
                "bn_momentum {} must be in [0, 1] and scaling {} finite",
                self.bn_momentum, self.scaling
            )));
        }
        let conv = |out, kernel, bias| Conv2dConfig {
            out,
            kernel,
            stride: 1,
            padding: if kernel == 3 { 1 } else { 0 },
            bias,
        };
        let norm = || {
            BatchNorm2dConfig(BatchNormFields {
                // In f64 as Python computes `1 - bn_momentum`, then to f32.
                momentum: Some((1.0 - f64::from(self.bn_momentum)) as f32),
                eps: 1e-12,
                ..BatchNormFields::default()
            })
        };
        let pool = |kernel| MaxPool2dConfig {
            kernel,
            stride: None,
        };
        let mut layers = vec![named("0", conv(WHITEN_WIDTH, 2, true)), named("1", gelu())];
        for (g, &width) in self.widths.iter().enumerate() {
            let group = g + 2;
            layers.extend([
                named(format!("{group}.conv1"), conv(width, 3, false)),
                named(format!("{group}.pool"), pool(2)),
                named(format!("{group}.norm1"), norm()),
                named(format!("{group}.activ"), gelu()),
                named(format!("{group}.conv2"), conv(width, 3, false)),
                named(format!("{group}.norm2"), norm()),
                named(format!("{group}.activ"), gelu()),
            ]);
        }
        layers.extend([
            named("5", pool(3)),
            named("6", FlattenConfig {}),
            named("7", LinearConfig::new(self.num_classes, false)),
            named(
                "8",
                ScaleConfig {
                    factor: self.scaling,
                },
            ),
        ]);
        Ok(layers)
    }
}

/// Our names are the Sequential's own: each row maps a name to itself; `{i}` is a conv
/// group's index (2, 3, 4).
const ROWS: [(&str, &str); 15] = [
    ("0.weight", "0.weight"),
    ("0.bias", "0.bias"),
    ("{i}.conv1.weight", "{i}.conv1.weight"),
    ("{i}.norm1.weight", "{i}.norm1.weight"),
    ("{i}.norm1.bias", "{i}.norm1.bias"),
    ("{i}.norm1.running_mean", "{i}.norm1.running_mean"),
    ("{i}.norm1.running_var", "{i}.norm1.running_var"),
    (
        "{i}.norm1.num_batches_tracked",
        "{i}.norm1.num_batches_tracked",
    ),
    ("{i}.conv2.weight", "{i}.conv2.weight"),
    ("{i}.norm2.weight", "{i}.norm2.weight"),
    ("{i}.norm2.bias", "{i}.norm2.bias"),
    ("{i}.norm2.running_mean", "{i}.norm2.running_mean"),
    ("{i}.norm2.running_var", "{i}.norm2.running_var"),
    (
        "{i}.norm2.num_batches_tracked",
        "{i}.norm2.num_batches_tracked",
    ),
    ("7.weight", "7.weight"),
];

const NAMES: NameTable = NameTable {
    convention: "airbench94",
    rows: &ROWS,
};

/// The airbench family.
pub struct AirbenchFamily;

/// The airbench family, as [`crate::nn::families::FAMILIES`] lists it.
pub static AIRBENCH: AirbenchFamily = AirbenchFamily;

impl Family for AirbenchFamily {
    fn name(&self) -> &'static str {
        "airbench"
    }

    fn config_name(&self) -> &'static str {
        "airbench94 hyp['net']"
    }

    fn presets(&self) -> &'static [&'static str] {
        &AIRBENCH_PRESETS
    }

    fn default_preset(&self) -> &'static str {
        "airbench-tiny"
    }

    fn preset(&self, name: &str, output_dim: usize) -> Result<Arc<dyn FamilyModel>> {
        Ok(Arc::new(airbench_preset(name, output_dim)?))
    }

    fn describes(&self, value: &serde_json::Value) -> Result<Option<Described>> {
        describe_keyed::<AirbenchConfig>(value, "airbench", "an airbench net", &FIELDS)
    }

    fn takes_tokens(&self) -> bool {
        false
    }

    fn bench_data(&self) -> &'static str {
        "cifar10"
    }
}

impl FamilyModel for AirbenchConfig {
    fn family(&self) -> &'static dyn Family {
        &AIRBENCH
    }

    fn description(&self) -> serde_json::Value {
        serde_json::json!({ "airbench": self })
    }

    fn tokens(&self) -> Option<crate::nn::family::Tokens> {
        None
    }

    fn build(&self, name: &str, _t: usize) -> Result<Built> {
        Ok((INPUT.to_vec(), self.layers(name)?))
    }

    fn names(&self) -> NameTable {
        NAMES
    }

    /// airbench's `init_whitening_conv`: the whitening weight from the 2×2 patches of the
    /// first [`WHITEN_IMAGES`] training images ([`super::whitening`]).
    fn init_from_data(&self, init: &mut [(String, Vec<f32>)], train: &Dataset) -> Result<()> {
        let (Some(x), &[c, h, w]) = (train.x.features(), &train.sample_shape[..]) else {
            return Ok(());
        };
        let images = train.n.min(WHITEN_IMAGES);
        let weight = whitening_weight(&x[..images * c * h * w], (c, h, w));
        match init.iter_mut().find(|(name, _)| name == "0.weight") {
            Some((_, values)) if values.len() == weight.len() => *values = weight,
            _ => {
                return Err(Error::model(
                    "airbench: no whitening weight `0.weight` of 24×3×2×2 to initialise",
                ));
            }
        }
        Ok(())
    }

    /// airbench's `requires_grad = False`: the whitening weight and every BatchNorm weight.
    fn frozen(&self) -> Vec<String> {
        let mut frozen = vec!["0.weight".to_string()];
        for g in 2..5 {
            frozen.push(format!("{g}.norm1.weight"));
            frozen.push(format!("{g}.norm2.weight"));
        }
        frozen
    }
}
