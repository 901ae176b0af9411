//! The fused attention's tensor-core body (`FlashBody::Coop`: shaders/flash_coop_forward.wgsl,
//! shaders/flash_coop_backward.wgsl) against the f64 reference, forward and backward, with
//! both fragment shapes (`--tensor-cores on:8x8`, `on:16x16`), native f16 storage: causal
//! masking, attention dropout on, off and in eval mode (the SIMT bodies' masks), T = 1, T not
//! a multiple of the blocks, the head sizes of gpt-tiny (16) and gpt-char (64) and odd ones.
//! Runs repeat bit for bit, non-finite logits poison the rows PyTorch's softmax poisons, Auto
//! picks the body for native f16 only, and a GPT trains on it as on the SIMT body. Where the
//! adapter has no f16 cooperative matrices (Mesa 22's lavapipe, GL) these say NOT CHECKED
//! and check what can be checked there (Auto never picks the body, forcing it is a clear
//! error); CI runs this file on Mesa 26's lavapipe (`scripts/lavapipe-coop.sh`).

mod common;

use common::attention_ref::Dims;
use common::flash_run::{DROP, Run, against_reference, dims, dims_gqa, gpt_step, values};
use common::{bits, coop_ctx, ctx_native, expect_err};
use webgpu_amp::amp::policy::Precision;
use webgpu_amp::amp::support::ModeSupport;
use webgpu_amp::nn::AttentionKernel;
use webgpu_amp::ops::flash_attention::{
    COOP_MAX_HEAD_SIZE, FlashBody, FlashCoopConfig, FlashParams, forward,
};
use webgpu_amp::{DType, F16StorageChoice, GpuContext, Storage, Tensor};

/// A 21 KiB adapter: smaller streamed steps than Mesa 26's lavapipe's 32 KiB picks (v over k
/// in the forward, dropout(P) and dS over q and dy in dk/dv where the head is large), and
/// workgroup barriers in place of the subgroup ones, so both configurations run here.
const SMALL: FlashCoopConfig = FlashCoopConfig {
    workgroup_bytes: 21 * 1024,
    subgroup_barriers: false,
};

/// A training run of the tensor-core body in native f16 with attention dropout, under
/// `coop` (None: the adapter's blocks).
fn dropout_run(ctx: &GpuContext, dims: Dims, coop: Option<FlashCoopConfig>) -> Run<'_> {
    Run {
        ctx,
        dtype: DType::F16,
        dims,
        drop: Some(DROP),
        training: true,
        body: FlashBody::Coop,
        coop,
    }
}

#[test]
fn tensor_core_attention_matches_the_f64_reference_with_both_fragment_shapes() {
    // T = 1; T inside one block; T past one and several blocks (64 or 32 rows, 64 to 8 keys
    // a step) and a multiple of none; gpt-tiny's and gpt-char's heads; odd head sizes (padded
    // to whole fragments); several heads and samples.
    let shapes = [
        dims(2, 2, 1, 16),
        dims(1, 3, 7, 5),
        dims(2, 2, 17, 16),
        dims(1, 2, 65, 16),
        dims(1, 1, 65, 64),
        dims(1, 2, 33, 24),
        dims(1, 1, 45, 40),
    ];
    for edge in [8, 16] {
        let Some(ctx) = coop_ctx(edge, "the tensor-core fused attention against f64") else {
            continue;
        };
        for &d in &shapes {
            // The adapter's blocks, then the small ones (differing from them: checked).
            let blocks = |config| FlashBody::coop_blocks(&ctx.caps, config, d.hs).unwrap();
            assert_ne!(blocks(None), blocks(Some(SMALL)), "{edge}x{edge} {d:?}");
            for config in [None, Some(SMALL)] {
                for (drop, training) in [(None, true), (Some(DROP), true), (Some(DROP), false)] {
                    let run = Run {
                        ctx,
                        dtype: DType::F16,
                        dims: d,
                        drop,
                        training,
                        body: FlashBody::Coop,
                        coop: config,
                    };
                    let mode = match (drop, training) {
                        (None, _) => "no dropout",
                        (Some(_), true) => "dropout",
                        (Some(_), false) => "dropout in eval mode",
                    };
                    let what = format!("coop {edge}x{edge} {} {d:?} {mode}", blocks(config));
                    against_reference(&what, &run);
                }
            }
        }
        // Auto runs it for native f16 up to the largest head size, and only there.
        let caps = &ctx.caps;
        let auto = |storage, hs| FlashBody::Auto.resolve(caps, &[storage], hs);
        assert_eq!(auto(Storage::F16, 64), FlashBody::Coop);
        assert_eq!(auto(Storage::F16, 1), FlashBody::Coop);
        assert_ne!(auto(Storage::F16, COOP_MAX_HEAD_SIZE + 1), FlashBody::Coop);
        for s in [Storage::F32, Storage::BF16] {
            assert_ne!(auto(s, 64), FlashBody::Coop, "{s:?}");
        }
        // `webgpu-amp info` says the same.
        let info = |p| ModeSupport::of(p, caps, F16StorageChoice::Native).attention;
        let want = format!("coop (tensor cores) for head sizes up to {COOP_MAX_HEAD_SIZE}");
        assert!(
            info(Precision::AmpF16).starts_with(&want),
            "{}",
            info(Precision::AmpF16)
        );
        let f32_body = info(Precision::F32);
        assert!(
            ["rowwise SIMT", "tiled SIMT"].contains(&f32_body.as_str()),
            "{f32_body}"
        );
    }
}

