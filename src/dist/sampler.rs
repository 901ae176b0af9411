//! PyTorch's `DistributedSampler` over our [`Loader`]'s order: every rank draws the same
//! seeded permutation of the epoch, pads it by wrapping around to a multiple of the world
//! size (`drop_last=False`), and rank `r` takes every `world`-th index starting at `r`. Each
//! rank then batches its shard like the single-process loader does (the last, partial batch
//! kept), so every rank has the same number of batches, of the same sizes, every epoch.
//!
//! Batch `b` of every rank together is global batch `b`: with `world × batch_size` samples
//! from positions `b·world·batch_size ..` of the permutation (rank-interleaved), the samples a
//! single process with batch `world × batch_size` takes as its batch `b` when `world ×
//! batch_size` divides the data set. So `Progress::batch_in_epoch` means the same in both.

use crate::data::{EpochBatches, Loader};
use crate::error::{Error, Result};

/// One rank's share of every epoch. See the module docs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DistributedSampler {
    /// The permutation every rank draws (over the whole data set).
    loader: Loader,
    pub world: usize,
    pub rank: usize,
    pub batch_size: usize,
}

impl DistributedSampler {
    /// `n` samples, `world` ranks, this is `rank`; `batch_size` per rank.
    pub fn new(
        n: usize,
        world: usize,
        rank: usize,
        batch_size: usize,
        shuffle: bool,
        seed: u64,
    ) -> Result<Self> {
        if world == 0 || rank >= world {
            return Err(Error::InvalidArgument(format!(
                "rank {rank} is not in a world of {world} ranks"
            )));
        }
        Ok(Self {
            loader: Loader::new(n, batch_size, shuffle, seed)?,
            world,
            rank,
            batch_size,
        })
    }

    /// Samples each rank sees per epoch: `ceil(n / world)` (PyTorch's `num_samples`).
    pub fn samples_per_rank(&self) -> usize {
        self.loader.n.div_ceil(self.world)
    }

    /// Batches per epoch, the same on every rank.
    pub fn num_batches(&self) -> usize {
        self.samples_per_rank().div_ceil(self.batch_size)
    }

    /// This rank's sample indices for `epoch`, in order: the epoch's permutation padded by
    /// wrapping to `world × samples_per_rank`, every `world`-th entry from `rank`.
    pub fn indices(&self, epoch: u64) -> Vec<u32> {
        let order = self.loader.order(epoch);
        let total = self.samples_per_rank() * self.world;
        (self.rank..total)
            .step_by(self.world)
            .map(|i| order[i % order.len()])
            .collect()
    }

    /// This rank's batches of `epoch`; the last may be smaller (the same size on every rank).
    pub fn batches(&self, epoch: u64) -> EpochBatches {
        EpochBatches::new(self.indices(epoch), self.batch_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_partition_the_epoch_like_pytorch() {
        // 10 samples, 4 ranks: padded to 12 by wrapping (PyTorch pads with the head of the
        // permutation), rank r takes positions r, r+4, r+8.
        let order = Loader::new(10, 1, true, 7).unwrap().order(3);
        let shards: Vec<Vec<u32>> = (0..4)
            .map(|r| {
                DistributedSampler::new(10, 4, r, 2, true, 7)
                    .unwrap()
                    .indices(3)
            })
            .collect();
        for (r, shard) in shards.iter().enumerate() {
            let want: Vec<u32> = [r, r + 4, r + 8].iter().map(|&i| order[i % 10]).collect();
            assert_eq!(shard, &want, "rank {r}");
        }
        let s = DistributedSampler::new(10, 4, 1, 2, true, 7).unwrap();
        assert_eq!(s.samples_per_rank(), 3);
        assert_eq!(s.num_batches(), 2);
        assert_eq!(
            s.batches(3).iter().map(<[u32]>::len).collect::<Vec<_>>(),
            [2, 1]
        );
    }

    #[test]
    fn global_batches_are_the_single_process_batches() {
        // 2 ranks × batch 3 over 12 samples: global batch b is the single-process batch b
        // (batch 6) as a set.
        let single = Loader::new(12, 6, true, 1).unwrap().batches(0);
        let ranks: Vec<EpochBatches> = (0..2)
            .map(|r| {
                DistributedSampler::new(12, 2, r, 3, true, 1)
                    .unwrap()
                    .batches(0)
            })
            .collect();
        for (b, want) in single.iter().enumerate() {
            let mut got: Vec<u32> = ranks.iter().flat_map(|r| r[b].to_vec()).collect();
            let mut want = want.to_vec();
            got.sort_unstable();
            want.sort_unstable();
            assert_eq!(got, want, "global batch {b}");
        }
    }

    #[test]
    fn one_rank_is_the_loader() {
        let loader = Loader::new(11, 4, true, 9).unwrap();
        let s = DistributedSampler::new(11, 1, 0, 4, true, 9).unwrap();
        assert_eq!(s.batches(2), loader.batches(2));
        assert_eq!(s.num_batches(), loader.num_batches());
    }

    #[test]
    fn bad_rank_is_an_error() {
        assert!(DistributedSampler::new(10, 2, 2, 1, false, 0).is_err());
        assert!(DistributedSampler::new(10, 0, 0, 1, false, 0).is_err());
    }
}
