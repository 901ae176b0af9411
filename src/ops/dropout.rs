//! Dropout (`shaders/dropout.wgsl`) with a counter-based mask, and its CPU reference.
//!
//! Whether element `index` of dropout site `layer` is kept depends only on
//! (seed, micro-batch counter, layer, index): the 32-bit word `index % 4` of
//! Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11;
//! the generator of Random123 and of PyTorch's CUDA RNG) at counter
//! `(index / 4, layer, counter_lo, counter_hi)` and key `(seed_lo, seed_hi)`; its top 24
//! bits `u` keep the element when `u >= ceil(p · 2^24)`. So masks are the same under every
//! precision and backend and after a resume, nothing is stored between forward and
//! backward, and [`keep`] is the CPU twin the tests compare with bit for bit. (The masks
//! are not PyTorch's: its Philox stream mapping is an implementation detail of CUDA.)
//!
//! Semantics are PyTorch's `nn.Dropout`: kept elements are scaled by 1/(1−p), dropped are
//! 0 (a dropped inf or NaN gives NaN, as `x * mask * scale` does, so overflow stays visible
//! to the GradScaler); in eval mode or with p = 0 the op is the identity. The training flag,
//! seed and counter are read by the kernels from a [`DropoutState`] buffer that the trainer
//! rewrites before each submit, so one planned step serves every micro-batch and both modes.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::gpu::{Arg, KernelDesc, grid_1d};
use crate::gpu::{GpuBuffer, GpuContext, Kernel};
use crate::shader::{Grid, ShaderDecl};
use crate::tensor::Tensor;

pub static SHADER: ShaderDecl = ShaderDecl {
    name: "dropout",
    source: include_str!("../../shaders/dropout.wgsl"),
    structs: &[Params::WGSL],
    consts: &[],
    // Every (x, y) storage pair within one f16 world.
    variants: |shader| {
        Grid::new()
            .each(&["x"])
            .each(&["y"])
            .one_f16_storage()
            .variants(shader, &[])
    },
};
const WG: u32 = 256;

/// Words of the state buffer: `[seed_lo, seed_hi, counter_lo, counter_hi, training, 0, 0, 0]`.
const STATE_WORDS: usize = 8;

/// The words every dropout kernel (and the attention softmax) reads: the seed, the number of
/// micro-batches trained so far and the training flag. One small buffer, written by the
/// trainer before each submit with [`DropoutState::write`] (a queued write, no wait); bound
/// as storage, or as a uniform where a kernel's storage bindings are spent (the fused
/// attention's).
pub struct DropoutState {
    buffer: Arc<GpuBuffer>,
}

impl std::fmt::Debug for DropoutState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DropoutState")
            .field("bytes", &self.buffer.size())
            .finish()
    }
}

impl DropoutState {
    /// A state in eval mode (seed 0, counter 0, training off) until the first write.
    pub fn new(ctx: &GpuContext) -> Self {
        let buffer = alloc_state(ctx, "dropout state");
        let state = DropoutState { buffer };
        state.write(ctx, 0, 0, false);
        state
    }

    pub fn buffer(&self) -> &Arc<GpuBuffer> {
        &self.buffer
    }

    /// Queue the words for the next submit: `counter` is the number of micro-batches trained
    /// so far (so a resumed run draws the masks it would have drawn), `training` false makes
    /// every dropout the identity.
    pub fn write(&self, ctx: &GpuContext, seed: u64, counter: u64, training: bool) {
        ctx.write_buffer(
            &self.buffer,
            0,
            bytemuck::cast_slice(&state_words(seed, counter, training)),
        );
    }
}

fn state_words(seed: u64, counter: u64, training: bool) -> [u32; STATE_WORDS] {
    [
        seed as u32,
        (seed >> 32) as u32,
        counter as u32,
        (counter >> 32) as u32,
        training as u32,
        0,
        0,
        0,
    ]
}

/// The buffer a kernel with optional dropout binds as its dropout state: `state` when
/// `dropout` is on; otherwise the kernel never reads it but the binding must exist, so a
/// small zeroed buffer (an eval-mode state) fills it and no tensor's buffer is bound twice.
pub(crate) fn state_or_placeholder(
    ctx: &GpuContext,
    dropout: Option<DropoutKey>,
    state: Option<&DropoutState>,
) -> Arc<GpuBuffer> {
    match (dropout, state) {
        (Some(_), Some(state)) => state.buffer().clone(),
        _ => alloc_state(ctx, "no dropout state"),
    }
}

/// A state buffer, usable as storage and as a uniform.
fn alloc_state(ctx: &GpuContext, label: &str) -> Arc<GpuBuffer> {
    ctx.alloc(
        label,
        4 * STATE_WORDS as u64,
        wgpu::BufferUsages::STORAGE
            | wgpu::BufferUsages::UNIFORM
            | wgpu::BufferUsages::COPY_SRC
            | wgpu::BufferUsages::COPY_DST,
    )
}

/// One dropout site: its probability and the layer id that keys its masks (distinct sites
/// of one model need distinct ids).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DropoutKey {
    pub p: f32,
    pub layer: u32,
}

