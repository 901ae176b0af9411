//! What the op tests share: the contexts and storages they loop over, inputs already rounded
//! to a dtype, uploads and read-backs, and the size of one rounding step.

use std::sync::Arc;

use webgpu_amp::gpu::{GpuBuffer, Kernel};
use webgpu_amp::{DType, GpuContext, Tensor};

use super::{ctx, ctx_native, ctx_packed, rand_vec};

/// Native and packed f16 storage, so both paths run on one machine.
pub fn contexts() -> [(&'static str, &'static GpuContext); 2] {
    [("native", ctx_native()), ("packed", ctx_packed())]
}

/// (name, context, low dtype): f32, native f16, packed f16, bf16.
pub fn storages() -> [(&'static str, &'static GpuContext, DType); 4] {
    [
        ("f32", ctx(), DType::F32),
        ("f16 native", ctx_native(), DType::F16),
        ("f16 packed", ctx_packed(), DType::F16),
        ("bf16", ctx(), DType::BF16),
    ]
}

/// Values in [-scale, scale) already rounded to `dtype`, so the GPU sees exactly these.
pub fn quantised(n: usize, seed: u64, scale: f32, dtype: DType) -> Vec<f32> {
    rand_vec(n, seed)
        .iter()
        .map(|&v| dtype.round(v * scale))
        .collect()
}

/// `n` pseudo-random class labels below `c` (a fixed sequence per seed).
pub fn labels_for(n: usize, c: usize, seed: u64) -> Vec<u32> {
    rand_vec(n, seed)
        .iter()
        .map(|&v| (((v + 1.0) / 2.0 * c as f32) as u32).min(c as u32 - 1))
        .collect()
}

/// Relative size of one unit in the last place of a dtype (the output rounding).
pub fn ulp(dtype: DType) -> f32 {
    match dtype {
        DType::F32 => 2f32.powi(-22),
        DType::F16 => 2f32.powi(-10),
        DType::BF16 => 2f32.powi(-7),
        DType::U32 => unreachable!("ids are not computed in"),
    }
}

/// The gap from |x| to the next f32 (the smallest normal's gap near zero).
pub fn ulp_of(x: f32) -> f32 {
    let a = x.abs().max(f32::MIN_POSITIVE);
    f32::from_bits(a.to_bits() + 1) - a
}

/// Upload f32 values as a tensor of `dtype`.
pub fn upload(ctx: &GpuContext, data: &[f32], shape: &[usize], dtype: DType) -> Tensor {
    Tensor::from_f32(ctx, data, shape, dtype).unwrap()
}

/// A storage buffer holding `data` as f32 words.
pub fn upload_f32(ctx: &GpuContext, data: &[f32]) -> Arc<GpuBuffer> {
    let b = ctx.alloc_storage("test f32", 4 * data.len() as u64);
    write_f32(ctx, &b, data);
    b
}

/// Overwrite the start of `b` with `data`.
pub fn write_f32(ctx: &GpuContext, b: &GpuBuffer, data: &[f32]) {
    ctx.queue
        .write_buffer(b.raw(), 0, bytemuck::cast_slice(data));
}

/// A storage buffer holding `data` as u32 words (one word at least, so an empty list binds).
pub fn upload_u32(ctx: &GpuContext, data: &[u32]) -> Arc<GpuBuffer> {
    let b = ctx.alloc_storage("test u32", 4 * data.len().max(1) as u64);
    ctx.queue
        .write_buffer(b.raw(), 0, bytemuck::cast_slice(data));
    b
}

/// The first `n` f32 words of `b`.
pub fn download(ctx: &GpuContext, b: &GpuBuffer, n: usize) -> Vec<f32> {
    bytemuck::pod_collect_to_vec(&ctx.read_bytes(b, 0, 4 * n as u64).unwrap())
}

/// Record `kernels` in order into one compute pass and submit it.
pub fn run(ctx: &GpuContext, kernels: &[Kernel]) {
    ctx.run(&kernels.iter().collect::<Vec<_>>());
}

/// The value of a one-element tensor.
pub fn scalar(ctx: &GpuContext, t: &Tensor) -> f32 {
    t.read_f32(ctx).unwrap()[0]
}

/// got within `rtol` of `want`, relative to |want|.
#[track_caller]
pub fn assert_rel(what: &str, got: f32, want: f64, rtol: f64) {
    let err = (got as f64 - want).abs();
    assert!(
        err <= rtol * want.abs().max(1e-30),
        "{what}: got {got}, want {want} (rel err {})",
        err / want.abs()
    );
}
