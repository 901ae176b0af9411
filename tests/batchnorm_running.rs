//! BatchNorm's running statistics: PyTorch's update (momentum, the cumulative average of
//! `momentum=None`, the unbiased variance, `num_batches_tracked` as an int64), the commit that
//! keeps or discards a step's updates on the GradScaler's found-inf (and PyTorch's behaviour,
//! pytorch#88474, behind a switch), and the same bits run to run.

mod common;

use std::sync::Arc;

use common::batchnorm_ref::{self as bnref, BnTensors};
use common::values::{quantised, run, storages, upload};
use common::{assert_close, bits, ctx, rand_vec};
use webgpu_amp::gpu::GpuBuffer;
use webgpu_amp::ops::batchnorm::{BatchNorm, RunningStats};
use webgpu_amp::ops::buffers::{self, OnSkippedStep};
use webgpu_amp::{DType, GpuContext, Tensor};

fn dims(shape: &[usize]) -> (usize, usize, usize) {
    (shape[0], shape[1], shape[2..].iter().product())
}

/// A GradScaler state buffer whose found-inf word is `found_inf`.
fn scaler_state(ctx: &GpuContext, found_inf: bool) -> Arc<GpuBuffer> {
    let mut words = [0u32; 10];
    words[webgpu_amp::amp::scaler::WORD_SCALE] = 65536f32.to_bits();
    words[webgpu_amp::amp::scaler::WORD_FOUND_INF] = found_inf as u32;
    let b = ctx.alloc_storage("test scaler state", 40);
    ctx.queue
        .write_buffer(b.raw(), 0, bytemuck::cast_slice(&words));
    b
}

#[test]
fn running_statistics_follow_pytorch_over_several_batches() {
    // Three batches per setting, each on its own data; momentum 0.1, 0.5 and None (the
    // cumulative average), in every storage (the statistics are f32 whatever x is).
    for (name, ctx, act) in storages() {
        for momentum in [Some(0.1f32), Some(0.5), None] {
            let shape: &[usize] = &[4, 3, 5, 7];
            let d = dims(shape);
            let bn = BatchNorm {
                momentum,
                ..BatchNorm::default()
            };
            let running = RunningStats::new(ctx, "test running", d.1).unwrap();
            let (mut mean, mut var, mut count) = (vec![0.0f64; d.1], vec![1.0f64; d.1], 0i64);
            for batch in 0..3u64 {
                let xv: Vec<f32> = quantised(shape.iter().product(), 50 + batch, 2.0, act)
                    .iter()
                    .map(|&v| act.round(v + batch as f32))
                    .collect();
                let t = BnTensors::new(ctx, (&xv, shape), (None, None), (act, DType::F32));
                t.train(ctx, &bn, Some(&running));
                let stats = bnref::batch_stats(&xv, d);
                bnref::running_update(
                    (&mut mean, &mut var, &mut count),
                    &stats,
                    d.0 * d.2,
                    momentum.map(f64::from),
                );
            }
            let (gm, gv, gc) = running.read(ctx).unwrap();
            let what = format!("{name} momentum={momentum:?}");
            assert_close(
                &format!("{what} running_mean"),
                &gm,
                &bnref::to_f32(&mean),
                1e-6,
                1e-5,
            );
            assert_close(
                &format!("{what} running_var"),
                &gv,
                &bnref::to_f32(&var),
                1e-6,
                1e-5,
            );
            assert_eq!(gc, 3, "{what}: num_batches_tracked");
        }
    }
}

#[test]
fn num_batches_tracked_is_an_int64_that_carries() {
    let ctx = ctx();
    let running = RunningStats::new(ctx, "test running", 2).unwrap();
    let start = u32::MAX as i64; // the low word overflows on the next batch
    running.write(ctx, &[0.0, 0.0], &[1.0, 1.0], start).unwrap();
    let xv = rand_vec(2 * 2 * 3, 61);
    let t = BnTensors::new(
        ctx,
        (&xv, &[2, 2, 3]),
        (None, None),
        (DType::F32, DType::F32),
    );
    // momentum=None: the factor 1 / count comes from both words.
    let bn = BatchNorm {
        momentum: None,
        ..BatchNorm::default()
    };
    t.train(ctx, &bn, Some(&running));
    let (mean, _, count) = running.read(ctx).unwrap();
    assert_eq!(count, start + 1);
    let batch_mean = bnref::batch_stats(&xv, (2, 2, 3))[0].0;
    let want = batch_mean / (start + 1) as f64;
    assert!(
        (mean[0] as f64 - want).abs() <= 1e-6 * want.abs() + 1e-15,
        "{} vs {want}",
        mean[0]
    );
}

