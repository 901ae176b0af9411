//! When the host waits for the GPU (docs/guide/execution-model.md): never inside a step; while
//! training, only when every slot of the stats ring is in flight (the GPU a whole ring of
//! steps behind), and then for the oldest step's submission alone, each such wait counted
//! as a throttle wait and as a host wait; outside the step loop, for drains and explicit
//! reads. Each test owns its context: host waits are counted per context.
//!
//! Runs are much longer than the ring. With the default 8 slots they check the accounting;
//! but on Mesa's lavapipe every `queue.submit` blocks until the previous submission has
//! finished (a driver wait inside wgpu's submit, which no ring can see), so no more than
//! two steps are ever in flight there and an 8-slot ring never fills. The same runs with a
//! 1-slot ring ([`Trainer::set_stats_ring_slots`]) take the throttle path on every step
//! after the first, on any adapter slower than the host's submit.

mod common;

use webgpu_amp::GpuContext;
use webgpu_amp::data::{Normalization, Split, embedded};
use webgpu_amp::gpu::ReadbackRing;
use webgpu_amp::nn::preset;
use webgpu_amp::optim::OptimizerConfig;
use webgpu_amp::train::{RING, Run, RunConfig, StepConfig, Trainer};

/// Batch size that keeps lavapipe busy for longer than a step takes to submit. 24 steps of
/// it stay within the first epoch of the embedded set's 8,000 training images.
const BATCH: usize = 64;
/// Steps of every long run: three rings' worth.
const STEPS: u64 = 3 * RING as u64;

fn split() -> Split {
    embedded::mnist_split(Some(Normalization::MNIST)).unwrap()
}

fn step_config(grad_accum: usize) -> StepConfig {
    common::runs::amp_step(OptimizerConfig::adam(1e-3)).grad_accum(grad_accum)
}

fn run_config(steps: u64) -> RunConfig {
    common::runs::steps_run(step_config(1), BATCH, steps)
}

fn mlp_run(ctx: &GpuContext, split: &Split, steps: u64, slots: usize) -> Run {
    let train = &split.train;
    let spec = preset("mlp", &train.sample_shape, train.output_dim()).unwrap();
    let init = spec.init_params(0);
    let mut run = Run::new(ctx, spec, run_config(steps), train, &init, None).unwrap();
    run.trainer.set_stats_ring_slots(ctx, slots).unwrap();
    run.trainer.network(ctx, BATCH).unwrap();
    run
}

fn mlp_trainer(ctx: &GpuContext, split: &Split, grad_accum: usize, slots: usize) -> Trainer {
    let train = &split.train;
    let spec = preset("mlp", &train.sample_shape, train.output_dim()).unwrap();
    let init = spec.init_params(0);
    let mut t = Trainer::new(ctx, spec, step_config(grad_accum), 10, &init).unwrap();
    t.set_stats_ring_slots(ctx, slots).unwrap();
    t
}

/// `Run::run` (the CLI's loop) without validation or checkpoints, within one epoch: besides
/// its throttle waits, the host waits exactly twice, for the final drain and the final read
/// of the scale.
const END_OF_RUN_WAITS: u64 = 2;

/// A 1-slot ring must fill and throttle. Except on GL: wgpu's GL backend (llvmpipe) runs
/// each submission to completion inside `queue.submit`, so no step is ever in flight when
/// the next is submitted, the ring cannot fill and the throttle path cannot run. There the
/// accounting is still checked (every host wait counted, none a throttle wait), and the
/// test says loudly that the throttle path itself was NOT checked (Vulkan checks it).
fn expect_throttles(throttles: u64) {
    if common::ctx().report.backend == "gl" {
        common::not_checked(&format!(
            "the throttle path on GL (`{}` finishes every submission inside queue.submit, so \
             the ring never fills; {throttles} throttle waits); checked on Vulkan",
            common::ctx().report.name
        ));
        assert_eq!(
            throttles, 0,
            "GL throttled although submit finishes the work"
        );
        return;
    }
    assert!(
        throttles > 0,
        "the 1-slot ring never filled: the throttle path did not run"
    );
}

#[test]
fn a_run_shorter_than_the_ring_never_throttles() {
    let ctx = common::ctx_owned();
    let split = split();
    let steps = RING as u64 - 2;
    let mut run = mlp_run(&ctx, &split, steps, RING);
    let summary = run.run(&ctx, &split, &mut |_| {}).unwrap();
    assert_eq!(summary.steps, steps);
    assert_eq!(summary.history.len() as u64, steps);
    assert_eq!(summary.throttle_waits, 0);
    assert_eq!(summary.host_waits, END_OF_RUN_WAITS);
}

