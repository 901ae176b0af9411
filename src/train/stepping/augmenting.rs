//! Training on augmented images (torchvision's `RandomCrop(padding=p)` and
//! `RandomHorizontalFlip()`, airbench's alternating flip; `ops::augment`): the batch goes up
//! as it is, into an input of its own, with the data-set index of each of its images; the
//! step's first kernel writes the augmented batch into the network's input, in the step's own
//! command buffer. The host never sees the augmented images and waits for nothing.
//!
//! Each image's crop and flip are a pure function of (seed, epoch, data-set index), so a run
//! gives the same bits every time and after a resume, whatever the batch size; another seed
//! gives other batches.

use std::sync::Arc;

use crate::data::BatchInput;
use crate::error::{Error, Result};
use crate::gpu::{GpuBuffer, GpuContext, Kernel};
use crate::nn::Network;
use crate::ops::augment::{Augment, AugmentState, augment};
use crate::tensor::Tensor;

/// One batch size's augmentation: the un-augmented batch, its images' data-set indices and
/// the kernel that writes the augmented batch into the network's input.
struct Planned {
    batch: usize,
    raw: Tensor,
    sample_ids: Arc<GpuBuffer>,
    kernel: Kernel,
}

/// A trainer's augmentation: what it does, the seed and epoch the kernels read, the next
/// micro-batch's data-set indices and epoch ([`Augmentation::set_samples`]), and the plans
/// per batch size.
pub(in crate::train) struct Augmentation {
    augment: Augment,
    seed: u64,
    state: AugmentState,
    next_ids: Vec<u32>,
    next_epoch: Option<u64>,
    planned: Vec<Planned>,
}

impl Augmentation {
    pub(in crate::train) fn new(ctx: &GpuContext, augment: Augment, seed: u64) -> Self {
        Augmentation {
            augment,
            seed,
            state: AugmentState::new(ctx),
            next_ids: Vec::new(),
            next_epoch: None,
            planned: Vec::new(),
        }
    }

    pub(in crate::train) fn augment(&self) -> &Augment {
        &self.augment
    }

    /// The next micro-batch's images: their indices in the data set and the epoch (0-based).
    pub(in crate::train) fn set_samples(&mut self, ids: &[u32], epoch: u64) {
        self.next_ids.clear();
        self.next_ids.extend_from_slice(ids);
        self.next_epoch = Some(epoch);
    }

    /// Upload `x` (the batch as the data set holds it) and its samples for a step of `net`
    /// (queued writes, no wait), and return the kernel that augments it into `net.input`:
    /// the step's first.
    pub(in crate::train) fn write(
        &mut self,
        ctx: &GpuContext,
        net: &Network,
        x: BatchInput<'_>,
    ) -> Result<&Kernel> {
        let BatchInput::Features(x) = x else {
            return Err(Error::InvalidArgument(
                "augmentation crops and flips images: token batches have none".into(),
            ));
        };
        let Some(epoch) = self.next_epoch.take() else {
            return Err(Error::InvalidArgument(
                "augmentation: each batch needs its images' data-set indices and epoch first \
                 (Trainer::set_samples)"
                    .into(),
            ));
        };
        if self.next_ids.len() != net.batch {
            return Err(Error::shape(
                "augment",
                format!(
                    "{} sample ids for a batch of {}",
                    self.next_ids.len(),
                    net.batch
                ),
            ));
        }
        let epoch = u32::try_from(epoch)
            .map_err(|_| Error::InvalidArgument(format!("augment: epoch {epoch} is past 2^32")))?;
        let i = self.plan(ctx, net)?;
        let planned = &self.planned[i];
        planned.raw.write_f32(ctx, x)?;
        let ids = bytemuck::cast_slice(&self.next_ids);
        ctx.write_buffer(&planned.sample_ids, 0, ids);
        self.state.write(ctx, self.seed, epoch);
        Ok(&planned.kernel)
    }

    /// The augmentation of `net`'s batch size, planned on first use.
    fn plan(&mut self, ctx: &GpuContext, net: &Network) -> Result<usize> {
        if let Some(i) = self.planned.iter().position(|p| p.batch == net.batch) {
            return Ok(i);
        }
        let input = &net.input;
        if input.shape().len() != 4 {
            return Err(Error::InvalidArgument(format!(
                "augmentation crops and flips images [C, H, W]; this model's samples are {:?}",
                &input.shape()[1..]
            )));
        }
        let raw = Tensor::zeros_labelled(
            ctx,
            "batch before augmentation",
            input.shape(),
            input.storage(),
        );
        let sample_ids = ctx.alloc_storage("batch sample ids", 4 * net.batch.max(1) as u64);
        let kernel = augment(ctx, (&raw, input), &self.augment, &self.state, &sample_ids)?;
        self.planned.push(Planned {
            batch: net.batch,
            raw,
            sample_ids,
            kernel,
        });
        Ok(self.planned.len() - 1)
    }

    /// The augmentation kernel of a planned batch size (for profiling).
    pub(in crate::train) fn kernel(&self, batch: usize) -> Option<&Kernel> {
        self.planned
            .iter()
            .find(|p| p.batch == batch)
            .map(|p| &p.kernel)
    }
}