/// Grouped-query attention on tensor cores (dk and dv summed over each key/value head's
/// query heads in its accumulators) against the f64 reference, with both fragment shapes
/// and the small blocks; q, k and v in tensors of their own give the packed run's bits.
#[test]
fn tensor_core_grouped_query_attention_matches_the_f64_reference() {
    let shapes = [dims_gqa(2, 4, 2, 33, 16), dims_gqa(1, 3, 1, 17, 8)];
    for edge in [8, 16] {
        let Some(ctx) = coop_ctx(edge, "the tensor-core grouped-query attention against f64")
        else {
            continue;
        };
        for &d in &shapes {
            for config in [None, Some(SMALL)] {
                let run = dropout_run(ctx, d, config);
                let what = format!("coop {edge}x{edge} {d:?} {config:?}");
                against_reference(&what, &run);
                let qkv = values(d.b * d.t * d.row(), 3, 2.0, DType::F16);
                let dy = values(d.b * d.t * d.c(), 4, 1.0, DType::F16);
                let (packed, apart) = (
                    run.run_with(&qkv, &dy, false),
                    run.run_with(&qkv, &dy, true),
                );
                assert_eq!(bits(&apart.y), bits(&packed.y), "{what}: y");
                assert_eq!(bits(&apart.dqkv), bits(&packed.dqkv), "{what}: dq, dk, dv");
            }
        }
    }
}

/// Laid out for subgroups twice the adapter's (what RDNA3 meets when the kernels, laid out
/// for 64 lanes, run on a driver that picks 32): twice the subgroups the block has, the extra
/// ones only staging. Forward and backward match the f64 reference with the adapter's blocks
/// and the small ones (workgroup barriers in place of the subgroup ones), grouped-query
/// attention included; between guard bands the bands stay untouched; and the bits are the
/// adapter's own layout's (the same blocks and lanes per row, so every sum in the same order).
#[test]
fn tensor_core_attention_is_correct_on_subgroups_smaller_than_its_layout() {
    for edge in [8, 16] {
        let Some(base) = coop_ctx(edge, "tensor-core fused attention on smaller subgroups") else {
            continue;
        };
        let lanes = 2 * base.caps.tensor_cores.config().expect("used").subgroup;
        let wide = base.with_coop_subgroup_layout(lanes);
        let tc = wide.caps.tensor_cores.config().expect("used");
        assert_eq!((tc.subgroup, tc.subgroup_fixed()), (lanes, false));
        for d in [dims(1, 2, 33, 24), dims_gqa(1, 3, 1, 17, 8)] {
            for config in [None, Some(SMALL)] {
                let run = dropout_run(&wide, d, config);
                let what =
                    format!("coop {edge}x{edge} laid out for {lanes} lanes {d:?} {config:?}");
                against_reference(&what, &run);
                let qkv = values(d.b * d.t * d.row(), 5, 2.0, DType::F16);
                let dy = values(d.b * d.t * d.c(), 6, 1.0, DType::F16);
                let (got, guarded) = (run.run(&qkv, &dy), run.run_guarded(&qkv, &dy));
                let own = Run { ctx: base, ..run }.run(&qkv, &dy);
                for (name, g, o) in [
                    ("y", &got.y, &own.y),
                    ("lse", &got.lse, &own.lse),
                    ("dqkv", &got.dqkv, &own.dqkv),
                ] {
                    assert_eq!(
                        bits(g),
                        bits(o),
                        "{what}: {name} against the adapter's layout"
                    );
                }
                assert_eq!(bits(&got.y), bits(&guarded.y), "{what}: y guarded");
                assert_eq!(bits(&got.dqkv), bits(&guarded.dqkv), "{what}: dqkv guarded");
            }
        }
    }
}

