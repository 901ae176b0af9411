//! The augmentation flags of `train` and `compare`: torchvision's `RandomCrop(size,
//! padding=N, padding_mode=...)` and `RandomHorizontalFlip()`, and airbench's alternating
//! flip, run on the GPU in the step (`ops::augment`); and flip test-time augmentation of
//! validation (`--tta flip`).

use clap::{Args, ValueEnum};
use webgpu_amp::ops::augment::{Augment, Crop, Flip, Padding};
use webgpu_amp::{Error, Result};

use super::numbers::number;

/// `--random-crop-padding`: at least 1 (0 is no crop: leave the flag out), and small
/// enough for the kernel's 16 bits.
pub const CROP_PADDING_RANGE: &str = "1 to 65535";

#[derive(Args, Clone, Debug, Default)]
pub struct AugmentArgs {
    /// Crop each training image at random from the image padded by N pixels on every side,
    /// back to its size (torchvision's `RandomCrop(size, padding=N)`; airbench: 2), drawn
    /// per image and epoch from --seed on the GPU. Default: no crop.
    #[arg(long, value_name = "N", allow_negative_numbers = true,
          value_parser = number::<usize>(CROP_PADDING_RANGE))]
    pub random_crop_padding: Option<usize>,
    /// What fills the crop's padding (with --random-crop-padding N): constant (zeros,
    /// torchvision's default) or reflect (airbench's translate). Default: constant.
    #[arg(long, value_enum)]
    pub padding_mode: Option<PaddingMode>,
    /// Flip training images left to right: random (torchvision's `RandomHorizontalFlip()`:
    /// each image with probability 1/2, drawn afresh every epoch) or alternating (airbench:
    /// each image flipped on every other epoch, half of them each epoch). Default: none.
    #[arg(long, value_enum)]
    pub flip: Option<FlipMode>,
    /// Test-time augmentation of validation: flip scores each image by the average of its
    /// logits and its mirror image's (airbench's `0.5 * net(x) + 0.5 * net(x.flip(-1))`).
    /// Default: none.
    #[arg(long, value_enum)]
    pub tta: Option<TtaMode>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TtaMode {
    None,
    Flip,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PaddingMode {
    Constant,
    Reflect,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum FlipMode {
    None,
    Random,
    Alternating,
}

impl AugmentArgs {
    /// Whether validation runs flip test-time augmentation.
    pub fn flip_tta(&self) -> bool {
        self.tta == Some(TtaMode::Flip)
    }

    /// The augmentation the flags ask for (`None`: none).
    pub fn augment(&self) -> Result<Option<Augment>> {
        if let Some(pad) = self.random_crop_padding
            && !(1..=65535).contains(&pad)
        {
            return Err(Error::InvalidArgument(format!(
                "--random-crop-padding must be {CROP_PADDING_RANGE}, got {pad}"
            )));
        }
        let padding = match (self.padding_mode, self.random_crop_padding) {
            (Some(_), None) => {
                return Err(Error::InvalidArgument(
                    "a padding mode (--padding-mode constant or reflect) needs --random-crop-padding N too"
                        .into(),
                ));
            }
            (Some(PaddingMode::Reflect), Some(_)) => Padding::Reflect,
            _ => Padding::Zeros,
        };
        let crop = self.random_crop_padding.map(|pad| Crop { pad, padding });
        let flip = match self.flip.unwrap_or(FlipMode::None) {
            FlipMode::None => Flip::None,
            FlipMode::Random => Flip::Random,
            FlipMode::Alternating => Flip::Alternating,
        };
        let augment = Augment { crop, flip };
        Ok((augment != Augment::default()).then_some(augment))
    }
}
