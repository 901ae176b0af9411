//! The data-parallel step path without MPI: a run distributed over [`Solo`] (a world of one
//! process) takes the same path as a rank of `mpirun -np N` (forward + backward, gradients
//! and losses read back, all-reduced, written back, then unscale/clip/optimizer in a second
//! submission) and must give exactly the bits of the single-process step, which never takes
//! that path: per-step loss, scale and skip flags and the final parameters. The MPI runs
//! themselves are in `tests/mpi.rs` (feature `mpi`).

mod common;

use std::rc::Rc;

use webgpu_amp::amp::policy::Precision;
use webgpu_amp::data::{Dataset, Labels, Normalization, Split, embedded};
use webgpu_amp::dist::Solo;
use webgpu_amp::nn::{LossKind, preset};
use webgpu_amp::optim::OptimizerConfig;
use webgpu_amp::train::{Run, RunConfig, RunSummary, StepConfig};

fn config(
    precision: Precision,
    batch: usize,
    steps: u64,
    accum: usize,
    clip: Option<f32>,
) -> RunConfig {
    RunConfig::new(
        StepConfig::new(
            precision,
            LossKind::CrossEntropy,
            OptimizerConfig::adam(1e-3),
        )
        .scaler_enabled(precision == Precision::AmpF16)
        .clip_grad_norm(clip)
        .grad_accum(accum),
        batch,
    )
    .steps(steps)
    .seed(3)
}

/// Trains `cfg` once as a single process and once distributed over [`Solo`]; returns both
/// summaries and final parameters.
fn both(split: &Split, cfg: RunConfig) -> [(RunSummary, Vec<f32>); 2] {
    // A context of its own: host waits are counted per context, and tests run in parallel.
    let ctx = &common::ctx_owned();
    let train = &split.train;
    let spec = preset("mlp", &train.sample_shape, train.output_dim()).unwrap();
    let init = spec.init_params(1);
    [false, true].map(|distributed| {
        let mut run = Run::new(ctx, spec.clone(), cfg.clone(), train, &init, None).unwrap();
        if distributed {
            run.distribute(ctx, train, Rc::new(Solo)).unwrap();
        }
        let summary = run.run(ctx, split, &mut |_| {}).unwrap();
        let params = run
            .trainer
            .store
            .download(ctx)
            .unwrap()
            .into_iter()
            .flat_map(|(_, v)| v)
            .collect();
        (summary, params)
    })
}

fn bits(summary: &RunSummary) -> Vec<(u64, u32, u32, u32, bool)> {
    summary
        .history
        .iter()
        .map(|s| {
            (
                s.step,
                s.loss.to_bits(),
                s.scale.to_bits(),
                s.scale_after.to_bits(),
                s.skipped,
            )
        })
        .collect()
}

fn assert_same_bits(
    what: &str,
    [(single, p1), (solo, p2)]: &[(RunSummary, Vec<f32>); 2],
    steps: u64,
) {
    assert_eq!(
        single.history.len() as u64,
        steps,
        "{what}: single-process steps"
    );
    assert_eq!(bits(single), bits(solo), "{what}: step stats differ");
    assert_eq!(
        single.val_loss.map(f32::to_bits),
        solo.val_loss.map(f32::to_bits),
        "{what}: validation loss"
    );
    let same = p1
        .iter()
        .zip(p2)
        .filter(|(a, b)| a.to_bits() == b.to_bits())
        .count();
    assert_eq!(
        same,
        p1.len(),
        "{what}: {} of {} parameters differ",
        p1.len() - same,
        p1.len()
    );
    assert!(
        single.distributed.is_none(),
        "{what}: a single process has no ranks"
    );
    let d = solo
        .distributed
        .as_ref()
        .expect("the distributed run reports its ranks");
    assert_eq!(
        (d.ranks, d.local_nonfinite_steps.clone()),
        (1, vec![0]),
        "{what}"
    );
    // One more host wait per optimizer step: the read-back of the gradients.
    assert!(
        solo.host_waits >= single.host_waits + steps,
        "{what}: {} host waits distributed, {} single",
        solo.host_waits,
        single.host_waits
    );
}

fn mnist() -> Split {
    let mut split = embedded::mnist_split(Some(Normalization::MNIST)).unwrap();
    // Validation over 200 images is enough to compare the two paths.
    let v = split.validation.take().unwrap();
    split.validation = Some(v.slice(0..200, "val").unwrap());
    split
}

#[test]
fn the_exchange_path_of_one_rank_changes_no_bits_f32() {
    let runs = both(&mnist(), config(Precision::F32, 32, 5, 1, None));
    assert_same_bits("f32", &runs, 5);
}

#[test]
fn the_exchange_path_of_one_rank_changes_no_bits_amp_f16_accumulated_and_clipped() {
    let runs = both(&mnist(), config(Precision::AmpF16, 16, 4, 2, Some(1.0)));
    assert_same_bits("amp-f16 --grad-accum 2 --clip-grad-norm 1", &runs, 4);
}

/// An input past f16's range overflows the amp-f16 forward: the step is skipped and the
/// scale backs off in both paths, and the distributed one counts the step as locally
/// non-finite (the flag it all-reduces).
#[test]
fn an_overflowing_batch_is_skipped_the_same_way() {
    let (n, dim) = (64, 784);
    let mut x: Vec<f32> = (0..n * dim)
        .map(|i| ((i * 7919) % 255) as f32 / 255.0)
        .collect();
    x[5 * dim..6 * dim].fill(1e6);
    let labels = (0..n as u32).map(|i| i % 10).collect();
    let train = Dataset::new(
        "overflow",
        x,
        vec![1, 28, 28],
        Labels::Classes {
            labels,
            num_classes: 10,
        },
    )
    .unwrap();
    let split = Split::train_only(train);
    let mut cfg = config(Precision::AmpF16, 8, 3, 1, None);
    cfg.shuffle = false;
    cfg.validate = false;
    let runs = both(&split, cfg);
    let [(single, _), (solo, _)] = &runs;
    let skipped: Vec<bool> = single.history.iter().map(|s| s.skipped).collect();
    assert_eq!(
        skipped,
        [true, false, false],
        "sample 5 is in the first batch"
    );
    assert_eq!(
        single.history[1].scale, 32768.0,
        "the scale backed off once"
    );
    assert_eq!(bits(single), bits(solo));
    assert_eq!(
        solo.distributed.as_ref().unwrap().local_nonfinite_steps,
        [1]
    );
}
