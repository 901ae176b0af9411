//! The history race, reproduced and fixed (issue 22).
//!
//! wgpu fires a `map_async` callback in whichever thread's poll collected it, so with one
//! device shared by several threads (the tests, the app beside egui) a thread's wait for a
//! submission can return before another thread has fired that submission's map callback.
//! The end of a run used to take only the stats slots already marked landed, so such a
//! step stayed in flight and vanished from the history (`tests/checkpoint.rs` failed now and
//! then with "step count, left 8, right 9").
//!
//! The hook `WEBGPU_AMP_TEST_LATE_MAPS_MS` delivers every map's outcome that many ms after
//! its callback ran, from another thread: the window made wide and certain. Each test here
//! re-runs itself in a child process with the hook set (it is read once per process).

mod common;

use std::process::Command;

use webgpu_amp::GpuContext;
use webgpu_amp::data::{Normalization, Split, embedded};
use webgpu_amp::gpu::{LATE_MAPS_ENV, MapState, ReadbackRing};
use webgpu_amp::nn::preset;
use webgpu_amp::optim::OptimizerConfig;
use webgpu_amp::train::{Run, RunConfig};

const LATE_MS: &str = "40";

/// Run the test `name` in a child process with the hook set, or, in that child, run `body`.
fn with_late_maps(name: &str, body: impl FnOnce()) {
    if std::env::var(LATE_MAPS_ENV).is_ok() {
        body();
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(exe)
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(LATE_MAPS_ENV, LATE_MS)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{name} under the hook failed:\n{text}"
    );
    assert!(
        text.contains("1 passed"),
        "{name} did not run in the child:\n{text}"
    );
}

/// The hook opens the window: after a full device sync a map is still pending, so reading
/// the ring right after the wait (what `Trainer::finish` did) finds nothing to take.
#[test]
fn the_hook_leaves_a_finished_submissions_map_pending() {
    with_late_maps("the_hook_leaves_a_finished_submissions_map_pending", || {
        let ctx = common::ctx_owned();
        let source = ctx.alloc_storage("source", 16);
        let values: [f32; 4] = [1.0, 2.0, 3.0, 4.0];
        ctx.queue
            .write_buffer(source.raw(), 0, bytemuck::cast_slice(&values));
        let mut ring: ReadbackRing<u32> = ReadbackRing::new(&ctx, "ring", 2, 16);
        let encoder = ctx.device.create_command_encoder(&Default::default());
        ring.submit_copy(&ctx, encoder, &source, 7).unwrap();
        ctx.sync().unwrap();
        assert!(
            ring.take_ready(|tag, _| tag).is_none(),
            "the map landed inside the wait: the hook does not open the window"
        );
        // The fix: wait for the callback itself.
        ring.wait_all(&ctx).unwrap();
        let taken =
            ring.take_ready(|tag, bytes| (tag, bytemuck::cast_slice::<u8, f32>(bytes).to_vec()));
        assert_eq!(taken, Some((7, vec![1.0, 2.0, 3.0, 4.0])));
        assert_eq!(ring.in_flight(), 0);
    });
}

fn split() -> Split {
    embedded::mnist_split(Some(Normalization::MNIST)).unwrap()
}

fn run_config(steps: u64) -> RunConfig {
    common::runs::steps_run(
        common::runs::amp_step(OptimizerConfig::sgd(0.05)),
        16,
        steps,
    )
}

/// Every step reaches the history, in order, when every map lands late: through the end of
/// the run (8-slot ring: nothing throttles) and through the throttle wait (1-slot ring).
fn every_step_arrives(slots: usize) {
    let ctx: GpuContext = common::ctx_owned();
    let split = split();
    let steps = 10;
    let train = &split.train;
    let spec = preset("mlp", &train.sample_shape, train.output_dim()).unwrap();
    let init = spec.init_params(0);
    let mut run = Run::new(&ctx, spec, run_config(steps), train, &init, None).unwrap();
    run.trainer.set_stats_ring_slots(&ctx, slots).unwrap();
    let summary = run.run(&ctx, &split, &mut |_| {}).unwrap();
    let numbers: Vec<u64> = summary.history.iter().map(|s| s.step).collect();
    assert_eq!(
        numbers,
        (1..=steps).collect::<Vec<_>>(),
        "{slots} slots: steps lost or out of order"
    );
    assert!(summary.history.iter().all(|s| s.loss.is_finite()));
    assert_eq!(run.trainer.steps_in_flight(), 0);
}

#[test]
fn every_step_arrives_when_maps_land_late() {
    with_late_maps("every_step_arrives_when_maps_land_late", || {
        every_step_arrives(8)
    });
}

#[test]
fn every_step_arrives_through_throttle_waits_when_maps_land_late() {
    with_late_maps(
        "every_step_arrives_through_throttle_waits_when_maps_land_late",
        || every_step_arrives(1),
    );
}

/// The signal reports a pending map as pending until its outcome arrives.
#[test]
fn a_map_is_pending_until_its_outcome_lands() {
    with_late_maps("a_map_is_pending_until_its_outcome_lands", || {
        let ctx = common::ctx_owned();
        let buffer = ctx.alloc(
            "staging",
            16,
            wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        );
        let signal = webgpu_amp::gpu::MapSignal::new();
        assert_eq!(signal.state(), MapState::Free);
        signal.map_read(buffer.raw());
        assert_eq!(signal.state(), MapState::Pending);
        ctx.sync().unwrap();
        assert_eq!(
            signal.state(),
            MapState::Pending,
            "landed before the hook's delay"
        );
        signal.wait(&ctx, None).unwrap();
        assert_eq!(signal.state(), MapState::Ready);
    });
}
