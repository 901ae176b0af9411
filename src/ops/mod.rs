//! Op dispatchers: one Rust file per WGSL file, forward and backward side by side.
//!
//! Every op is a function that checks shapes and returns a planned [`crate::gpu::Kernel`]
//! (pipeline and bind group made once); callers encode kernels into a step's command buffer.
//! Each op file declares its shader once (a [`ShaderDecl`]: name, source, uniform structs,
//! variant grid); a new op is its file, its WGSL, and its name in the two lists below.

pub mod attention;
pub mod augment;
pub mod avgpool;
pub mod batchnorm;
pub mod bodies;
pub mod buffers;
pub mod concat;
pub mod conv;
pub mod dropout;
pub mod elementwise;
pub mod embedding;
pub mod flash_attention;
pub mod histogram;
mod kernel_args;
pub mod layernorm;
pub mod loss;
pub mod matmul;
pub mod numerics;
pub mod pool;
pub mod qkv;
pub mod reduce;
pub mod rope;
pub mod sample;
pub mod scaler_state;
pub mod table_check;
pub mod unary;

use crate::shader::ShaderDecl;

pub use kernel_args::Accumulate;
pub(crate) use kernel_args::{check_f32, round_code};

/// The shaders of these ops, for the portability tests (`crate::variants`).
pub static SHADERS: &[&ShaderDecl] = &[
    &attention::SHADER,
    &augment::SHADER,
    &avgpool::SHADER,
    &batchnorm::SHADER,
    &buffers::SHADER,
    &concat::SHADER,
    &conv::SHADER,
    &conv::COOP_SHADER,
    &dropout::SHADER,
    &elementwise::SHADER,
    &embedding::SHADER,
    &flash_attention::FORWARD_SHADER,
    &flash_attention::BACKWARD_SHADER,
    &flash_attention::COOP_FORWARD_SHADER,
    &flash_attention::COOP_BACKWARD_SHADER,
    &flash_attention::COOP_DQ_SHADER,
    &histogram::SHADER,
    &layernorm::SHADER,
    &loss::SHADER,
    &matmul::SHADER,
    &matmul::COOP_SHADER,
    &numerics::SHADER,
    &pool::SHADER,
    &reduce::SHADER,
    &rope::SHADER,
    &sample::SHADER,
    &unary::SHADER,
];
