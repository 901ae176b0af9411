//! Pixel normalisation: bytes to [0, 1], then torchvision's `Normalize((mean,), (std,))`.

/// Per-pixel normalisation `(x - mean) / std` applied after scaling bytes to [0, 1], like
/// torchvision's `transforms.Normalize((mean,), (std,))`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Normalization {
    pub mean: f32,
    pub std: f32,
}

impl Normalization {
    /// The usual MNIST transform: mean 0.1307, std 0.3081 (the training set's statistics).
    pub const MNIST: Normalization = Normalization {
        mean: 0.1307,
        std: 0.3081,
    };
    /// Fashion-MNIST's usual statistics: mean 0.2860, std 0.3530.
    pub const FASHION_MNIST: Normalization = Normalization {
        mean: 0.2860,
        std: 0.3530,
    };

    /// Maps a byte pixel to f32: `byte / 255`, then `(x - mean) / std` when normalising.
    pub fn pixel(normalization: Option<Normalization>, byte: u8) -> f32 {
        let x = byte as f32 / 255.0;
        match normalization {
            Some(n) => (x - n.mean) / n.std,
            None => x,
        }
    }
}

/// Byte pixels to f32 through a 256-entry table (same result as [`Normalization::pixel`]).
pub(crate) fn pixels_to_f32(bytes: &[u8], normalization: Option<Normalization>) -> Vec<f32> {
    let table: Vec<f32> = (0..=255u8)
        .map(|b| Normalization::pixel(normalization, b))
        .collect();
    bytes.iter().map(|&b| table[b as usize]).collect()
}
