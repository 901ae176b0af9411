//! A long run stays flat: the mlp preset trains 3,000 optimizer steps through `Run::advance`,
//! the loop the CLI, the app and the browser share, on the tutorials' synthetic regression
//! data (10 inputs; 4,000 samples at batch 8: six epochs, so epoch changes are crossed).
//! After a warm-up, nothing grows:
//!
//! - GPU objects created (counted where wgpu makes them: buffers by the allocator, bind
//!   groups by `GpuContext::kernel`, pipelines by the pipeline cache) stay exactly where
//!   the warm-up left them;
//! - the allocator's live GPU bytes stay exactly equal;
//! - host RSS (`/proc/self/statm`) stays within a small allowance of its warm-up figure.
//!
//! The figures, taken every 250 steps, are printed (visible in plain `cargo test` output).
//! Small inputs and batch 8 keep a step short on lavapipe (the mlp on MNIST's 784 inputs
//! takes about six times as long per step); what this test looks for, objects and bytes
//! that pile up step after step, does not depend on the layers' widths.

mod common;

use std::time::Instant;

use webgpu_amp::GpuContext;
use webgpu_amp::amp::policy::Precision;
use webgpu_amp::amp::scaler::ScalerConfig;
use webgpu_amp::data::{Split, synthetic};
use webgpu_amp::nn::{LossKind, preset};
use webgpu_amp::optim::OptimizerConfig;
use webgpu_amp::train::{Run, RunConfig, StepConfig};

/// Steps, and the steps before the baseline: the first steps compile pipelines and fill the
/// host allocator's pools, and the first epoch changes make their batch orders.
const STEPS: u64 = 3000;
const WARM_UP: u64 = 1000;
/// On GL, which runs the same loop (its one difference, finishing each submission inside
/// `queue.submit`, is covered by tests/host_waits.rs), a third of it: llvmpipe's GL takes
/// three to four and a half times as long per step as lavapipe's Vulkan (262 s for all
/// 3,000 steps on this 2-core machine, where CI runs both).
const STEPS_GL: u64 = 1000;
const WARM_UP_GL: u64 = 500;
const BATCH: usize = 8;
const SAMPLES: usize = 4000;
const SAMPLE_EVERY: u64 = 250;
/// Host memory a run may gain after warm-up without a leak: glibc's malloc keeps freed
/// blocks and arenas as it likes, which moves RSS by a few hundred kB either way (measured
/// on this machine: see the printed table). A leak of 1 kB per step would add 2 MB.
const RSS_ALLOWANCE: u64 = 1 << 20;

/// Host resident bytes, from `/proc/self/statm` (pages).
fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Figures {
    step: u64,
    rss: Option<u64>,
    gpu_live_bytes: u64,
    buffers_created: u64,
    bind_groups_created: u64,
    pipelines_created: u64,
}

impl Figures {
    fn now(ctx: &GpuContext, step: u64) -> Self {
        Figures {
            step,
            rss: rss_bytes(),
            gpu_live_bytes: ctx.memory().live_bytes,
            buffers_created: ctx.memory().allocations,
            bind_groups_created: ctx.allocator.bind_groups(),
            pipelines_created: ctx.pipelines_created(),
        }
    }

    /// Everything but the host's RSS, which may move a little.
    fn gpu(&self) -> (u64, u64, u64, u64) {
        (
            self.gpu_live_bytes,
            self.buffers_created,
            self.bind_groups_created,
            self.pipelines_created,
        )
    }

    fn row(&self) -> String {
        format!(
            "{:>6} {:>12} {:>12} {:>8} {:>12} {:>10}",
            self.step,
            self.rss.map_or("-".into(), |r| r.to_string()),
            self.gpu_live_bytes,
            self.buffers_created,
            self.bind_groups_created,
            self.pipelines_created
        )
    }
}