/// `Run::run` over [`STEPS`] steps with a `slots`-deep ring: every host wait is a counted
/// throttle wait or one of the end-of-run reads. Returns the throttle waits.
fn long_run(slots: usize) -> u64 {
    let ctx = common::ctx_owned();
    let split = split();
    let mut run = mlp_run(&ctx, &split, STEPS, slots);
    let summary = run.run(&ctx, &split, &mut |_| {}).unwrap();
    assert_eq!(summary.history.len() as u64, STEPS);
    assert_eq!(
        summary.host_waits,
        summary.throttle_waits + END_OF_RUN_WAITS,
        "{slots} slots: a host wait that is neither a throttle wait nor an end-of-run read: \
         {summary:?}"
    );
    assert!(summary.throttle_waits < STEPS);
    summary.throttle_waits
}

#[test]
fn a_long_run_counts_every_wait() {
    long_run(RING);
}

#[test]
fn a_long_run_on_a_one_slot_ring_throttles_and_counts_every_wait() {
    expect_throttles(long_run(1));
}

/// Drives `Run::advance` by hand with a `slots`-deep ring: it never waits; when it reports
/// being throttled, the wait is for the oldest step in flight only, one counted host wait.
/// Returns the throttle waits.
fn advance_by_hand(slots: usize) -> u64 {
    let ctx = common::ctx_owned();
    let split = split();
    let mut run = mlp_run(&ctx, &split, STEPS, slots);
    let mut reported = 0u64;
    loop {
        let before = ctx.host_waits();
        let advance = run.advance(&ctx, &split.train, usize::MAX).unwrap();
        assert_eq!(ctx.host_waits(), before, "advance waited on the GPU");
        assert!(run.trainer.steps_in_flight() <= slots);
        reported += advance.events.len() as u64;
        if advance.done {
            break;
        }
        assert!(
            advance.throttled,
            "stopped early without a reason: {advance:?}"
        );
        assert_eq!(
            run.trainer.steps_in_flight(),
            slots,
            "throttled with a free slot"
        );
        let oldest = run.trainer.steps_submitted() - slots as u64 + 1;
        let throttles = run.trainer.throttle_waits();
        run.trainer.wait_for_slot(&ctx).unwrap();
        let waited = run.trainer.throttle_waits() - throttles;
        assert_eq!(
            ctx.host_waits() - before,
            waited,
            "a wait not counted as a throttle wait"
        );
        assert!(waited <= 1);
        if waited == 1 {
            assert_eq!(run.trainer.last_throttle_wait(), Some(oldest));
        }
        assert!(
            run.trainer.steps_in_flight() < slots,
            "the wait freed no slot"
        );
    }
    let before = ctx.host_waits();
    reported += run.trainer.finish(&ctx).unwrap().len() as u64;
    assert_eq!(ctx.host_waits() - before, 1, "finish is one wait");
    assert_eq!(reported, STEPS);
    run.trainer.throttle_waits()
}

#[test]
fn advance_never_waits_and_a_throttle_wait_is_for_the_oldest_step() {
    advance_by_hand(RING);
    expect_throttles(advance_by_hand(1));
}

/// The trainer's own throttle (direct `train_batch` calls, as in the examples) with a
/// `slots`-deep ring: when submitting step k finds the ring full, it waits for step
/// k − slots alone, once, counted. Returns the throttle waits.
fn train_batch_loop(slots: usize) -> u64 {
    let ctx = common::ctx_owned();
    let split = split();
    let train = &split.train;
    let mut t = mlp_trainer(&ctx, &split, 1, slots);
    t.network(&ctx, BATCH).unwrap();
    let batch = train.gather(&(0..BATCH).collect::<Vec<_>>()).unwrap();
    for k in 1..=STEPS {
        let (waits, throttles) = (ctx.host_waits(), t.throttle_waits());
        t.train_batch(&ctx, BATCH, batch.input(), batch.targets())
            .unwrap();
        let throttled = t.throttle_waits() - throttles;
        assert_eq!(
            ctx.host_waits() - waits,
            throttled,
            "step {k}: an uncounted wait"
        );
        assert!(throttled <= 1);
        if throttled == 1 {
            assert_eq!(t.last_throttle_wait(), Some(k - slots as u64), "step {k}");
        }
        assert!(
            k > slots as u64 || throttled == 0,
            "step {k} throttled before the ring filled"
        );
    }
    // Stats taken while waiting stay queued for poll_stats/finish: none is lost.
    assert_eq!(t.finish(&ctx).unwrap().len(), STEPS as usize);
    t.throttle_waits()
}

