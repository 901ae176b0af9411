//! The CIFAR ResNets (`resnet18-cifar`, `resnet20-cifar`, `resnet56-cifar`, `resnet-tiny`):
//! a 3×3 stem convolution with BatchNorm and ReLU (no max pool), stages of basic blocks
//! (two 3×3 convolutions with BatchNorm, a residual add, ReLU), global average pooling and a
//! linear head. Names are kuangliu/pytorch-cifar's `models/resnet.py` (`conv1`, `bn1`,
//! `layerN.M.{conv1,bn1,conv2,bn2,shortcut.0,shortcut.1}`, `linear`), so a checkpoint loads
//! into its `ResNet18()` with `load_state_dict(strict=True)`.
//!
//! - `resnet18-cifar`: kuangliu's `ResNet18()` exactly: stages 64/128/256/512 of 2 blocks,
//!   11,173,962 parameters.
//! - `resnet20-cifar`, `resnet56-cifar`: He et al.'s CIFAR ResNets (2016, §4.2): stages
//!   16/32/64 of 3 and 9 blocks. Their shortcut where the shape changes is **option B** (a
//!   1×1 convolution with stride 2 and BatchNorm, kuangliu's `shortcut`), not the paper's
//!   option A (subsample and zero-pad the channels, no parameters): option B is built from
//!   layers this project has and trained by PyTorch users as the same model; option A needs
//!   a subsample-and-pad op of its own. So each has two projections (2,752 parameters) more
//!   than the paper's option A: resnet20-cifar 272,474 (option A: 269,722), resnet56-cifar
//!   855,770 (853,018).
//! - `resnet-tiny`: stages 8/16 of one block each on Fashion-MNIST's 1×28×28, with one
//!   projection shortcut: small enough for CI on a software adapter and for the browser.
//! - `resnet8-fashion`: the smallest of these that reaches 90% on Fashion-MNIST
//!   (BENCHMARKS.md): a 16-channel stem with a 2×2 max pool (`stem_pool`: 28×28 to 14×14),
//!   then stages 16/32/64 of one block each, 1×28×28 input, 77,754 parameters. Its stages work
//!   on 14×14, 7×7 and 4×4 maps, where a CPU adapter spends its time better than on
//!   resnet-tiny's 8 channels at 28×28.
//!
//! JSON: `{"resnet": {"widths": [64, 128, 256, 512], "blocks": [2, 2, 2, 2],
//! "num_classes": 10, "in_channels": 3, "image_size": 32, "stem_pool": 0}}` (those are the defaults:
//! `ResNet18()` on CIFAR-10). Initialisation is PyTorch's defaults, as kuangliu's model uses.

pub mod airbench;
mod builder;
mod names;
pub mod whitening;

use std::sync::Arc;

use serde::Deserialize;

use super::family::{Built, Described, Family, FamilyModel, NameTable, describe_keyed};
use crate::{Error, Result};

/// A CIFAR ResNet of basic blocks.
#[derive(Clone, Debug, Deserialize, PartialEq, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ResNetConfig {
    /// Channels of each stage (the stem has the first stage's).
    #[serde(default = "defaults::widths")]
    pub widths: Vec<usize>,
    /// Basic blocks of each stage.
    #[serde(default = "defaults::blocks")]
    pub blocks: Vec<usize>,
    #[serde(default = "defaults::num_classes")]
    pub num_classes: usize,
    #[serde(default = "defaults::in_channels")]
    pub in_channels: usize,
    /// Height and width of the (square) input image.
    #[serde(default = "defaults::image_size")]
    pub image_size: usize,
    /// A max pool of this kernel and stride after the stem's ReLU, named `maxpool`
    /// (torchvision's ResNets have one; 0, the default, for none, as kuangliu's CIFAR ResNets).
    #[serde(default, skip_serializing_if = "no_stem_pool")]
    pub stem_pool: usize,
}

fn no_stem_pool(kernel: &usize) -> bool {
    *kernel == 0
}

/// The fields of `{"resnet": {...}}`.
pub const RESNET_FIELDS: [&str; 6] = [
    "widths",
    "blocks",
    "num_classes",
    "in_channels",
    "image_size",
    "stem_pool",
];

/// kuangliu's `ResNet18()` on CIFAR-10.
mod defaults {
    pub fn widths() -> Vec<usize> {
        vec![64, 128, 256, 512]
    }
    pub fn blocks() -> Vec<usize> {
        vec![2, 2, 2, 2]
    }
    pub fn num_classes() -> usize {
        10
    }
    pub fn in_channels() -> usize {
        3
    }
    pub fn image_size() -> usize {
        32
    }
}

