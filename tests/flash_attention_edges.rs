//! The fused attention's edges: non-finite inputs (PyTorch's masked_fill(-inf) + softmax
//! semantics: a poisoned row is NaN, rows before the bad key are not), errors for bad sizes
//! and storages, and the GPT layer: the fused and unfused paths give the same losses and
//! gradients up to reassociation under every precision (with attention dropout 0.5, so
//! they drop the same probabilities), and the fused one plans less memory.

mod common;

use common::flash_run::gpt_step;
use common::{ctx, ctx_owned, ctx_packed, expect_err, rand_vec};
use webgpu_amp::amp::policy::Precision;
use webgpu_amp::nn::AttentionKernel;
use webgpu_amp::ops::dropout::{DropoutKey, DropoutState};
use webgpu_amp::ops::flash_attention::{FlashBody, FlashParams, MAX_HEAD_SIZE, backward, forward};
use webgpu_amp::{DType, GpuContext, Tensor};

const B: usize = 1;
const NH: usize = 2;
const T: usize = 9;
const HS: usize = 4;
const C: usize = NH * HS;

fn params(body: FlashBody) -> FlashParams<'static> {
    FlashParams {
        batch: B,
        heads: NH,
        kv_heads: None,
        t: T,
        width: C,
        scale: 0.5,
        dropout: None,
        dropout_state: None,
        body,
        coop: None,
    }
}

/// Forward and backward of `qkv` (f32); y, lse and dqkv.
fn run(ctx: &GpuContext, qkv: &[f32], body: FlashBody) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let p = params(body);
    let x = Tensor::from_f32(ctx, qkv, &[B, T, 3 * C], DType::F32).unwrap();
    let y = Tensor::zeros(ctx, &[B, T, C], DType::F32);
    let lse = Tensor::zeros(ctx, &[B * NH * T], DType::F32);
    let dy = Tensor::from_f32(ctx, &rand_vec(B * T * C, 5), &[B, T, C], DType::F32).unwrap();
    let delta = Tensor::zeros(ctx, &[B * NH * T], DType::F32);
    let dqkv = Tensor::zeros(ctx, &[B, T, 3 * C], DType::F32);
    let mut kernels = vec![forward(ctx, &x, &y, &lse, &p).unwrap()];
    kernels.extend(backward(ctx, &x, &y, &lse, &dy, &delta, &dqkv, &p).unwrap());
    ctx.run(&kernels.iter().collect::<Vec<_>>());
    (
        y.read_f32(ctx).unwrap(),
        lse.read_f32(ctx).unwrap(),
        dqkv.read_f32(ctx).unwrap(),
    )
}

/// Index of channel d of q (part 0), k (1) or v (2) of head h at position i.
fn at(i: usize, part: usize, h: usize, d: usize) -> usize {
    i * 3 * C + part * C + h * HS + d
}

#[test]
fn a_nan_key_poisons_the_rows_that_see_it_and_no_other() {
    for body in common::attention_ref::bodies(ctx()) {
        let mut qkv = rand_vec(T * 3 * C, 1);
        let bad = 4;
        qkv[at(bad, 1, 0, 2)] = f32::NAN;
        let (y, lse, dqkv) = run(ctx(), &qkv, body);
        for i in 0..T {
            let row = &y[i * C..i * C + HS];
            assert_eq!(
                row.iter().all(|v| v.is_nan()),
                i >= bad,
                "{body:?}: head 0 row {i}: {row:?}"
            );
            assert_eq!(lse[i].is_nan(), i >= bad, "{body:?}: lse row {i}");
            // Head 1 never sees the NaN.
            assert!(y[i * C + HS..(i + 1) * C].iter().all(|v| v.is_finite()));
            let dq = &dqkv[at(i, 0, 0, 0)..at(i, 0, 0, HS)];
            assert_eq!(
                dq.iter().any(|v| v.is_nan()),
                i >= bad,
                "{body:?}: dq row {i}: {dq:?}"
            );
        }
        // Every key a poisoned row saw gets a NaN gradient: the GradScaler will see it.
        assert!(dqkv[at(0, 1, 0, 0)].is_nan() && dqkv[at(0, 2, 0, 0)].is_nan());
    }
}

