//! Data-parallel training across processes: `mpirun -np N webgpu-amp train ...` (cargo
//! feature `mpi`). Every rank runs the same planned step on its own adapter, on its shard of
//! every global batch ([`sampler::DistributedSampler`]); after the backward of a step's last
//! micro-batch the flat f32 gradient buffer is summed over the ranks and written back before
//! unscale, clipping and the optimizer (`train::distributed`), so every rank takes the same
//! step and keeps the same parameters.
//!
//! The training code talks to the other ranks only through [`Collective`]: [`Solo`] is the
//! world of one process (what tests use to check that the exchange itself changes no bits),
//! and `mpi::MpiWorld` (feature `mpi`, native only) is Open MPI through the `mpi` crate. The
//! browser build never links MPI.

pub mod sampler;

#[cfg(all(feature = "mpi", not(target_arch = "wasm32")))]
pub mod mpi;

pub use sampler::DistributedSampler;

use crate::error::Result;

/// Host work a collective runs once on this rank while its reduction is in flight (work that
/// does not depend on the result).
pub type Overlap<'a> = &'a mut dyn FnMut();

/// The collective operations data-parallel training needs. Every rank must call the same
/// operations in the same order (they are collectives); a rank that fails ends the whole job
/// (see `mpi::MpiWorld`), so a peer never waits forever.
pub trait Collective {
    /// This process's rank, `0..size()`.
    fn rank(&self) -> usize;
    /// Ranks in the job.
    fn size(&self) -> usize;
    /// What carries the collectives, for summaries ("Open MPI v4.1.4", "one process").
    fn describe(&self) -> String;
    /// Sum `send` over every rank into `recv` (same length), running `overlap` meanwhile.
    fn all_reduce_sum_f32(&self, send: &[f32], recv: &mut [f32], overlap: Overlap) -> Result<()>;
    /// Sum `values` over every rank, in place.
    fn all_reduce_sum_f64(&self, values: &mut [f64]) -> Result<()>;
    /// Logical or of `flag` over every rank.
    fn any(&self, flag: bool) -> Result<bool>;
    /// Rank 0's `values` on every rank.
    fn broadcast_f32(&self, values: &mut [f32]) -> Result<()>;
    /// Every rank's `value`, by rank.
    fn all_gather_u64(&self, value: u64) -> Result<Vec<u64>>;
    /// What a failure report should add about the run's state (which checkpoint is intact);
    /// the training loop updates it after each save.
    fn set_failure_note(&self, _note: String) {}
}

/// Environment variables MPI launchers set for the processes they start: Open MPI's
/// `mpirun`, MPICH's Hydra and Slurm's PMI (`srun --mpi=pmi2`), PMIx.
const LAUNCHER_SIZE_VARS: &[&str] = &["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"];

/// The world size an MPI launcher started this process with, if one did (read from the
/// launcher's environment, before and without initialising MPI).
#[cfg(not(target_arch = "wasm32"))]
pub fn launched_size() -> Option<usize> {
    launched_size_from(|k| std::env::var(k).ok())
}

/// [`launched_size`] over any variable lookup (tests).
pub fn launched_size_from(var: impl Fn(&str) -> Option<String>) -> Option<usize> {
    LAUNCHER_SIZE_VARS
        .iter()
        .find_map(|k| var(k).and_then(|v| v.trim().parse::<usize>().ok()))
}

/// The world of one process: every collective is the identity.
#[derive(Clone, Copy, Debug, Default)]
pub struct Solo;

impl Collective for Solo {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        1
    }
    fn describe(&self) -> String {
        "one process".into()
    }
    fn all_reduce_sum_f32(&self, send: &[f32], recv: &mut [f32], overlap: Overlap) -> Result<()> {
        recv.copy_from_slice(send);
        overlap();
        Ok(())
    }
    fn all_reduce_sum_f64(&self, _values: &mut [f64]) -> Result<()> {
        Ok(())
    }
    fn any(&self, flag: bool) -> Result<bool> {
        Ok(flag)
    }
    fn broadcast_f32(&self, _values: &mut [f32]) -> Result<()> {
        Ok(())
    }
    fn all_gather_u64(&self, value: u64) -> Result<Vec<u64>> {
        Ok(vec![value])
    }
}

/// 64-bit FNV-1a over byte chunks: a cheap fingerprint to check that every rank holds the
/// same state (not a cryptographic hash).
#[derive(Clone, Copy, Debug)]
pub struct Fingerprint(u64);

impl Default for Fingerprint {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Fingerprint {
    pub fn bytes(&mut self, bytes: &[u8]) -> &mut Self {
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
        }
        // Length-delimit, so ("ab", "c") and ("a", "bc") differ.
        for b in (bytes.len() as u64).to_le_bytes() {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
        }
        self
    }

    pub fn f32s(&mut self, values: &[f32]) -> &mut Self {
        self.bytes(bytemuck::cast_slice(values))
    }

    pub fn value(&self) -> u64 {
        self.0
    }
}

/// Ranks whose fingerprint differs from rank 0's.
pub fn differing_ranks(prints: &[u64]) -> Vec<usize> {
    prints
        .iter()
        .enumerate()
        .filter(|(_, p)| **p != prints[0])
        .map(|(r, _)| r)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn solo_is_the_identity() {
        let mut recv = [0.0f32; 3];
        let mut ran = 0;
        Solo.all_reduce_sum_f32(&[1.0, f32::INFINITY, -2.5], &mut recv, &mut || ran += 1)
            .unwrap();
        assert_eq!(recv, [1.0, f32::INFINITY, -2.5]);
        assert_eq!(ran, 1);
        assert!(Solo.any(true).unwrap() && !Solo.any(false).unwrap());
        assert_eq!(Solo.all_gather_u64(7).unwrap(), [7]);
    }

    #[test]
    fn launchers_are_recognised_by_their_environment() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(name, _)| *name == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(launched_size_from(env(&[])), None);
        assert_eq!(
            launched_size_from(env(&[("OMPI_COMM_WORLD_SIZE", "4")])),
            Some(4)
        );
        assert_eq!(launched_size_from(env(&[("PMI_SIZE", "2")])), Some(2));
        assert_eq!(launched_size_from(env(&[("PMIX_SIZE", "x")])), None);
    }

    #[test]
    fn fingerprints_tell_states_apart() {
        let a = Fingerprint::default().f32s(&[1.0, 2.0]).value();
        let b = Fingerprint::default().f32s(&[1.0, 2.0]).value();
        let c = Fingerprint::default().f32s(&[1.0, -2.0]).value();
        let d = Fingerprint::default().bytes(b"ab").bytes(b"c").value();
        let e = Fingerprint::default().bytes(b"a").bytes(b"bc").value();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(d, e);
        assert_eq!(differing_ranks(&[a, b, c]), [2]);
    }
}
