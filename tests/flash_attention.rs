//! The fused attention kernels (`ops::flash_attention`) against an f64 reference, forward
//! and backward, on f32, native f16, packed f16 and bf16 storage: causal masking, attention
//! dropout on, off and in eval mode (the unfused path's masks), T = 1, T not a multiple of
//! the tile or of the workgroup, odd head sizes; grouped-query attention (fewer key/value
//! heads, packed or in tensors of their own: the same bits) and its forward equal to
//! multi-head attention on repeated keys and values; both bodies give the same bits, runs
//! repeat bit for bit. Finite differences of the forward check the backward in f32.
//! (tests/flash_attention_edges.rs: non-finite inputs, errors, the GPT layer.)

mod common;

use common::attention_ref;
use common::flash_run::{DROP, Outputs, Run, against_reference, dims, dims_gqa, values};
use common::{ctx, ctx_native, ctx_packed};
use webgpu_amp::ops::flash_attention::FlashBody;
use webgpu_amp::{DType, GpuContext};

/// (name, context, dtype of qkv, y, dy and dqkv).
fn storages() -> [(&'static str, &'static GpuContext, DType); 4] {
    [
        ("f32", ctx(), DType::F32),
        ("f16 native", ctx_native(), DType::F16),
        ("f16 packed", ctx_packed(), DType::F16),
        ("bf16", ctx(), DType::BF16),
    ]
}

#[test]
fn matches_the_f64_reference_on_every_storage() {
    // T = 1; T below, at and past the tile (64 / hs keys for hs 16 is 64: the workgroup);
    // an odd head size (packed stores at odd offsets); several workgroups per head.
    let shapes = [
        dims(2, 2, 1, 16),
        dims(1, 3, 5, 5),
        dims(2, 2, 17, 16),
        dims(1, 2, 67, 16),
        dims(1, 1, 21, 64),
    ];
    for (name, ctx, dtype) in storages() {
        for &d in &shapes {
            for (drop, training) in [(None, true), (Some(DROP), true), (Some(DROP), false)] {
                let run = Run {
                    ctx,
                    dtype,
                    dims: d,
                    drop,
                    training,
                    body: FlashBody::Auto,
                    coop: None,
                };
                let mode = match (drop, training) {
                    (None, _) => "no dropout",
                    (Some(_), true) => "dropout",
                    (Some(_), false) => "dropout in eval mode",
                };
                against_reference(&format!("{name} {d:?} {mode}"), &run);
            }
        }
    }
}

#[test]
fn both_bodies_give_the_same_bits_and_runs_repeat() {
    for (name, ctx, dtype) in storages() {
        for d in [
            dims(2, 2, 67, 16),
            dims(1, 2, 13, 5),
            dims_gqa(1, 4, 2, 67, 16),
        ] {
            let qkv = values(d.b * d.t * d.row(), 3, 2.0, dtype);
            let dy = values(d.b * d.t * d.c(), 4, 1.0, dtype);
            let mut runs = attention_ref::bodies(ctx);
            runs.push(runs[0]); // a rerun
            let outputs: Vec<Outputs> = runs
                .into_iter()
                .map(|body| {
                    let run = Run {
                        ctx,
                        dtype,
                        dims: d,
                        drop: Some(DROP),
                        training: true,
                        body,
                        coop: None,
                    };
                    run.run(&qkv, &dy)
                })
                .collect();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            let last = outputs.last().expect("runs");
            for (o, label) in [(&outputs[1], "second body"), (last, "rerun")] {
                let what = format!("{name} {d:?} {label}");
                assert_eq!(bits(&o.y), bits(&outputs[0].y), "{what}: y");
                assert_eq!(bits(&o.lse), bits(&outputs[0].lse), "{what}: lse");
                assert_eq!(bits(&o.dqkv), bits(&outputs[0].dqkv), "{what}: dqkv");
            }
        }
    }
}