impl DropoutKey {
    /// Drop threshold on the 24-bit uniform: ceil(p · 2^24), so P(drop) = threshold / 2^24.
    pub fn threshold(&self) -> u32 {
        threshold(self.p)
    }

    /// Factor applied to kept elements: 1 / (1 − p) (0 when p = 1, when nothing is kept).
    pub fn scale(&self) -> f32 {
        if self.p >= 1.0 {
            0.0
        } else {
            (1.0 / (1.0 - self.p as f64)) as f32
        }
    }

    pub(crate) fn check(&self, op: &'static str) -> Result<()> {
        if !(0.0..=1.0).contains(&self.p) {
            return Err(Error::shape(
                op,
                format!("dropout probability {} is not in [0, 1]", self.p),
            ));
        }
        Ok(())
    }
}

fn threshold(p: f32) -> u32 {
    ((p.clamp(0.0, 1.0) as f64) * 16_777_216.0).ceil() as u32
}

/// Philox4x32-10 (Random123's `philox4x32_R(10, ctr, key)`): four 32-bit words.
pub fn philox4x32_10(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let mulhilo = |a: u32, b: u32| {
        let p = a as u64 * b as u64;
        ((p >> 32) as u32, p as u32)
    };
    let mut c = counter;
    let mut k = key;
    for round in 0..10 {
        if round > 0 {
            k = [
                k[0].wrapping_add(0x9E37_79B9),
                k[1].wrapping_add(0xBB67_AE85),
            ];
        }
        let (hi0, lo0) = mulhilo(0xD251_1F53, c[0]);
        let (hi1, lo1) = mulhilo(0xCD9E_8D57, c[2]);
        c = [hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0];
    }
    c
}

/// The CPU reference of the mask: whether element `index` (< 2^34; tensors have fewer than
/// 2^32 elements) of dropout site `layer` is kept in micro-batch `counter` under `seed`.
pub fn keep(seed: u64, counter: u64, layer: u32, index: u64, p: f32) -> bool {
    let words = philox4x32_10(
        [
            (index >> 2) as u32,
            layer,
            counter as u32,
            (counter >> 32) as u32,
        ],
        [seed as u32, (seed >> 32) as u32],
    );
    (words[(index & 3) as usize] >> 8) >= threshold(p)
}

crate::wgsl_struct! {
    struct Params {
        /// elements
        n: u32,
        /// ceil(p * 2^24): 24-bit uniforms below it are dropped
        threshold: u32,
        /// layer id of this dropout site
        layer: u32,
        /// 1 / (1 - p) (0 when p = 1)
        scale: f32,
    }
}

/// `y = dropout(x)`: x / (1 − p) where [`keep`], else 0; the identity in eval mode or at
/// p = 0. `x` and `y` may have different storages (the result is rounded into y's). The
/// backward is the same kernel: `dx = dropout(dy)` with the forward's key and state words
/// (the same mask and scale).
pub fn dropout(
    ctx: &GpuContext,
    state: &DropoutState,
    key: DropoutKey,
    x: &Tensor,
    y: &Tensor,
) -> Result<Kernel> {
    let op = "dropout";
    key.check(op)?;
    if x.numel() != y.numel() {
        return Err(Error::shape(
            op,
            format!("{:?} and {:?} differ in length", x.shape(), y.shape()),
        ));
    }
    if std::sync::Arc::ptr_eq(x.buffer(), y.buffer()) {
        return Err(Error::shape(
            op,
            "input and output share a buffer; dropout does not run in place".to_string(),
        ));
    }
    let n = u32::try_from(x.numel())
        .map_err(|_| Error::shape(op, format!("{:?} has over 2^32 elements", x.shape())))?;
    let params = Params {
        n,
        threshold: key.threshold(),
        layer: key.layer,
        scale: key.scale(),
    };
    ctx.kernel(
        &KernelDesc::new(&SHADER, "dropout"),
        &[
            ("params", Arg::Uniform(bytemuck::bytes_of(&params))),
            ("x", x.arg()),
            ("y", y.arg()),
            ("dropout_state", Arg::Buffer(state.buffer())),
        ],
        grid_1d(x.numel().div_ceil(4), WG),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random123's known-answer vectors (`tests/kat_vectors`, philox4x32 10).
    #[test]
    fn philox_matches_random123_known_answers() {
        let cases = [
            (
                [0u32; 4],
                [0u32; 2],
                [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8],
            ),
            (
                [u32::MAX; 4],
                [u32::MAX; 2],
                [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd],
            ),
            (
                [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344],
                [0xa4093822, 0x299f31d0],
                [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1],
            ),
        ];
        for (ctr, key, want) in cases {
            assert_eq!(philox4x32_10(ctr, key), want, "ctr {ctr:x?} key {key:x?}");
        }
    }

    #[test]
    fn thresholds_and_scales() {
        assert_eq!(threshold(0.0), 0);
        assert_eq!(threshold(1.0), 1 << 24);
        assert_eq!(threshold(0.5), 1 << 23);
        let k = DropoutKey { p: 0.25, layer: 0 };
        assert_eq!(k.scale(), 1.0 / 0.75);
        assert!(keep(1, 2, 3, 4, 0.0));
        assert!(!keep(1, 2, 3, 4, 1.0));
    }
}
