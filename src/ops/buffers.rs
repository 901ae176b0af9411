//! The kernels of layers' buffers (`shaders/buffers.wgsl`): the step's commit (or rollback,
//! on a skipped step) of every buffer at once, and an int64 counter's increment.

use std::sync::Arc;

use crate::dtype::Storage;
use crate::error::{Error, Result};
use crate::gpu::{Arg, GpuBuffer, GpuContext, Kernel, KernelDesc, grid_1d};
use crate::shader::{ShaderDecl, f32_only};
use crate::tensor::Tensor;

pub static SHADER: ShaderDecl = ShaderDecl {
    name: "buffers",
    source: include_str!("../../shaders/buffers.wgsl"),
    structs: &[Sizes::WGSL],
    // Raw u32 words only: one variant.
    variants: f32_only,
};
const WG: u32 = 256;

crate::wgsl_struct! {
    struct Sizes {
        /// Words of each copy.
        n: u32,
        /// The counter's first word (count_batches).
        offset: u32,
        _pad1: u32,
        _pad2: u32,
    }
}

/// `committed = working`, or on a skipped step (the GradScaler state's found-inf word set)
/// `working = committed`: `words` u32 words of each.
pub fn commit(
    ctx: &GpuContext,
    scaler_state: &Arc<GpuBuffer>,
    committed: &Arc<GpuBuffer>,
    working: &Arc<GpuBuffer>,
    words: usize,
) -> Result<Kernel> {
    let sizes = Sizes {
        n: words as u32,
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