#[test]
fn three_thousand_steps_create_nothing_and_hold_memory_flat_after_warm_up() {
    let started = Instant::now();
    let ctx = common::ctx_owned();
    let (steps, warm_up) = if ctx.report.backend == "gl" {
        common::not_checked(&format!(
            "the soak's steps {} to {STEPS} on GL (it runs {STEPS_GL}, flat after \
             {WARM_UP_GL}); all {STEPS} run on Vulkan",
            STEPS_GL + 1
        ));
        (STEPS_GL, WARM_UP_GL)
    } else {
        (STEPS, WARM_UP)
    };
    let split = Split::train_only(synthetic::regression(SAMPLES, 10, 1, 0).unwrap());
    let train = &split.train;
    let spec = preset("mlp", &train.sample_shape, train.output_dim()).unwrap();
    let init = spec.init_params(0);
    let config = RunConfig {
        step: StepConfig {
            precision: Precision::AmpF16,
            loss: LossKind::Mse,
            optimizer: OptimizerConfig::adam(1e-3),
            scaler: ScalerConfig::default(),
            clip_grad_norm: Some(1.0),
            label_smoothing: 0.0,
            grad_accum: 1,
            buffers_on_skip: Default::default(),
            lr_schedule: Default::default(),
            numerics: None,
            numerics_histograms: false,
            numerics_one_pass_each: false,
        },
        batch_size: BATCH,
        epochs: None,
        steps: Some(steps),
        seed: 0,
        shuffle: true,
        save_every: None,
        save_path: None,
        validate: false,
        eval: Default::default(),
        max_skipped_steps: webgpu_amp::train::MAX_SKIPPED_STEPS,
        interrupt: None,
        augment: None,
        flip_tta: false,
    };
    let mut run = Run::new(&ctx, spec, config, train, &init, None).unwrap();
    let (mut samples, mut steps_reported, mut epochs_ended) = (Vec::new(), 0u64, 0u64);
    let mut last_loss = f32::NAN;
    while !run.done() {
        let next_sample = (run.progress.step / SAMPLE_EVERY + 1) * SAMPLE_EVERY;
        let budget = (next_sample - run.progress.step) as usize;
        let advance = run.advance(&ctx, train, budget).unwrap();
        for event in &advance.events {
            if let webgpu_amp::train::Event::Step { stats, .. } = event {
                steps_reported += 1;
                last_loss = stats.loss;
            }
        }
        epochs_ended += advance.epoch_ended.is_some() as u64;
        if advance.throttled {
            run.trainer.wait_for_slot(&ctx).unwrap();
        }
        if advance.steps > 0 && run.progress.step.is_multiple_of(SAMPLE_EVERY) {
            samples.push(Figures::now(&ctx, run.progress.step));
        }
    }
    steps_reported += run.trainer.finish(&ctx).unwrap().len() as u64;
    let seconds = started.elapsed().as_secs_f64();

    // Shown in plain `cargo test` output too, where `println!` of a passing test is hidden.
    let mut table = format!(
        "\nsoak: {steps} steps of mlp (amp-f16, Adam, clip 1.0) at batch {BATCH} on `{}`, \
         {epochs_ended} epochs ended, final loss {last_loss}, {seconds:.1} s in all\n\
         {:>6} {:>12} {:>12} {:>8} {:>12} {:>10}",
        ctx.report.name, "step", "host RSS B", "GPU live B", "buffers", "bind groups", "pipelines"
    );
    for s in &samples {
        table += &format!("\n{}", s.row());
    }
    common::show(&table);
    assert_eq!(steps_reported, steps, "every step's stats came back");
    // Random targets: nothing to learn beyond their mean, but every loss must be a number.
    assert!(last_loss.is_finite(), "loss {last_loss}");
    let per_epoch = train.n.div_ceil(BATCH) as u64;
    assert_eq!(
        epochs_ended,
        steps / per_epoch,
        "epochs of {per_epoch} batches"
    );
    assert_eq!(
        samples.len() as u64,
        steps / SAMPLE_EVERY,
        "a sample every {SAMPLE_EVERY}"
    );

    let base = *samples
        .iter()
        .find(|s| s.step == warm_up)
        .expect("a sample at the end of the warm-up");
    for s in samples.iter().filter(|s| s.step > warm_up) {
        assert_eq!(
            s.gpu(),
            base.gpu(),
            "step {}: GPU bytes or created buffers / bind groups / pipelines moved since \
             step {warm_up} (live bytes, buffers, bind groups, pipelines)",
            s.step
        );
        match (s.rss, base.rss) {
            (Some(now), Some(then)) => assert!(
                now <= then + RSS_ALLOWANCE,
                "step {}: host RSS {now} B, {} kB over its {then} B at step {warm_up} \
                 (allowance {} kB)",
                s.step,
                (now - then) / 1024,
                RSS_ALLOWANCE / 1024
            ),
            _ => {
                common::not_checked("host RSS over a long run: no /proc/self/statm here");
                break;
            }
        }
    }
}
