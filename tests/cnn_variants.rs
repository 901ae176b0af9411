//! Every kernel the CNN ops compile is one of their declared variants (`variants::undeclared`),
//! so the portability tests and the Tint check have seen it: BatchNorm (training, eval,
//! backward; the buffers' commit; affine or not, parameters in the activations' storage or f32, each fused
//! activation), average pooling and augmentation, in every storage, on native and packed f16.

mod common;

use common::values::{upload, upload_u32};
use webgpu_amp::ops::augment::{self, Augment, AugmentState, Crop, Flip, Padding};
use webgpu_amp::ops::avgpool::{self, AvgPool};
use webgpu_amp::ops::batchnorm::{Activation, Affine, BatchNorm, RunningStats};
use webgpu_amp::ops::buffers::{self, OnSkippedStep};
use webgpu_amp::variants::undeclared;
use webgpu_amp::{DType, GpuContext, Tensor};

fn plan_every_cnn_kernel(ctx: &GpuContext) {
    let shape = [2, 3, 4, 5];
    for dtype in DType::ALL {
        let t = |s: &[usize], d| Tensor::zeros(ctx, s, d);
        let (x, y, dy, dx) = (
            t(&shape, dtype),
            t(&shape, dtype),
            t(&shape, dtype),
            t(&shape, dtype),
        );
        let saved = t(&[6], DType::F32);
        let (dw, db) = (t(&[3], DType::F32), t(&[3], DType::F32));
        let (pending, committed) = (
            RunningStats::new(ctx, "pending", 3).unwrap(),
            RunningStats::new(ctx, "committed", 3).unwrap(),
        );
        let state = ctx.alloc_storage("scaler state", 40);
        for on_skip in [OnSkippedStep::Keep, OnSkippedStep::UpdateAnyway] {
            let copies = (committed.buffer(), pending.buffer());
            buffers::commit(ctx, &state, copies, committed.words(), on_skip).unwrap();
        }
        for param in [dtype, DType::F32] {
            let (w, b) = (t(&[3], param), t(&[3], param));
            for affine in [
                Affine {
                    weight: Some(&w),
                    bias: Some(&b),
                },
                Affine {
                    weight: Some(&w),
                    bias: None,
                },
                Affine::default(),
            ] {
                for activation in Activation::ALL {
                    let bn = BatchNorm {
                        activation,
                        ..BatchNorm::default()
                    };
                    bn.train_forward(ctx, (&x, &y), affine, &saved, Some(&pending))
                        .unwrap();
                    bn.eval_forward(ctx, (&x, &y), affine, &committed).unwrap();
                    bn.backward(ctx, (&x, &dy, &dx), affine, &saved, (Some(&dw), Some(&db)))
                        .unwrap();
                }
            }
        }
        for pool in [
            AvgPool::window(2),
            AvgPool::Adaptive {
                height: 1,
                width: 1,
            },
        ] {
            let (ho, wo) = pool.output_hw(4, 5).unwrap();
            let pooled = t(&[2, 3, ho, wo], dtype);
            avgpool::forward(ctx, &x, &pooled, pool).unwrap();
            avgpool::backward(ctx, &pooled, &dx, pool).unwrap();
        }
        let aug = Augment {
            crop: Some(Crop {
                pad: 2,
                padding: Padding::Reflect,
            }),
            flip: Flip::Alternating,
        };
        let ids = upload_u32(ctx, &[0, 1]);
        augment::augment(ctx, (&x, &y), &aug, &AugmentState::new(ctx), &ids).unwrap();
        augment::flip_all(ctx, &x, &y).unwrap();
        let logits = upload(ctx, &[0.0; 10], &[2, 5], dtype);
        let other = upload(ctx, &[0.0; 10], &[2, 5], dtype);
        for out in [dtype, DType::F32] {
            augment::average(ctx, &logits, &other, &t(&[2, 5], out)).unwrap();
        }
    }
}

fn check(ctx: &GpuContext, what: &str) {
    plan_every_cnn_kernel(ctx);
    let compiled = ctx.compiled_entries();
    let missing = undeclared(&compiled).unwrap();
    assert!(
        compiled.len() > 40,
        "{what}: {} entry points compiled",
        compiled.len()
    );
    assert!(
        missing.is_empty(),
        "{what}: kernels no declared variant covers (add them to their shader's grid):\n{}",
        missing.join("\n")
    );
}

#[test]
fn every_cnn_kernel_is_declared_native_f16() {
    let ctx = common::ctx_owned_native();
    check(&ctx, "native (or packed without shader-f16)");
}

#[test]
fn every_cnn_kernel_is_declared_packed_f16() {
    check(&common::ctx_owned_packed(), "packed");
}