#[test]
fn infinite_logits_follow_pytorch_softmax() {
    // q·k = -inf for every key of row 3 (a row of -inf: NaN, as softmax of all -inf), and
    // +inf for one key of row 6 (NaN); the other rows stay finite.
    let mut qkv: Vec<f32> = rand_vec(T * 3 * C, 2)
        .iter()
        .map(|v| v.abs() + 0.1)
        .collect();
    qkv[at(3, 0, 1, 0)] = f32::NEG_INFINITY;
    qkv[at(6, 0, 1, 0)] = f32::INFINITY;
    let (y, lse, _) = run(ctx(), &qkv, FlashBody::Auto);
    for i in 0..T {
        let poisoned = i == 3 || i == 6;
        let row = &y[i * C + HS..(i + 1) * C];
        assert_eq!(row.iter().all(|v| v.is_nan()), poisoned, "row {i}: {row:?}");
        assert!(
            poisoned || row.iter().all(|v| v.is_finite()),
            "row {i}: {row:?}"
        );
        assert_eq!(lse[T + i].is_nan(), poisoned, "lse row {i}");
    }
}

#[test]
fn bad_sizes_and_storages_are_errors() {
    let ctx = ctx();
    let qkv = Tensor::zeros(ctx, &[B, T, 3 * C], DType::F32);
    let y = Tensor::zeros(ctx, &[B, T, C], DType::F32);
    let lse = Tensor::zeros(ctx, &[B * NH * T], DType::F32);
    let p = params(FlashBody::Auto);
    let short = Tensor::zeros(ctx, &[B, T - 1, C], DType::F32);
    expect_err(forward(ctx, &qkv, &short, &lse, &p), &["y", "must hold 72"]);
    let lse16 = Tensor::zeros(ctx, &[B * NH * T], DType::F16);
    expect_err(forward(ctx, &qkv, &y, &lse16, &p), &["lse must be f32"]);
    let odd = FlashParams { width: 7, ..p };
    expect_err(forward(ctx, &qkv, &y, &lse, &odd), &["multiple of heads"]);
    let wide = FlashParams {
        heads: 1,
        width: 2 * MAX_HEAD_SIZE,
        ..p
    };
    let big = Tensor::zeros(ctx, &[B, T, 6 * MAX_HEAD_SIZE], DType::F32);
    let big_y = Tensor::zeros(ctx, &[B, T, 2 * MAX_HEAD_SIZE], DType::F32);
    let big_lse = Tensor::zeros(ctx, &[B * T], DType::F32);
    expect_err(
        forward(ctx, &big, &big_y, &big_lse, &wide),
        &["head size 512", "unfused"],
    );
    let dropout = FlashParams {
        dropout: Some(DropoutKey { p: 0.1, layer: 0 }),
        ..p
    };
    expect_err(forward(ctx, &qkv, &y, &lse, &dropout), &["dropout_state"]);
    let state = DropoutState::new(ctx);
    let huge = FlashParams {
        batch: 1 << 16,
        t: 1 << 9,
        dropout_state: Some(&state),
        ..dropout
    };
    let none = Tensor::zeros(ctx, &[4], DType::F32);
    expect_err(
        forward(ctx, &none, &none, &none, &huge),
        &["exceeds 2^32 elements"],
    );
    if ctx.f16_storage == webgpu_amp::F16Storage::Native {
        let native = Tensor::zeros(ctx, &[B, T, C], DType::F16);
        let packed = Tensor::zeros(ctx_packed(), &[B, T, 3 * C], DType::F16);
        expect_err(
            forward(ctx, &packed, &native, &lse, &p),
            &["mixes native and packed"],
        );
    }
}

#[test]
fn the_gpt_trains_alike_fused_and_unfused_and_fused_plans_less() {
    // Tolerances: f32 reassociation; under AMP the unfused path also rounds S and the
    // dropped-out P to the low dtype, which the fused one never does. A context of its own:
    // the peak bytes of other tests' threads stay out.
    let ctx = &ctx_owned();
    for (precision, tol) in [
        (Precision::F32, 1e-5),
        (Precision::AmpF16, 4e-3),
        (Precision::AmpBf16, 3e-2),
    ] {
        let (lf, gf, mem_f) = gpt_step(ctx, precision, AttentionKernel::Fused);
        let (lu, gu, mem_u) = gpt_step(ctx, precision, AttentionKernel::Unfused);
        let what = precision.name();
        assert!(
            (lf - lu).abs() <= tol * lu.abs(),
            "{what}: loss {lf} vs {lu}"
        );
        let scale = gu.iter().fold(0f32, |m, g| m.max(g.abs()));
        for (i, (a, b)) in gf.iter().zip(&gu).enumerate() {
            assert!(
                (a - b).abs() <= 4.0 * tol * scale,
                "{what}: gradient {i}: fused {a}, unfused {b} (largest {scale})"
            );
        }
        assert!(
            mem_f < mem_u,
            "{what}: fused peak {mem_f} B, unfused {mem_u} B"
        );
        let (again, _, _) = gpt_step(ctx, precision, AttentionKernel::Fused);
        assert_eq!(again.to_bits(), lf.to_bits(), "{what}: rerun");
    }
}