#[test]
fn a_skipped_step_leaves_the_running_statistics_bit_identical() {
    let ctx = ctx();
    let shape: &[usize] = &[4, 3, 6];
    let c = shape[1];
    let committed = RunningStats::new(ctx, "committed", c).unwrap();
    let pending = RunningStats::new(ctx, "pending", c).unwrap();
    let bn = BatchNorm::default();
    let (clean, skip) = (scaler_state(ctx, false), scaler_state(ctx, true));
    let commit = |state: &Arc<GpuBuffer>, on_skip| {
        let copies = (committed.buffer(), pending.buffer());
        buffers::commit(ctx, state, copies, committed.words(), on_skip).unwrap()
    };
    let step = |seed: u64, state: &Arc<GpuBuffer>, on_skip, micro_batches: u64| {
        for m in 0..micro_batches {
            let xv = rand_vec(shape.iter().product(), seed * 10 + m);
            let t = BnTensors::new(ctx, (&xv, shape), (None, None), (DType::F32, DType::F32));
            t.train(ctx, &bn, Some(&pending));
        }
        run(ctx, &[commit(state, on_skip)]);
    };
    // A clean step (two micro-batches) is kept: committed = pending.
    step(1, &clean, OnSkippedStep::Keep, 2);
    let after_clean = committed.read(ctx).unwrap();
    assert_eq!(after_clean.2, 2, "both micro-batches counted");
    assert_eq!(after_clean, pending.read(ctx).unwrap());
    // Skipped steps: bit for bit what the clean step left, the pending copy rolled back too.
    for seed in 2..4 {
        step(seed, &skip, OnSkippedStep::Keep, 3);
        let now = committed.read(ctx).unwrap();
        assert_eq!(
            bits(&now.0),
            bits(&after_clean.0),
            "running_mean after a skipped step"
        );
        assert_eq!(
            bits(&now.1),
            bits(&after_clean.1),
            "running_var after a skipped step"
        );
        assert_eq!(
            now.2, after_clean.2,
            "num_batches_tracked after a skipped step"
        );
        assert_eq!(pending.read(ctx).unwrap(), now, "pending rolled back");
    }
    // PyTorch's behaviour (pytorch#88474): the skipped step's updates are kept. The same data
    // through an uncommitted reference gives the same values.
    let reference = RunningStats::new(ctx, "reference", c).unwrap();
    let (m, v, n) = after_clean;
    reference.write(ctx, &m, &v, n).unwrap();
    for micro in 0..2 {
        let xv = rand_vec(shape.iter().product(), 90 + micro);
        let t = BnTensors::new(ctx, (&xv, shape), (None, None), (DType::F32, DType::F32));
        t.train(ctx, &bn, Some(&reference));
    }
    step(9, &skip, OnSkippedStep::UpdateAnyway, 2);
    let kept = committed.read(ctx).unwrap();
    assert_eq!(
        kept,
        reference.read(ctx).unwrap(),
        "PyTorch switch: the skipped step's updates kept"
    );
    assert_eq!(kept.2, n + 2);
}

#[test]
fn commit_rejects_mismatched_buffers() {
    let ctx = ctx();
    let a = RunningStats::new(ctx, "a", 3).unwrap();
    let b = RunningStats::new(ctx, "b", 4).unwrap();
    let state = scaler_state(ctx, false);
    let keep = OnSkippedStep::Keep;
    common::expect_err(
        buffers::commit(ctx, &state, (a.buffer(), b.buffer()), b.words(), keep),
        &["10 words to commit, the copies hold 32 and 40 bytes"],
    );
    common::expect_err(
        buffers::commit(ctx, &state, (a.buffer(), a.buffer()), a.words(), keep),
        &["must be two buffers"],
    );
    let tiny = ctx.alloc_storage("tiny", 8);
    common::expect_err(
        buffers::commit(ctx, &tiny, (b.buffer(), a.buffer()), a.words(), keep),
        &["no found-inf word"],
    );
}

