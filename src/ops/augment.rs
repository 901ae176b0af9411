//! Data augmentation on the GPU (`shaders/augment.wgsl`), recorded in the step's own command
//! buffer with no host round trip: torchvision's `RandomCrop(size, padding=p,
//! padding_mode='constant' | 'reflect')` and `RandomHorizontalFlip()`, airbench's alternating
//! flip and translate, and the flip test-time augmentation of evaluation ([`flip_all`], then
//! [`average`] of the two logits: airbench's `0.5 · net(x) + 0.5 · net(x.flip(-1))`).
//!
//! Each image's random crop and flip are a pure function of (seed, epoch, the image's index in
//! the data set): Philox4x32-10, the dropout masks' counter-based generator
//! ([`super::dropout::philox4x32_10`]), at counter `(sample, epoch, site, 0)` and key
//! `(seed_lo, seed_hi)`. So augmentation gives the same bits run to run, after a resume, and
//! whatever the batch size or the data-parallel split; a different seed gives other batches.
//! The seed and epoch live in a small [`AugmentState`] buffer written before each submit; the
//! batch's data-set indices in a u32 buffer uploaded with the batch. [`transform`] is the CPU
//! twin the tests compare with.
//!
//! airbench's alternating flip: every image draws a side once (from the seed and its index,
//! not the epoch) and is flipped on the epochs of that parity: flipped on even epochs if its
//! side is 1, on odd ones if 0. Half the images each epoch, every image both ways in two.

use std::sync::Arc;

use super::dropout::philox4x32_10;
use crate::error::{Error, Result};
use crate::gpu::{Arg, GpuBuffer, GpuContext, Kernel, KernelDesc, grid_1d};
use crate::shader::{ConstsDecl, Grid, ShaderDecl};
use crate::tensor::Tensor;

pub static SHADER: ShaderDecl = ShaderDecl {
    name: "augment",
    source: include_str!("../../shaders/augment.wgsl"),
    structs: &[Params::WGSL],
    consts: &[AUGMENT],
    // The batch in and out in one storage (any); the two logits in one, their average in
    // theirs or f32.
    variants: |shader| {
        Grid::new()
            .each(&["x", "y", "a", "b"])
            .like_or_f32(&["out"], "a")
            .variants(shader, &[])
    },
};
const WG: u32 = 256;
/// Counter words that set these draws apart from other streams of the same seed.
const SITE_CROP_FLIP: u32 = 0x6175_6731;
const SITE_ALTERNATING: u32 = 0x6175_6732;

/// `#consts augment`: the counter words and the codes of `params.flip_mode`, as the shader
/// names them.
const AUGMENT: ConstsDecl = ConstsDecl {
    name: "augment",
    consts: &[
        ("SITE_CROP_FLIP", SITE_CROP_FLIP),
        ("SITE_ALTERNATING", SITE_ALTERNATING),
        ("FLIP_NONE", Flip::None.mode()),
        ("FLIP_RANDOM", Flip::Random.mode()),
        ("FLIP_ALTERNATING", Flip::Alternating.mode()),
        ("FLIP_ALL", Flip::All.mode()),
    ],
};

/// How a random crop pads the image (torchvision's `padding_mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Padding {
    /// `'constant'` with 0 (torchvision's default).
    Zeros,
    /// `'reflect'`: mirrored without repeating the edge (airbench's translate).
    Reflect,
}

/// A random crop back to the image's size from the image padded by `pad` on every side:
/// shifts of `-pad ..= pad` rows and columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Crop {
    pub pad: usize,
    pub padding: Padding,
}

/// Which images are flipped left to right.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Flip {
    #[default]
    None,
    /// Each image with probability 1/2, drawn afresh every epoch.
    Random,
    /// airbench's alternating flip (see the module docs).
    Alternating,
    /// Every image (flip test-time augmentation).
    All,
}

impl Flip {
    /// The code of `params.flip_mode` (the shader's FLIP_* constants).
    const fn mode(self) -> u32 {
        match self {
            Flip::None => 0,
            Flip::Random => 1,
            Flip::Alternating => 2,
            Flip::All => 3,
        }
    }
}

/// One augmentation: the crop first, then the flip.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Augment {
    pub crop: Option<Crop>,
    pub flip: Flip,
}

/// The draws of one image: output `(r, c)` reads the padded input at `(r + shift_y,
/// c' + shift_x)`, `c'` the column after the flip.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transform {
    pub shift_y: i32,
    pub shift_x: i32,
    pub flip: bool,
}

/// The CPU twin of the shader's draws for the image with data-set index `sample`.
pub fn transform(aug: &Augment, seed: u64, epoch: u32, sample: u32) -> Transform {
    let key = [seed as u32, (seed >> 32) as u32];
    let w = philox4x32_10([sample, epoch, SITE_CROP_FLIP, 0], key);
    let pad = aug.crop.map_or(0, |c| c.pad as u32);
    let shift = |w: u32| ((w as u64 * (2 * pad as u64 + 1)) >> 32) as i32 - pad as i32;
    let (shift_y, shift_x) = if pad > 0 {
        (shift(w[0]), shift(w[1]))
    } else {
        (0, 0)
    };
    let flip = match aug.flip {
        Flip::None => false,
        Flip::Random => w[2] >> 31 == 1,
        Flip::Alternating => {
            let side = philox4x32_10([sample, 0, SITE_ALTERNATING, 0], key)[0] >> 31;
            (side ^ (epoch & 1)) == 1
        }
        Flip::All => true,
    };
    Transform {
        shift_y,
        shift_x,
        flip,
    }
}

/// The words the augmentation kernels read: `[seed_lo, seed_hi, epoch, 0]`, written by the
/// trainer before each submit ([`AugmentState::write`], a queued write, no wait).
pub struct AugmentState {
    buffer: Arc<GpuBuffer>,
}

