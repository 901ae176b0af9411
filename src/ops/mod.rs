//! Op dispatchers: one Rust file per WGSL file, forward and backward side by side.
//!
//! Every op is a function that checks shapes and returns a planned [`Kernel`] (pipeline and
//! bind group made once); callers encode kernels into a step's command buffer.

pub mod attention;
pub mod conv;
pub mod dropout;
pub mod elementwise;
pub mod embedding;
pub mod histogram;
pub mod layernorm;
pub mod loss;
pub mod matmul;
pub mod pool;
pub mod reduce;
pub mod sample;

use crate::error::Result;
use crate::gpu::Kernel;
use crate::shader::Variant;

pub use crate::gpu::{Arg, KernelDesc};

/// Workgroup grid for `threads` invocations of a 1-D kernel with `wg` threads per group,
/// folded into two dimensions when it passes the 65535-groups-per-dimension limit. Kernels
/// recover the flat index as `gid.x + gid.y * num_workgroups.x * WG`.
pub fn grid_1d(threads: usize, wg: u32) -> [u32; 3] {
    let groups = threads.div_ceil(wg as usize).max(1) as u32;
    if groups <= 65535 {
        [groups, 1, 1]
    } else {
        let y = groups.div_ceil(65535);
        [groups.div_ceil(y), y, 1]
    }
}

/// Every shader variant the ops may compile, for the portability test.
pub fn all_variants() -> Result<Vec<Variant>> {
    let mut v = Vec::new();
    v.extend(elementwise::variants()?);
    v.extend(conv::variants()?);
    v.extend(pool::variants()?);
    v.extend(reduce::variants()?);
    v.extend(loss::variants()?);
    v.extend(crate::amp::scaler::variants()?);
    v.extend(crate::optim::variants()?);
    v.extend(crate::amp::round::variants()?);
    v.extend(matmul::variants()?);
    v.extend(histogram::variants()?);
    v.extend(layernorm::variants()?);
    v.extend(embedding::variants()?);
    v.extend(sample::variants()?);
    v.extend(attention::variants()?);
    v.extend(dropout::variants()?);
    Ok(v)
}

/// Kernels are plain data; keep the type visible from here for op signatures.
pub type Planned = Kernel;
