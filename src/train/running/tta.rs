//! Flip test-time augmentation (`--tta flip`): validation scores each image by the average of
//! the logits of the image and of its mirror image, airbench's `0.5 · net(x) + 0.5 ·
//! net(x.flip(-1))`. Both forwards, the flip and the average run in the evaluation batch's
//! own command buffer; the loss and accuracy are those of the averaged logits.

use crate::error::{Error, Result};
use crate::gpu::{GpuContext, Kernel};
use crate::nn::Network;
use crate::ops::augment::{average, flip_all};
use crate::tensor::Tensor;

/// The flip and average of one evaluation batch size: the mirrored batch, the logits of the
/// batch as it is (kept while the mirrored one runs) and their average.
pub(in crate::train) struct FlipPlan {
    batch: usize,
    flipped: Tensor,
    logits: Tensor,
    averaged: Tensor,
    flip: Kernel,
    average: Kernel,
}

/// The flip plans per evaluation batch size.
#[derive(Default)]
pub(in crate::train) struct FlipTta {
    planned: Vec<FlipPlan>,
}

impl FlipTta {
    /// The plan for `net` (an evaluation network), made on first use.
    pub(in crate::train) fn plan(&mut self, ctx: &GpuContext, net: &Network) -> Result<&FlipPlan> {
        if let Some(i) = self.planned.iter().position(|p| p.batch == net.batch) {
            return Ok(&self.planned[i]);
        }
        let (input, output) = (&net.input, &net.output);
        if input.shape().len() != 4 {
            return Err(Error::InvalidArgument(format!(
                "--tta flip mirrors images [C, H, W]; this model's samples are {:?}",
                &input.shape()[1..]
            )));
        }
        let like = |label, t: &Tensor| Tensor::zeros_labelled(ctx, label, t.shape(), t.storage());
        let flipped = like("tta flipped batch", input);
        let logits = like("tta logits", output);
        let averaged = like("tta averaged logits", output);
        let flip = flip_all(ctx, input, &flipped)?;
        let average = average(ctx, &logits, output, &averaged)?;
        self.planned.push(FlipPlan {
            batch: net.batch,
            flipped,
            logits,
            averaged,
            flip,
            average,
        });
        Ok(self.planned.last().expect("just pushed"))
    }
}

impl FlipPlan {
    /// Record `net`'s evaluation of its uploaded batch with the flip: the forward and the
    /// flip, the forward of the mirrored batch, the average into the output, then `net`'s
    /// loss and correct count on it. `weight_cast` goes first.
    pub(in crate::train) fn encode(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        net: &Network,
        weight_cast: Option<&Kernel>,
    ) {
        let copy = |encoder: &mut wgpu::CommandEncoder, from: &Tensor, to: &Tensor| {
            // Whole words (an odd count of f16 ends in a padding half).
            let bytes = from.binding_size();
            let (src, dst) = (from.buffer().raw(), to.buffer().raw());
            encoder.copy_buffer_to_buffer(src, from.byte_offset(), dst, to.byte_offset(), bytes);
        };
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            let kernels = weight_cast.into_iter().chain(net.forward_kernels());
            for k in kernels.chain([&self.flip]) {
                k.encode(&mut pass);
            }
        }
        copy(encoder, &net.output, &self.logits);
        copy(encoder, &self.flipped, &net.input);
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            for k in net.forward_kernels().chain([&self.average]) {
                k.encode(&mut pass);
            }
        }
        copy(encoder, &self.averaged, &net.output);
        let mut pass = encoder.begin_compute_pass(&Default::default());
        for k in net.loss_and_count_kernels() {
            k.encode(&mut pass);
        }
    }
}