impl std::fmt::Debug for AugmentState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AugmentState").finish_non_exhaustive()
    }
}

impl AugmentState {
    /// A state at seed 0, epoch 0 until the first write.
    pub fn new(ctx: &GpuContext) -> Self {
        let state = AugmentState {
            buffer: ctx.alloc_storage("augment state", 16),
        };
        state.write(ctx, 0, 0);
        state
    }

    pub fn write(&self, ctx: &GpuContext, seed: u64, epoch: u32) {
        let words = [seed as u32, (seed >> 32) as u32, epoch, 0];
        ctx.write_buffer(&self.buffer, 0, bytemuck::cast_slice(&words));
    }

    pub fn buffer(&self) -> &Arc<GpuBuffer> {
        &self.buffer
    }
}

crate::wgsl_struct! {
    struct Params {
        /// elements
        n: u32,
        channels: u32,
        height: u32,
        width: u32,
        /// the crop's padding (0: no crop)
        pad: u32,
        /// 1: reflect padding; 0: zeros
        reflect: u32,
        flip_mode: u32,
        _pad0: u32,
    }
}

/// `y` = `x [N, C, H, W]` augmented image by image ([`Augment`]); `sample_ids` holds the
/// data-set index of each of the N images (u32), `state` the seed and epoch.
pub fn augment(
    ctx: &GpuContext,
    (x, y): (&Tensor, &Tensor),
    aug: &Augment,
    state: &AugmentState,
    sample_ids: &Arc<GpuBuffer>,
) -> Result<Kernel> {
    const OP: &str = "augment";
    let [n, c, h, w] = *x.shape() else {
        return Err(Error::shape(
            OP,
            format!("the batch must be 4-D (NCHW), not {:?}", x.shape()),
        ));
    };
    if y.shape() != x.shape() || y.storage() != x.storage() {
        return Err(Error::shape(
            OP,
            format!(
                "output {:?} ({}) must match the batch {:?} ({})",
                y.shape(),
                y.storage().name(),
                x.shape(),
                x.storage().name()
            ),
        ));
    }
    if Arc::ptr_eq(x.buffer(), y.buffer()) {
        return Err(Error::shape(OP, "augmentation does not run in place"));
    }
    let numel = u32::try_from(x.numel())
        .map_err(|_| Error::shape(OP, format!("{:?} is over 2^32 values", x.shape())))?;
    if sample_ids.size() < 4 * n as u64 {
        return Err(Error::shape(
            OP,
            format!(
                "sample ids buffer of {} bytes holds fewer than {n} u32 indices",
                sample_ids.size()
            ),
        ));
    }
    let (pad, reflect) = match aug.crop {
        None => (0, false),
        Some(crop) => (crop.pad, crop.padding == Padding::Reflect),
    };
    if pad >= 1 << 16 {
        return Err(Error::InvalidArgument(format!(
            "{OP}: padding {pad} is too large"
        )));
    }
    if reflect && (pad >= h || pad >= w) {
        // PyTorch: "Padding size should be less than the corresponding input dimension".
        return Err(Error::InvalidArgument(format!(
            "{OP}: reflect padding {pad} must be less than the image's {h}x{w}"
        )));
    }
    let params = Params {
        n: numel,
        channels: c as u32,
        height: h as u32,
        width: w as u32,
        pad: pad as u32,
        reflect: reflect as u32,
        flip_mode: aug.flip.mode(),
        ..Default::default()
    };
    ctx.kernel(
        &KernelDesc::new(&SHADER, "augment"),
        &[
            ("params", Arg::Uniform(bytemuck::bytes_of(&params))),
            ("x", x.arg()),
            ("y", y.arg()),
            ("aug_state", Arg::Buffer(state.buffer())),
            ("sample_ids", Arg::Buffer(sample_ids)),
        ],
        grid_1d(x.numel().div_ceil(2), WG),
    )
}

/// `y = x.flip(-1)`: every image of `x [N, C, H, W]` mirrored left to right (the second
/// input of flip test-time augmentation).
pub fn flip_all(ctx: &GpuContext, x: &Tensor, y: &Tensor) -> Result<Kernel> {
    let aug = Augment {
        crop: None,
        flip: Flip::All,
    };
    // Nothing random: the state and indices are bound but decide nothing.
    let state = AugmentState::new(ctx);
    let ids = ctx.alloc_storage(
        "no sample ids",
        4 * x.shape().first().copied().unwrap_or(1).max(1) as u64,
    );
    augment(ctx, (x, y), &aug, &state, &ids)
}

/// `out = 0.5 · a + 0.5 · b` (the logits of x and of its flip), computed in f32 and stored in
/// `out`'s storage.
pub fn average(ctx: &GpuContext, a: &Tensor, b: &Tensor, out: &Tensor) -> Result<Kernel> {
    const OP: &str = "average";
    if a.shape() != out.shape() || b.shape() != out.shape() {
        return Err(Error::shape(
            OP,
            format!(
                "{:?} and {:?} into {:?}: the shapes must agree",
                a.shape(),
                b.shape(),
                out.shape()
            ),
        ));
    }
    let n = u32::try_from(out.numel())
        .map_err(|_| Error::shape(OP, format!("{:?} is over 2^32 values", out.shape())))?;
    let params = Params {
        n,
        ..Default::default()
    };
    ctx.kernel(
        &KernelDesc::new(&SHADER, "average_pair"),
        &[
            ("params", Arg::Uniform(bytemuck::bytes_of(&params))),
            ("a", a.arg()),
            ("b", b.arg()),
            ("out", out.arg()),
        ],
        grid_1d(out.numel().div_ceil(2), WG),
    )
}
