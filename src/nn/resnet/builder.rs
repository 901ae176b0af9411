//! The ResNet's layers, as kuangliu's `ResNet` and `BasicBlock` build their modules: the stem
//! (`conv1`, `bn1`, ReLU), `layerN.M` basic blocks, global average pooling, `linear`.

use super::{MAX_RESNET_BLOCKS, ResNetConfig};
use crate::nn::layers::LayerConfig;
use crate::nn::layers::avgpool::AdaptiveAvgPool2dConfig;
use crate::nn::layers::batchnorm::{BatchNorm2dConfig, BatchNormFields};
use crate::nn::layers::conv2d::Conv2dConfig;
use crate::nn::layers::flatten::FlattenConfig;
use crate::nn::layers::linear::LinearConfig;
use crate::nn::layers::pool::MaxPool2dConfig;
use crate::nn::layers::residual::residual;
use crate::nn::layers::unary::UnaryConfig;
use crate::ops::unary;
use crate::{Error, Result};

/// One layer config with its module name.
pub type Named = (String, Box<dyn LayerConfig>);

fn named(name: impl Into<String>, config: impl LayerConfig + 'static) -> Named {
    (name.into(), Box::new(config))
}

/// A bias-free square convolution, as every convolution of kuangliu's ResNet.
fn conv(out: usize, kernel: usize, stride: usize) -> Conv2dConfig {
    Conv2dConfig {
        out,
        kernel,
        stride,
        padding: kernel / 2,
        bias: false,
    }
}

fn bn() -> BatchNorm2dConfig {
    BatchNorm2dConfig(BatchNormFields::default())
}

fn relu() -> UnaryConfig {
    UnaryConfig::new(&unary::RELU)
}

impl ResNetConfig {
    /// The layers, named as kuangliu's modules (the ReLUs, `F.relu` there, are named after
    /// the block they end); [`crate::nn::ModelSpec::of_family`] resolves them.
    pub fn layers(&self, name: &str) -> Result<Vec<Named>> {
        let err = |m: String| Error::model(format!("{name}: {m}"));
        if self.widths.is_empty() || self.widths.len() != self.blocks.len() {
            return Err(err(format!(
                "widths {:?} and blocks {:?} must name the same stages, at least one",
                self.widths, self.blocks
            )));
        }
        for (what, v) in [
            ("num_classes", self.num_classes),
            ("in_channels", self.in_channels),
            ("image_size", self.image_size),
        ]
        .into_iter()
        .chain(self.widths.iter().map(|&w| ("a width", w)))
        .chain(self.blocks.iter().map(|&b| ("a stage's blocks", b)))
        {
            if v == 0 {
                return Err(err(format!("{what} must be at least 1")));
            }
        }
        let total = self
            .blocks
            .iter()
            .try_fold(0usize, |a, &b| a.checked_add(b));
        if total.is_none_or(|t| t > MAX_RESNET_BLOCKS) {
            return Err(err(format!(
                "blocks {:?}: a ResNet may have at most {MAX_RESNET_BLOCKS} in all",
                self.blocks
            )));
        }
        let mut layers = vec![
            named("conv1", conv(self.widths[0], 3, 1)),
            named("bn1", bn()),
            named("relu", relu()),
        ];
        if self.stem_pool > 0 {
            layers.push(named(
                "maxpool",
                MaxPool2dConfig {
                    kernel: self.stem_pool,
                    stride: None,
                },
            ));
        }
        let mut in_planes = self.widths[0];
        for (s, (&planes, &blocks)) in self.widths.iter().zip(&self.blocks).enumerate() {
            for b in 0..blocks {
                // Each stage after the first halves the image in its first block.
                let stride = if s > 0 && b == 0 { 2 } else { 1 };
                let block = format!("layer{}.{b}", s + 1);
                let branch = vec![
                    named("conv1", conv(planes, 3, stride)),
                    named("bn1", bn()),
                    named("relu", relu()),
                    named("conv2", conv(planes, 3, 1)),
                    named("bn2", bn()),
                ];
                // kuangliu's `shortcut`: a projection where the shape changes.
                let shortcut = if stride != 1 || in_planes != planes {
                    vec![
                        named("shortcut.0", conv(planes, 1, stride)),
                        named("shortcut.1", bn()),
                    ]
                } else {
                    Vec::new()
                };
                layers.push(named(block.clone(), residual(branch, shortcut)));
                layers.push(named(format!("{block}.relu"), relu()));
                in_planes = planes;
            }
        }
        // `F.avg_pool2d(out, 4)` on kuangliu's 4×4 map: the global average either way.
        layers.push(named("avgpool", AdaptiveAvgPool2dConfig { output: 1 }));
        layers.push(named("flatten", FlattenConfig {}));
        layers.push(named("linear", LinearConfig::new(self.num_classes, true)));
        Ok(layers)
    }
}
