//! Synthetic regression data like the tutorials' `x = torch.randn(N, 10)`,
//! `y = torch.randn(N, 1)`.
//!
//! Standard normal values come from Box–Muller over the crate's seeded [`Rng`] (computed in
//! f64, rounded to f32): reproducible for a seed on every platform, but not PyTorch's RNG
//! stream, so the numbers differ from `torch.manual_seed(seed); torch.randn(...)`.
//! `x` is drawn first (row-major), then `y`, from one stream.

use super::{Dataset, Labels, Rng};
use crate::{Error, Result};

/// Stream tag so synthetic data never shares numbers with shuffling or initialisation.
const STREAM: u64 = 0x5359_4e54; // "SYNT"

/// Most values (samples × width) one synthetic tensor may hold: 2^28, 1 GiB of f32. The
/// `synthetic:N` source (10 inputs per sample) allows fewer samples:
/// [`super::DataSource::SYNTHETIC_MAX_N`].
pub const MAX_VALUES: usize = 1 << 28;

/// `n` samples of `x ~ N(0, 1)^in_dim` and `y ~ N(0, 1)^out_dim`, independent (there is
/// nothing to learn beyond the mean, as in the tutorial: it exercises the machinery).
pub fn regression(n: usize, in_dim: usize, out_dim: usize, seed: u64) -> Result<Dataset> {
    if n == 0 || in_dim == 0 || out_dim == 0 {
        return Err(Error::data(format!(
            "synthetic: sizes must be positive (n = {n}, in = {in_dim}, out = {out_dim})"
        )));
    }
    let values = |dim: usize| -> Result<Vec<f32>> {
        let count = n
            .checked_mul(dim)
            .filter(|&c| c <= MAX_VALUES)
            .ok_or_else(|| {
                Error::data(format!(
                    "synthetic: {n} samples × {dim} values is more than the {MAX_VALUES} \
                     values synthetic data may hold"
                ))
            })?;
        let mut v = Vec::new();
        v.try_reserve_exact(count)
            .map_err(|e| Error::data(format!("synthetic: cannot allocate {count} values: {e}")))?;
        Ok(v)
    };
    let (mut x, mut y) = (values(in_dim)?, values(out_dim)?);
    let mut rng = Rng::from_words(&[seed, STREAM]);
    x.extend((0..n * in_dim).map(|_| rng.normal() as f32));
    y.extend((0..n * out_dim).map(|_| rng.normal() as f32));
    Dataset::new(
        format!("synthetic(n={n}, seed={seed})"),
        x,
        vec![in_dim],
        Labels::Targets {
            values: y,
            dim: out_dim,
        },
    )
}