/// The same inputs twice give the same bits (fixed orders everywhere, no atomics).
#[test]
fn tensor_core_attention_is_bit_identical_run_to_run() {
    for edge in [8, 16] {
        let Some(ctx) = coop_ctx(edge, "tensor-core fused attention determinism") else {
            continue;
        };
        let d = dims(2, 2, 40, 16);
        let qkv = values(d.b * d.t * 3 * d.c(), 3, 2.0, DType::F16);
        let dy = values(d.b * d.t * d.c(), 4, 1.0, DType::F16);
        let run = dropout_run(ctx, d, None);
        let (a, b) = (run.run(&qkv, &dy), run.run(&qkv, &dy));
        assert!(a.dqkv.iter().any(|&v| v != 0.0), "{edge}x{edge}: all zero");
        assert_eq!(bits(&a.y), bits(&b.y), "{edge}x{edge}: y");
        assert_eq!(bits(&a.lse), bits(&b.lse), "{edge}x{edge}: lse");
        assert_eq!(bits(&a.dqkv), bits(&b.dqkv), "{edge}x{edge}: dqkv");
        // Between guard bands (the kernels are trusted: built without runtime checks), the
        // same bits and the bands untouched; also with a head padded to whole fragments
        // (24 channels: the last row's padding is what lies past a tensor's end).
        let padded = Run {
            dims: dims(1, 2, 33, 24),
            ..run
        };
        for r in [run, padded] {
            let qkv = values(r.dims.b * r.dims.t * 3 * r.dims.c(), 5, 2.0, DType::F16);
            let dy = values(r.dims.b * r.dims.t * r.dims.c(), 6, 1.0, DType::F16);
            let (plain, guarded) = (r.run(&qkv, &dy), r.run_guarded(&qkv, &dy));
            let what = format!("{edge}x{edge} {:?} guarded", r.dims);
            assert_eq!(bits(&plain.y), bits(&guarded.y), "{what}: y");
            assert_eq!(bits(&plain.lse), bits(&guarded.lse), "{what}: lse");
            assert_eq!(bits(&plain.dqkv), bits(&guarded.dqkv), "{what}: dqkv");
        }
    }
}

/// PyTorch's masked_fill(-inf) + softmax semantics in the forward, as the SIMT bodies: a NaN
/// key poisons the rows that see it (y, lse), a row of -inf logits and a +inf logit poison
/// their rows, other rows stay finite; the backward gives every poisoned row a NaN dq and
/// the keys they saw NaN dk and dv. Where the SIMT bodies skip masked pairs, the fragments
/// multiply their zeros, as PyTorch's manual attention does (0 · NaN = NaN): a NaN key also
/// reaches dq of the earlier rows of its key fragment (8 or 16 keys), never an earlier one.
#[test]
fn tensor_core_attention_poisons_the_rows_pytorch_poisons() {
    for edge in [8, 16] {
        let Some(ctx) = coop_ctx(edge, "tensor-core fused attention with non-finite inputs") else {
            continue;
        };
        let d = dims(1, 2, 37, 8);
        let (c, hs) = (d.c(), d.hs);
        let at = |i: usize, part: usize, h: usize, k: usize| i * 3 * c + part * c + h * hs + k;
        let mut qkv: Vec<f32> = values(d.t * 3 * c, 2, 1.0, DType::F16)
            .iter()
            .map(|v| v.abs() + 0.125)
            .collect();
        let bad = 20;
        qkv[at(bad, 1, 0, 2)] = f32::NAN; // head 0: a NaN key
        qkv[at(9, 0, 1, 0)] = f32::NEG_INFINITY; // head 1: every logit of row 9 is -inf
        qkv[at(30, 0, 1, 0)] = f32::INFINITY; // head 1: row 30's logits are +inf
        let dy = values(d.t * c, 5, 1.0, DType::F16);
        let run = Run {
            ctx,
            dtype: DType::F16,
            dims: d,
            drop: None,
            training: true,
            body: FlashBody::Coop,
            coop: None,
        };
        let out = run.run(&qkv, &dy);
        let what = format!("{edge}x{edge}");
        let nan = |v: &[f32]| v.iter().all(|x| x.is_nan());
        let finite = |v: &[f32]| v.iter().all(|x| x.is_finite());
        for i in 0..d.t {
            let (y0, y1) = (&out.y[i * c..i * c + hs], &out.y[i * c + hs..(i + 1) * c]);
            let dq0 = &out.dqkv[at(i, 0, 0, 0)..at(i, 0, 0, hs)];
            let dq1 = &out.dqkv[at(i, 0, 1, 0)..at(i, 0, 1, hs)];
            let (lse0, lse1) = (out.lse[i], out.lse[d.t + i]);
            if i >= bad {
                assert!(nan(y0) && lse0.is_nan(), "{what}: head 0 row {i}: {y0:?}");
                assert!(dq0.iter().any(|x| x.is_nan()), "{what}: head 0 dq {i}");
            } else {
                assert!(
                    finite(y0) && lse0.is_finite(),
                    "{what}: head 0 row {i}: {y0:?}"
                );
            }
            if i < 16 {
                assert!(finite(dq0), "{what}: head 0 dq {i}: {dq0:?}");
            }
            if i == 9 || i == 30 {
                assert!(nan(y1) && lse1.is_nan(), "{what}: head 1 row {i}: {y1:?}");
                assert!(dq1.iter().any(|x| x.is_nan()), "{what}: head 1 dq {i}");
            } else {
                assert!(
                    finite(y1) && lse1.is_finite(),
                    "{what}: head 1 row {i}: {y1:?}"
                );
                assert!(finite(dq1), "{what}: head 1 dq {i}: {dq1:?}");
            }
        }
        // The keys a poisoned row saw get NaN gradients: the GradScaler sees them.
        assert!(out.dqkv[at(0, 1, 0, 0)].is_nan() && out.dqkv[at(0, 2, 0, 0)].is_nan());
    }
}