#[test]
fn train_batch_throttles_on_the_oldest_slot_only() {
    train_batch_loop(RING);
    expect_throttles(train_batch_loop(1));
}

/// One submit per micro-batch: with gradient accumulation the optimizer step, unscale and
/// scale update ride in the last micro-batch's submit.
#[test]
fn gradient_accumulation_submits_once_per_micro_batch() {
    let ctx = common::ctx_owned();
    let split = split();
    let train = &split.train;
    let mut t = mlp_trainer(&ctx, &split, 3, RING);
    let batch = train.gather(&(0..32).collect::<Vec<_>>()).unwrap();
    for micro in 1..=6u64 {
        t.train_batch(&ctx, 32, batch.input(), batch.targets())
            .unwrap();
        assert_eq!(t.submissions(), micro);
        assert_eq!(
            t.steps_submitted(),
            micro / 3,
            "a step completes every 3rd submit"
        );
    }
    let stats = t.finish(&ctx).unwrap();
    assert_eq!(stats.len(), 2);
    assert!(
        stats
            .iter()
            .all(|s| s.loss.is_finite() && s.scale == 65536.0)
    );
}

/// The ring itself: first in, first out; full means no buffer and no submit; waiting for the
/// oldest slot is one counted wait and makes exactly that slot ready.
#[test]
fn readback_ring_is_fifo_and_waits_for_one_slot() {
    let ctx = common::ctx_owned();
    let src = ctx.alloc_storage("src", 16);
    ctx.queue
        .write_buffer(src.raw(), 0, bytemuck::cast_slice(&[1u32, 2, 3, 4]));
    let mut ring: ReadbackRing<u32> = ReadbackRing::new(&ctx, "ring", 2, 4);
    for tag in [10u32, 20] {
        let staging = ring.next_buffer().expect("a free slot");
        let mut encoder = ctx.device.create_command_encoder(&Default::default());
        let offset = 4 * (tag as u64 / 10 - 1);
        encoder.copy_buffer_to_buffer(src.raw(), offset, staging.raw(), 0, 4);
        ring.submit(&ctx, encoder, tag).unwrap();
    }
    assert!(ring.is_full() && ring.next_buffer().is_none());
    let encoder = ctx.device.create_command_encoder(&Default::default());
    common::expect_err(ring.submit(&ctx, encoder, 30), &["read-back ring full"]);
    assert_eq!(ring.oldest(), Some(&10));
    let before = ctx.host_waits();
    ring.wait_oldest(&ctx).unwrap();
    assert!(ctx.host_waits() - before <= 1 && ring.waits() <= 1);
    let word = |_tag: u32, bytes: &[u8]| u32::from_le_bytes(bytes[..4].try_into().unwrap());
    let read = |ring: &mut ReadbackRing<u32>| ring.take_ready(|tag, bytes| (tag, word(tag, bytes)));
    assert_eq!(read(&mut ring), Some((10, 1)));
    ring.wait_oldest(&ctx).unwrap();
    assert_eq!(read(&mut ring), Some((20, 2)));
    assert_eq!(ring.in_flight(), 0);
    assert_eq!(ctx.host_waits() - before, ring.waits());
    // Nothing in flight: nothing to wait for.
    ring.wait_oldest(&ctx).unwrap();
    assert_eq!(ctx.host_waits() - before, ring.waits());
}

/// `bench step` reports the waits of its timed steps: the throttle waits plus the one wait
/// for the last step.
#[test]
fn bench_step_reports_host_and_throttle_waits() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_webgpu-amp"))
        .args([
            "bench",
            "step",
            "--models",
            "mlp",
            "--precisions",
            "f32,amp-f16",
        ])
        .args(["--steps", "12", "--batch-size", "8", "--json"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let steps: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["kind"] == "step")
        .collect();
    assert!(steps.len() >= 2, "{stdout}");
    for v in steps {
        let waits = v["host_waits"].as_u64().expect("host_waits");
        let throttles = v["throttle_waits"].as_u64().expect("throttle_waits");
        assert_eq!(waits, throttles + 1, "{v}");
    }
}