#[test]
fn running_statistics_at_an_offset_are_updated_in_place() {
    // A model's statistics live in its buffer store after other buffers: the same values as
    // statistics of their own, and the words around them untouched.
    let ctx = ctx();
    let shape: &[usize] = &[4, 3, 5];
    let c = shape[1];
    let own = RunningStats::new(ctx, "own", c).unwrap();
    let words = 5 + 2 * c + 2 + 3;
    let mut init = vec![0x7fc0_1234u32; words];
    init[5 + c..5 + 2 * c].fill(1f32.to_bits());
    init[5..5 + c].fill(0);
    init[5 + 2 * c..5 + 2 * c + 2].fill(0);
    let store = ctx.alloc_storage("store", 4 * words as u64);
    ctx.queue
        .write_buffer(store.raw(), 0, bytemuck::cast_slice(&init));
    let placed = RunningStats::at(store.clone(), 5, c).unwrap();
    assert_eq!(placed.offset(), 5);
    let bn = BatchNorm::default();
    for seed in 0..2 {
        let xv = rand_vec(shape.iter().product(), 40 + seed);
        for r in [&own, &placed] {
            let t = BnTensors::new(ctx, (&xv, shape), (None, None), (DType::F32, DType::F32));
            t.train(ctx, &bn, Some(r));
        }
    }
    assert_eq!(placed.read(ctx).unwrap(), own.read(ctx).unwrap());
    assert_eq!(placed.read(ctx).unwrap().2, 2);
    let after: Vec<u32> =
        bytemuck::pod_collect_to_vec(&ctx.read_bytes(&store, 0, 4 * words as u64).unwrap());
    assert_eq!(after[..5], init[..5], "words before untouched");
    assert_eq!(
        after[5 + 2 * c + 2..],
        init[5 + 2 * c + 2..],
        "words after untouched"
    );
    // Eval reads them at their offset too: the same output as the statistics of their own.
    let xv = rand_vec(shape.iter().product(), 50);
    let out = |r: &RunningStats| {
        let t = BnTensors::new(ctx, (&xv, shape), (None, None), (DType::F32, DType::F32));
        run(
            ctx,
            &[bn.eval_forward(ctx, (&t.x, &t.y), t.affine(), r).unwrap()],
        );
        t.y.read_f32(ctx).unwrap()
    };
    assert_eq!(bits(&out(&placed)), bits(&out(&own)));
    // Statistics past the buffer's end are refused.
    common::expect_err(
        RunningStats::at(store.clone(), words - 2 * c - 1, c),
        &["do not fit a buffer of"],
    );
}

#[test]
fn statistics_and_gradients_are_the_same_bits_run_to_run() {
    // 8 × 64 × 64 values per channel: 32 chunks in each reduction.
    let ctx = ctx();
    let shape: &[usize] = &[8, 3, 64, 64];
    let c = shape[1];
    let n: usize = shape.iter().product();
    let xv: Vec<f32> = rand_vec(n, 71).iter().map(|v| v * 3.0 + 1.0).collect();
    let dyv = rand_vec(n, 72);
    let wv = rand_vec(c, 73);
    let bn = BatchNorm::default();
    let once = || {
        let t = BnTensors::new(
            ctx,
            (&xv, shape),
            (Some(&wv), None),
            (DType::F32, DType::F32),
        );
        let running = RunningStats::new(ctx, "running", c).unwrap();
        let dy = upload(ctx, &dyv, shape, DType::F32);
        let dx = Tensor::zeros(ctx, shape, DType::F32);
        let (dw, db) = (
            Tensor::zeros(ctx, &[c], DType::F32),
            Tensor::zeros(ctx, &[c], DType::F32),
        );
        t.train_and_backward(ctx, &bn, Some(&running), (&dy, &dx), (Some(&dw), Some(&db)));
        let (m, v, _) = running.read(ctx).unwrap();
        let read = |t: &Tensor| bits(&t.read_f32(ctx).unwrap());
        [
            read(&t.saved),
            read(&t.y),
            read(&dx),
            read(&dw),
            read(&db),
            bits(&m),
            bits(&v),
        ]
    };
    let first = once();
    assert_eq!(first, once(), "a second run gives other bits");
    // And the statistics are right over many chunks.
    let stats = bnref::batch_stats(&xv, dims(shape));
    let mean: Vec<f32> = stats.iter().map(|s| s.0 as f32).collect();
    let saved: Vec<f32> = first[0].iter().map(|&b| f32::from_bits(b)).collect();
    assert_close("mean over 32 chunks", &saved[..c], &mean, 1e-6, 1e-5);
}
