//! A trainer's augmentation settings: crops and flips of the training images in the step
//! (`augmenting.rs`) and flip test-time augmentation of validation (`running/tta.rs`). Apart
//! from `trainer.rs`, which holds their state and must not import this file back.

use super::augmenting::Augmentation;
use crate::gpu::GpuContext;
use crate::ops::augment::Augment;
use crate::train::running::tta::FlipTta;
use crate::train::trainer::Trainer;

impl Trainer {
    /// Train on augmented images from now on (`None`: as they come), each image's crop and
    /// flip drawn from (`seed`, epoch, its data-set index). Each batch then needs
    /// [`Trainer::set_samples`] first.
    pub fn set_augmentation(&mut self, ctx: &GpuContext, augment: Option<Augment>, seed: u64) {
        self.augmentation = augment.map(|a| Augmentation::new(ctx, a, seed));
    }

    pub fn augmentation(&self) -> Option<&Augment> {
        self.augmentation.as_ref().map(Augmentation::augment)
    }

    /// The next micro-batch's images: their data-set indices and the epoch (0-based), which
    /// their crops and flips are drawn from. Ignored without augmentation.
    pub fn set_samples(&mut self, ids: &[u32], epoch: u64) {
        if let Some(a) = &mut self.augmentation {
            a.set_samples(ids, epoch);
        }
    }

    /// Validate on the average of each image's logits and its mirror image's (airbench's
    /// flip test-time augmentation), or on the images alone (`false`, the default).
    pub fn set_flip_tta(&mut self, on: bool) {
        self.flip_tta = on.then(FlipTta::default);
    }

    pub fn flip_tta(&self) -> bool {
        self.flip_tta.is_some()
    }
}