/// Names accepted by [`resnet_preset`].
pub const RESNET_PRESETS: [&str; 5] = [
    "resnet-tiny",
    "resnet8-fashion",
    "resnet20-cifar",
    "resnet56-cifar",
    "resnet18-cifar",
];

/// Most blocks in all: ResNet-1202's 600 (He et al.'s deepest CIFAR net) and some.
pub const MAX_RESNET_BLOCKS: usize = 1024;

/// Preset `name` with `num_classes` outputs (see the module docs).
pub fn resnet_preset(name: &str, num_classes: usize) -> Result<ResNetConfig> {
    let he = |n| ResNetConfig {
        widths: vec![16, 32, 64],
        blocks: vec![n; 3],
        num_classes,
        in_channels: 3,
        image_size: 32,
        stem_pool: 0,
    };
    match name {
        "resnet18-cifar" => Ok(ResNetConfig {
            num_classes,
            ..ResNetConfig::default()
        }),
        "resnet20-cifar" => Ok(he(3)),
        "resnet56-cifar" => Ok(he(9)),
        "resnet-tiny" => Ok(ResNetConfig {
            widths: vec![8, 16],
            blocks: vec![1, 1],
            num_classes,
            in_channels: 1,
            image_size: 28,
            stem_pool: 0,
        }),
        "resnet8-fashion" => Ok(ResNetConfig {
            widths: vec![16, 32, 64],
            blocks: vec![1, 1, 1],
            num_classes,
            in_channels: 1,
            image_size: 28,
            stem_pool: 2,
        }),
        _ => Err(Error::model(format!(
            "unknown ResNet preset `{name}` (expected one of {})",
            RESNET_PRESETS.join(", ")
        ))),
    }
}

impl Default for ResNetConfig {
    fn default() -> Self {
        ResNetConfig {
            widths: defaults::widths(),
            blocks: defaults::blocks(),
            num_classes: defaults::num_classes(),
            in_channels: defaults::in_channels(),
            image_size: defaults::image_size(),
            stem_pool: 0,
        }
    }
}

/// The ResNet family.
pub struct ResNetFamily;

/// The ResNet family, as [`crate::nn::families::FAMILIES`] lists it.
pub static RESNET: ResNetFamily = ResNetFamily;

impl Family for ResNetFamily {
    fn name(&self) -> &'static str {
        "resnet"
    }

    fn config_name(&self) -> &'static str {
        "ResNet"
    }

    fn presets(&self) -> &'static [&'static str] {
        &RESNET_PRESETS
    }

    /// `resnet-tiny`: small enough for CI on a software adapter and for a browser.
    fn default_preset(&self) -> &'static str {
        "resnet-tiny"
    }

    fn preset(&self, name: &str, output_dim: usize) -> Result<Arc<dyn FamilyModel>> {
        Ok(Arc::new(resnet_preset(name, output_dim)?))
    }

    fn describes(&self, value: &serde_json::Value) -> Result<Option<Described>> {
        describe_keyed::<ResNetConfig>(value, "resnet", "a ResNet", &RESNET_FIELDS)
    }

    fn takes_tokens(&self) -> bool {
        false
    }

    /// CIFAR-10 (`--dataset cifar10`: the data directory's `cifar-10-batches-bin/`).
    fn bench_data(&self) -> &'static str {
        "cifar10"
    }
}

impl FamilyModel for ResNetConfig {
    fn family(&self) -> &'static dyn Family {
        &RESNET
    }

    /// `{"resnet": {the fields}}`.
    fn description(&self) -> serde_json::Value {
        serde_json::json!({ "resnet": self })
    }

    fn tokens(&self) -> Option<super::family::Tokens> {
        None
    }

    /// The model on `[in_channels, image_size, image_size]` images (`_t` is for language
    /// models).
    fn build(&self, name: &str, _t: usize) -> Result<Built> {
        let input = vec![self.in_channels, self.image_size, self.image_size];
        Ok((input, self.layers(name)?))
    }

    fn names(&self) -> NameTable {
        names::KUANGLIU
    }

    /// The same ResNet on square images `[C, H, H]` of the data (its stem takes C channels;
    /// the pooling at the end makes the head the same for any size).
    fn with_input(&self, shape: &[usize]) -> Option<Arc<dyn FamilyModel>> {
        match *shape {
            [channels, h, w] if h == w && channels > 0 && h > 0 => Some(Arc::new(ResNetConfig {
                in_channels: channels,
                image_size: h,
                ..self.clone()
            })),
            _ => None,
        }
    }
}
