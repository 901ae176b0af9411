//! A small seeded PRNG, identical on every platform (native and wasm32).
//!
//! xoshiro256++ (Blackman & Vigna) seeded through SplitMix64. Everything that must be
//! reproducible — shuffling, synthetic data, parameter initialisation — draws from it, so the
//! same seed gives the same bits everywhere. It is *not* PyTorch's RNG stream: the same seed
//! gives different numbers than `torch.manual_seed` would.

/// SplitMix64's output function: a good 64-bit mixer, used to expand seeds.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// xoshiro256++ generator.
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    /// A generator for one seed.
    pub fn new(seed: u64) -> Self {
        Self::from_words(&[seed])
    }

    /// A generator for a tuple of words (e.g. `[seed, epoch, purpose]`): each tuple gives an
    /// independent-looking stream, so epochs and purposes never share numbers.
    pub fn from_words(words: &[u64]) -> Self {
        let mut h = 0x6A09_E667_F3BC_C908_u64 ^ words.len() as u64;
        for &w in words {
            let mut st = h ^ w;
            h = splitmix64(&mut st);
        }
        let mut st = h;
        let s = [
            splitmix64(&mut st),
            splitmix64(&mut st),
            splitmix64(&mut st),
            splitmix64(&mut st),
        ];
        Rng { s }
    }

    pub fn next_u64(&mut self) -> u64 {
        let result = (self.s[0].wrapping_add(self.s[3]))
            .rotate_left(23)
            .wrapping_add(self.s[0]);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in [0, 1) with 24 random bits (every value exactly representable in f32).
    pub fn next_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 * (1.0 / (1u32 << 24) as f32)
    }

    /// Uniform in [low, high): `low + (high - low) * u`, like `torch.nn.init.uniform_`.
    pub fn uniform(&mut self, low: f32, high: f32) -> f32 {
        let v = low + (high - low) * self.next_f32();
        // Rounding can land exactly on `high`; keep the half-open interval.
        if v >= high { low } else { v }
    }

    /// Uniform integer in [0, bound) without modulo bias (Lemire's multiply-and-reject).
    /// `bound` must be > 0.
    pub fn below(&mut self, bound: u64) -> u64 {
        debug_assert!(bound > 0);
        let threshold = bound.wrapping_neg() % bound;
        loop {
            let m = (self.next_u64() as u128) * (bound as u128);
            if (m as u64) >= threshold {
                return (m >> 64) as u64;
            }
        }
    }

    /// Standard normal sample by the Box–Muller transform, computed in f64.
    pub fn normal(&mut self) -> f64 {
        // 1 - u lies in (0, 1], so the logarithm is finite.
        let u1 = 1.0 - self.next_f64();
        let u2 = self.next_f64();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// Fisher–Yates shuffle (uniform over permutations).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_reproducible_and_distinct() {
        let a: Vec<u64> = (0..4).map(|_| Rng::new(7).next_u64()).collect();
        assert!(a.iter().all(|&v| v == a[0]));
        let mut r1 = Rng::from_words(&[7, 0]);
        let mut r2 = Rng::from_words(&[7, 1]);
        assert_ne!(r1.next_u64(), r2.next_u64());
    }

    #[test]
    fn xoshiro256pp_reference_outputs() {
        // Reference implementation (prng.di.unimi.it) from state {1, 2, 3, 4}.
        let mut r = Rng { s: [1, 2, 3, 4] };
        assert_eq!(r.next_u64(), 41943041);
        assert_eq!(r.next_u64(), 58720359);
        assert_eq!(r.next_u64(), 3588806011781223);
    }

    #[test]
    fn below_is_in_range_and_covers_it() {
        let mut r = Rng::new(0);
        let mut seen = [false; 10];
        for _ in 0..1000 {
            let v = r.below(10) as usize;
            seen[v] = true;
        }
        assert!(seen.iter().all(|&s| s));
    }

    #[test]
    fn normal_moments() {
        let mut r = Rng::new(3);
        let n = 20000;
        let xs: Vec<f64> = (0..n).map(|_| r.normal()).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n as f64;
        assert!(mean.abs() < 0.03, "mean {mean}");
        assert!((var - 1.0).abs() < 0.05, "var {var}");
    }
}
