//! What a data set is, for a resume: its name (where it was read) and a hash of what was
//! read, so a resume on other contents of the same size is told apart from the same data.

use super::{Dataset, Inputs, Labels};

/// 64-bit FNV-1a, word by word (the offset basis and prime of FNV-1a).
struct Hasher(u64);

impl Hasher {
    fn new() -> Self {
        Hasher(0xcbf2_9ce4_8422_2325)
    }
    fn word(&mut self, w: u32) {
        self.0 = (self.0 ^ w as u64).wrapping_mul(0x0000_0100_0000_01b3);
    }
    fn words(&mut self, ws: impl IntoIterator<Item = u32>) {
        for w in ws {
            self.word(w);
        }
    }
    fn len(&mut self, n: usize) {
        self.word(n as u32);
        self.word((n as u64 >> 32) as u32);
    }
}

impl Dataset {
    /// `fnv64:<16 hex digits>` of what a run reads: the sample shape, every input (f32 bits or
    /// token ids) and every label or target, in file order. Reading the same file again gives
    /// the same hash; other contents of the same size give another (with near certainty).
    pub fn content_hash(&self) -> String {
        let mut h = Hasher::new();
        h.len(self.n);
        h.len(self.sample_shape.len());
        for &d in &self.sample_shape {
            h.len(d);
        }
        match &self.x {
            Inputs::Features(x) => {
                h.len(x.len());
                h.words(x.iter().map(|v| v.to_bits()));
            }
            Inputs::Tokens { ids, .. } => {
                h.len(ids.covered().len());
                h.words(ids.covered().iter().copied());
            }
        }
        match &self.y {
            Labels::Classes {
                labels,
                num_classes,
            } => {
                h.len(*num_classes);
                h.words(labels.iter().copied());
            }
            Labels::Targets { values, dim } => {
                h.len(*dim);
                h.words(values.iter().map(|v| v.to_bits()));
            }
            Labels::Tokens {
                targets,
                num_classes,
            } => {
                h.len(*num_classes);
                h.words(targets.covered().iter().copied());
            }
        }
        format!("fnv64:{:016x}", h.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(x: Vec<f32>, labels: Vec<u32>) -> Dataset {
        let labels = Labels::Classes {
            labels,
            num_classes: 3,
        };
        Dataset::new("t", x, vec![2], labels).unwrap()
    }

    #[test]
    fn the_same_contents_hash_alike_and_other_contents_not() {
        let a = set(vec![1.0, 2.0, 3.0, 4.0], vec![0, 1]);
        assert_eq!(
            a.content_hash(),
            set(vec![1.0, 2.0, 3.0, 4.0], vec![0, 1]).content_hash()
        );
        assert_ne!(
            a.content_hash(),
            set(vec![1.0, 2.0, 3.0, 5.0], vec![0, 1]).content_hash()
        );
        assert_ne!(
            a.content_hash(),
            set(vec![1.0, 2.0, 3.0, 4.0], vec![1, 0]).content_hash()
        );
        assert!(a.content_hash().starts_with("fnv64:"));
    }
}
