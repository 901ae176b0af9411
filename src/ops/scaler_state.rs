//! The GradScaler's state buffer layout: which 32-bit word holds what. `amp::scaler` owns the
//! buffer and its semantics (the table in its module docs); the layout is here, below it,
//! because kernels of this layer read the state too (the buffers' commit and the histogram).
//! Every shader that reads the state takes these offsets with `#consts scaler_state`, so the
//! Rust and WGSL names of a word cannot disagree.

use crate::shader::ConstsDecl;

/// Words of the state buffer (10 × 32 bits).
pub const STATE_WORDS: usize = 10;
/// f32: the loss backward's seed (`scale(loss)`).
pub const WORD_SCALE: usize = 0;
/// i32: clean steps since the last growth or backoff.
pub const WORD_GROWTH_TRACKER: usize = 1;
/// u32: 1 when this step's gradients held an inf or NaN.
pub const WORD_FOUND_INF: usize = 2;
/// u32: clean steps between two growths.
pub const WORD_GROWTH_INTERVAL: usize = 3;
/// f32: 1/scale rounded as PyTorch does; written wherever scale is.
pub const WORD_INV_SCALE: usize = 4;
/// u32: 1, or 0 for a disabled scaler (scale 1, found_inf 0).
pub const WORD_ENABLED: usize = 5;
/// First of the two words of the f64 growth factor (low word first).
pub const WORD_GROWTH_FACTOR: usize = 6;
/// First of the two words of the f64 backoff factor (low word first).
pub const WORD_BACKOFF_FACTOR: usize = 8;

/// `#consts scaler_state`: the words above under the names the shaders use.
pub const SCALER_STATE: ConstsDecl = ConstsDecl {
    name: "scaler_state",
    consts: &[
        ("STATE_WORDS", STATE_WORDS as u32),
        ("SCALE", WORD_SCALE as u32),
        ("GROWTH_TRACKER", WORD_GROWTH_TRACKER as u32),
        ("FOUND_INF", WORD_FOUND_INF as u32),
        ("GROWTH_INTERVAL", WORD_GROWTH_INTERVAL as u32),
        ("INV_SCALE", WORD_INV_SCALE as u32),
        ("ENABLED", WORD_ENABLED as u32),
        ("GROWTH_FACTOR", WORD_GROWTH_FACTOR as u32),
        ("BACKOFF_FACTOR", WORD_BACKOFF_FACTOR as u32),
    ],
};