#[test]
fn grouped_query_attention_matches_the_f64_reference_packed_and_apart() {
    // Groups of 2 and 3 query heads, multi-query (one key/value head), an odd head size, T
    // past a workgroup; several samples.
    let shapes = [
        dims_gqa(2, 4, 2, 17, 16),
        dims_gqa(1, 3, 1, 67, 8),
        dims_gqa(1, 6, 2, 9, 5),
    ];
    for (name, ctx, dtype) in storages() {
        for &d in &shapes {
            for drop in [None, Some(DROP)] {
                let run = Run {
                    ctx,
                    dtype,
                    dims: d,
                    drop,
                    training: true,
                    body: FlashBody::Auto,
                    coop: None,
                };
                let what = format!("{name} {d:?} dropout {}", drop.is_some());
                against_reference(&what, &run);
                // q, k and v (and their gradients) in tensors of their own: the same bits.
                let qkv = values(d.b * d.t * d.row(), 5, 1.5, dtype);
                let dy = values(d.b * d.t * d.c(), 6, 1.0, dtype);
                let (packed, apart) = (
                    run.run_with(&qkv, &dy, false),
                    run.run_with(&qkv, &dy, true),
                );
                assert_eq!(common::bits(&apart.y), common::bits(&packed.y), "{what}: y");
                assert_eq!(
                    common::bits(&apart.lse),
                    common::bits(&packed.lse),
                    "{what}: lse"
                );
                let dqkv = common::bits(&packed.dqkv);
                assert_eq!(common::bits(&apart.dqkv), dqkv, "{what}: dq, dk, dv");
            }
        }
    }
}

/// Grouped-query attention reads each key/value head for its group's query heads as
/// multi-head attention reads a repeated copy (`repeat_kv`): the forward's bits are those.
#[test]
fn grouped_query_forward_equals_attention_on_repeated_keys_and_values() {
    let (ctx, d) = (ctx(), dims_gqa(1, 6, 2, 21, 8));
    let full = dims(d.b, d.nh, d.t, d.hs);
    let qkv = values(d.b * d.t * d.row(), 9, 1.5, DType::F32);
    let repeated: Vec<f32> = (0..d.b * d.t * full.row())
        .map(|e| {
            let (pos, col) = (e / full.row(), e % full.row());
            let (part, h, ch) = (col / full.c(), (col % full.c()) / d.hs, col % d.hs);
            qkv[d.at(pos / d.t, h, pos % d.t, part, ch)]
        })
        .collect();
    let dy = values(d.b * d.t * d.c(), 10, 1.0, DType::F32);
    let run = |dims| Run {
        ctx,
        dtype: DType::F32,
        dims,
        drop: Some(DROP),
        training: true,
        body: FlashBody::Auto,
        coop: None,
    };
    let (grouped, mha) = (run(d).run(&qkv, &dy), run(full).run(&repeated, &dy));
    assert_eq!(common::bits(&grouped.y), common::bits(&mha.y), "y");
    assert_eq!(common::bits(&grouped.lse), common::bits(&mha.lse), "lse");
}

/// Central differences of L = Σ y ⊙ w through the GPU forward (f32, dropout on with a
/// fixed mask) against the backward's dqkv, at the largest gradients of q, k and v, for
/// multi-head attention and for grouped-query attention (whose dk and dv sum the group's
/// query heads).
#[test]
fn backward_matches_finite_differences() {
    let ctx = ctx();
    for d in [dims(1, 2, 9, 4), dims_gqa(1, 4, 2, 9, 4)] {
        let qkv = values(d.t * d.row(), 41, 1.0, DType::F32);
        let w = values(d.t * d.c(), 42, 1.0, DType::F32);
        let run = Run {
            ctx,
            dtype: DType::F32,
            dims: d,
            drop: Some(DROP),
            training: true,
            body: FlashBody::Auto,
            coop: None,
        };
        let grad = run.run(&qkv, &w).dqkv;
        let loss = |x: &[f32]| -> f64 {
            let y = run.run(x, &w).y;
            y.iter().zip(&w).map(|(a, b)| *a as f64 * *b as f64).sum()
        };
        const EPS: f32 = 1e-2;
        let mut checked = 0;
        for part in 0..3 {
            // The two largest gradients of this part (q, k or v).
            let mut idx: Vec<usize> = (0..d.t)
                .flat_map(|i| (0..d.nh).flat_map(move |h| (0..d.hs).map(move |c| (i, h, c))))
                .map(|(i, h, c)| d.at(0, h, i, part, c))
                .collect();
            idx.sort_by(|a, b| grad[*b].abs().total_cmp(&grad[*a].abs()));
            for &i in &idx[..2] {
                let (mut plus, mut minus) = (qkv.clone(), qkv.clone());
                plus[i] += EPS;
                minus[i] -= EPS;
                let fd = (loss(&plus) - loss(&minus)) / (2.0 * EPS as f64);
                let g = grad[i] as f64;
                assert!(
                    (g - fd).abs() <= 2e-3 + 2e-2 * fd.abs(),
                    "{d:?} part {part} element {i}: backward {g}, finite difference {fd}"
                );
                assert!(
                    g.abs() > 1e-3,
                    "{d:?} part {part}: gradient {g} too small to test"
                );
                checked += 1;
            }
        }
        assert_eq!(checked, 6);
    }
}