/// A GPT step (amp-f16, attention dropout 0.5) whose fused attention runs on tensor cores
/// agrees with the same step on the SIMT body of the same adapter, within the AMP tolerance
/// tests/flash_attention_edges.rs gives the fused and unfused paths, and repeats bit for bit.
#[test]
fn a_gpt_trains_on_the_tensor_core_attention_as_on_the_simt_body() {
    let coop: Vec<_> = [8, 16]
        .into_iter()
        .filter_map(|e| coop_ctx(e, "a GPT on the tensor-core fused attention").map(|c| (e, c)))
        .collect();
    if coop.is_empty() {
        return;
    }
    let (simt_loss, simt_grads, _) =
        gpt_step(ctx_native(), Precision::AmpF16, AttentionKernel::Fused);
    let scale = simt_grads.iter().fold(0f32, |m, g| m.max(g.abs()));
    for (edge, ctx) in coop {
        // The step's attention (2 heads of 8) takes the tensor-core body here.
        assert_eq!(
            FlashBody::Auto.resolve(&ctx.caps, &[Storage::F16], 8),
            FlashBody::Coop
        );
        let (loss, grads, _) = gpt_step(ctx, Precision::AmpF16, AttentionKernel::Fused);
        let tol = 4e-3;
        assert!(
            (loss - simt_loss).abs() <= tol * simt_loss.abs(),
            "{edge}x{edge}: loss {loss} vs SIMT {simt_loss}"
        );
        for (i, (a, b)) in grads.iter().zip(&simt_grads).enumerate() {
            assert!(
                (a - b).abs() <= 4.0 * tol * scale,
                "{edge}x{edge}: gradient {i}: tensor cores {a}, SIMT {b} (largest {scale})"
            );
        }
        let (again, _, _) = gpt_step(ctx, Precision::AmpF16, AttentionKernel::Fused);
        assert_eq!(again.to_bits(), loss.to_bits(), "{edge}x{edge}: rerun");
    }
}

/// Without tensor cores Auto never picks the body, and forcing it is a one-line error that
/// says why; f32 storage is refused even where tensor cores are used.
#[test]
fn auto_never_picks_tensor_cores_without_them_and_forcing_them_is_a_clear_error() {
    let ctx = ctx_native();
    let f16 = ctx.storage_for(DType::F16);
    let used = ctx.caps.tensor_cores.config().is_some();
    let auto = FlashBody::Auto.resolve(&ctx.caps, &[f16], 16);
    assert_eq!(auto == FlashBody::Coop, used && f16 == Storage::F16);
    let p = FlashParams {
        batch: 1,
        heads: 1,
        t: 3,
        width: 16,
        scale: 0.25,
        body: FlashBody::Coop,
        ..Default::default()
    };
    let tensors = |dtype| {
        (
            Tensor::zeros(ctx, &[1, 3, 48], dtype),
            Tensor::zeros(ctx, &[1, 3, 16], dtype),
        )
    };
    let lse = Tensor::zeros(ctx, &[3], DType::F32);
    if !used {
        let (qkv, y) = tensors(DType::F16);
        expect_err(
            forward(ctx, &qkv, &y, &lse, &p),
            &["tensor cores", "not used"],
        );
    }
    let (qkv, y) = tensors(DType::F32);
    let needles: &[&str] = if used {
        &["native f16", "f32"]
    } else {
        &["tensor cores"]
    };
    expect_err(forward(ctx, &qkv, &y, &lse, &p), needles);
    for edge in [8, 16] {
        if let Some(coop) = coop_ctx(edge, "the tensor-core fused attention's refusals") {
            let qkv = Tensor::zeros(coop, &[1, 3, 3 * 72], DType::F16);
            let y = Tensor::zeros(coop, &[1, 3, 72], DType::F16);
            let lse = Tensor::zeros(coop, &[3], DType::F32);
            let wide = FlashParams { width: 72, ..p };
            expect_err(forward(coop, &qkv, &y, &lse, &wide), &["head size 72"]);
        }
    }
}
