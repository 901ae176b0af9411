// ---- GradScaler state words (`#include scaler_state`) -------------------------------------
// The GradScaler's state buffer: 8 words (32 bytes), shared by every kernel of a step that
// reads or writes it (amp::scaler's WORD_* constants name the same offsets).
//   SCALE            f32  the loss backward's seed (`scale(loss)`)
//   GROWTH_TRACKER   i32  clean steps since the last growth or backoff
//   FOUND_INF        u32  1 when this step's gradients held an inf or NaN
//   GROWTH_FACTOR    f32
//   BACKOFF_FACTOR   f32
//   GROWTH_INTERVAL  u32
//   INV_SCALE        f32  1/scale rounded as PyTorch does; written wherever scale is
//   ENABLED          u32  1, or 0 for a disabled scaler (scale 1, found_inf 0)
const STATE_WORDS: u32 = 8u;
const SCALE: u32 = 0u;
const GROWTH_TRACKER: u32 = 1u;
const FOUND_INF: u32 = 2u;
const GROWTH_FACTOR: u32 = 3u;
const BACKOFF_FACTOR: u32 = 4u;
const GROWTH_INTERVAL: u32 = 5u;
const INV_SCALE: u32 = 6u;
const ENABLED: u32 = 7u;
// ---- end GradScaler state words -------------------------------------------------------------
