//! A kernel that binds one buffer in ways WebGPU forbids within a dispatch is an error when
//! it is made, naming the kernel and both bindings: a writable binding beside a read-only
//! one (wgpu reports that only when the pass is submitted, as "conflicting usages"), or two
//! writable bindings whose ranges overlap (wgpu lets that through; Chrome rejects it). The
//! disjoint writable views one flat gradient buffer hands out stay allowed.

mod common;

use common::values::upload;
use webgpu_amp::dtype::Storage;
use webgpu_amp::ops::elementwise;
use webgpu_amp::ops::layernorm::layernorm_backward;
use webgpu_amp::{DType, Tensor};

#[test]
fn a_writable_binding_beside_a_read_only_one_of_the_same_buffer_is_refused() {
    let ctx = common::ctx();
    let t = upload(ctx, &[1.0, 2.0, 3.0, 4.0], &[4], DType::F32);
    let y = upload(ctx, &[1.0; 4], &[4], DType::F32);
    let err = elementwise::add(ctx, &t, &y, &t)
        .err()
        .expect("in-place add must be refused");
    let msg = err.to_string();
    assert!(msg.contains("elementwise::add"), "{msg}");
    assert!(
        msg.contains("as `x` (read-only") || msg.contains("as `out` (writable"),
        "{msg}"
    );
    assert!(msg.contains("WebGPU forbids"), "{msg}");
}

#[test]
fn overlapping_writable_bindings_are_refused_and_disjoint_views_are_not() {
    let ctx = common::ctx();
    let (rows, cols) = (4, 6);
    let x = upload(ctx, &[0.5; 24], &[rows, cols], DType::F32);
    let dy = upload(ctx, &[0.25; 24], &[rows, cols], DType::F32);
    let w = upload(ctx, &[1.0; 6], &[cols], DType::F32);
    let stats = || Tensor::zeros(ctx, &[rows], DType::F32);
    let (mean, rstd) = (stats(), stats());
    let dx = Tensor::zeros(ctx, &[rows, cols], DType::F32);
    // dweight and dbias as one tensor: two writable bindings of one range.
    let grads = Tensor::zeros(ctx, &[2 * cols], DType::F32);
    let dw = Tensor::view(ctx, grads.buffer().clone(), 0, &[cols], Storage::F32).unwrap();
    let err = layernorm_backward(ctx, &dy, &x, &w, &mean, &rstd, &dx, &dw, Some(&dw))
        .err()
        .expect("dweight and dbias in one range must be refused");
    let msg = err.to_string();
    assert!(msg.contains("layernorm_param_final"), "{msg}");
    assert!(
        msg.contains("(writable") && msg.contains("WebGPU forbids"),
        "{msg}"
    );
    // Disjoint views of one buffer, as the flat gradient buffer hands out: allowed.
    let align = ctx.caps.min_storage_buffer_offset_alignment as u64;
    let flat = Tensor::zeros(ctx, &[(2 * align / 4) as usize], DType::F32);
    let view = |at: u64| Tensor::view(ctx, flat.buffer().clone(), at, &[cols], Storage::F32);
    let (dw, db) = (view(0).unwrap(), view(align).unwrap());
    layernorm_backward(ctx, &dy, &x, &w, &mean, &rstd, &dx, &dw, Some(&db))
        .expect("disjoint writable views are allowed");
}
