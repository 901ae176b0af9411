//! The kernels of layers' buffers (`shaders/buffers.wgsl`): the step's commit (or rollback,
//! on a skipped step) of every buffer at once, and an int64 counter's increment. The one
//! mechanism by which a skipped step leaves buffers alone (BatchNorm's running statistics
//! included), with PyTorch's behaviour behind [`OnSkippedStep`].

use std::sync::Arc;

use super::scaler_state::{SCALER_STATE, WORD_FOUND_INF};
use crate::dtype::Storage;
use crate::error::{Error, Result};
use crate::gpu::{Arg, GpuBuffer, GpuContext, Kernel, KernelDesc, grid_1d};
use crate::shader::{ShaderDecl, f32_only};
use crate::tensor::Tensor;

pub static SHADER: ShaderDecl = ShaderDecl {
    name: "buffers",
    source: include_str!("../../shaders/buffers.wgsl"),
    structs: &[Sizes::WGSL],
    consts: &[SCALER_STATE],
    // Raw u32 words only: one variant.
    variants: f32_only,
};
const WG: u32 = 256;

/// What a step the GradScaler skips does to the buffers its forwards updated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnSkippedStep {
    /// Roll them back to their values before the step (the default): a skipped step leaves
    /// BatchNorm's running statistics and counters bit-identical.
    #[default]
    Keep,
    /// Keep the skipped step's updates, as PyTorch's BatchNorm does (pytorch#88474): for
    /// parity runs against PyTorch.
    UpdateAnyway,
}

impl OnSkippedStep {
    /// The names front ends give the two (`--buffers-on-skip`).
    pub const NAMES: [&str; 2] = ["keep", "update"];

    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "keep" => Ok(Self::Keep),
            "update" => Ok(Self::UpdateAnyway),
            other => Err(Error::InvalidArgument(format!(
                "unknown behaviour on skipped steps `{other}` (expected keep or update)"
            ))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Keep => "keep",
            Self::UpdateAnyway => "update",
        }
    }
}

crate::wgsl_struct! {
    struct Sizes {
        /// Words of each copy.
        n: u32,
        /// The counter's first word (count_batches).
        offset: u32,
        /// commit: 1 rolls the working copy back when the GradScaler found inf/NaN
        skip_on_inf: u32,
        _pad2: u32,
    }
}

/// `committed = working`, or on a skipped step (the GradScaler state's found-inf word set)
/// with [`OnSkippedStep::Keep`], `working = committed`: `words` u32 words of each. Recorded
/// after the unscale and before the scale update (which resets found-inf).
pub fn commit(
    ctx: &GpuContext,
    scaler_state: &Arc<GpuBuffer>,
    (committed, working): (&Arc<GpuBuffer>, &Arc<GpuBuffer>),
    words: usize,
    on_skip: OnSkippedStep,
) -> Result<Kernel> {
    const OP: &str = "commit_buffers";
    if Arc::ptr_eq(committed, working) {
        return Err(Error::InvalidArgument(format!(
            "{OP}: the committed and working copies must be two buffers"
        )));
    }
    if scaler_state.size() < 4 * (WORD_FOUND_INF as u64 + 1) {
        return Err(Error::shape(
            OP,
            format!(
                "scaler state of {} bytes has no found-inf word",
                scaler_state.size()
            ),
        ));
    }
    let need = 4 * words as u64;
    if committed.size() < need || working.size() < need {
        return Err(Error::shape(
            OP,
            format!(
                "{words} words to commit, the copies hold {} and {} bytes",
                committed.size(),
                working.size()
            ),
        ));
    }
    let sizes = Sizes {
        n: words as u32,
        skip_on_inf: (on_skip == OnSkippedStep::Keep) as u32,
        ..Default::default()
    };
    ctx.kernel(
        &KernelDesc::new(&SHADER, "commit_buffers"),
        &[
            ("sizes", Arg::Uniform(bytemuck::bytes_of(&sizes))),
            ("state", Arg::Buffer(scaler_state)),
            ("committed", Arg::Buffer(committed)),
            ("working", Arg::Buffer(working)),
        ],
        grid_1d(words, WG),
    )
}

/// `counter += 1`, an int64 counter (a `[2]` u32 view: low word, high word).
pub fn count(ctx: &GpuContext, counter: &Tensor) -> Result<Kernel> {
    if counter.numel() != 2 || counter.storage() != Storage::U32 {
        return Err(Error::shape(
            "count_batches",
            format!(
                "an int64 counter is two u32 words, not {:?} {:?}",
                counter.shape(),
                counter.storage()
            ),
        ));
    }
    let sizes = Sizes {
        n: 2,
        offset: (counter.byte_offset() / 4) as u32,
        ..Default::default()
    };
    ctx.kernel(
        &KernelDesc::new(&SHADER, "count_batches"),
        &[
            ("sizes", Arg::Uniform(bytemuck::bytes_of(&sizes))),
            ("working", Arg::Buffer(counter.buffer())),
        ],
        [1, 1, 1],
    )
}
