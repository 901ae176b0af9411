//! Resource faults through the library: a lost device mid-run ends the run with a clear error
//! and leaves the last periodic checkpoint loadable; a batch over the device's binding limit
//! is an error with the limit and a hint, and the context stays usable afterwards.

mod common;

use webgpu_amp::Error;
use webgpu_amp::amp::policy::Precision;
use webgpu_amp::data::{Split, synthetic};
use webgpu_amp::nn::LossKind;
use webgpu_amp::nn::preset;
use webgpu_amp::optim::OptimizerConfig;
use webgpu_amp::train::StepConfig;
use webgpu_amp::train::checkpoint::Checkpoint;
use webgpu_amp::train::{Event, Run, RunConfig};

fn config(save: Option<std::path::PathBuf>, batch_size: usize) -> RunConfig {
    let step = StepConfig::new(
        Precision::AmpF16,
        LossKind::Mse,
        OptimizerConfig::adam(1e-3),
    );
    common::runs::steps_run(step, batch_size, 40).save(save.as_ref().map(|_| 3), save)
}

#[test]
fn lost_device_stops_the_run_and_keeps_the_last_checkpoint() {
    // A context of its own: this test destroys its device.
    let ctx = common::ctx_owned();
    let dir = std::env::temp_dir().join(format!("webgpu-amp-faults-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("run.safetensors");
    let _ = std::fs::remove_file(&path);

    let train = synthetic::regression(64, 10, 1, 0).unwrap();
    let spec = preset("mlp", &train.sample_shape, 1).unwrap();
    let init = spec.init_params(0);
    let split = Split::train_only(train.clone());
    let mut run = Run::new(
        &ctx,
        spec,
        config(Some(path.clone()), 8),
        &train,
        &init,
        None,
    )
    .unwrap();
    let mut saves = Vec::new();
    let result = run.run(&ctx, &split, &mut |event| {
        if let Event::Saved { step, .. } = event {
            saves.push(*step);
            if *step == 6 {
                // What a driver reset or an unplugged GPU looks like to wgpu.
                ctx.device.destroy();
            }
        }
    });
    let err = match result {
        Ok(summary) => panic!("the run went on after the device was lost: {summary:?}"),
        Err(e) => e,
    };
    assert!(matches!(err, Error::DeviceLost(_)), "{err:?}");
    let message = err.to_string();
    eprintln!("{message}");
    assert!(!message.contains('\n'), "one line: {message}");
    assert!(
        message.contains("the GPU device was lost") && message.contains("(step 6), is intact"),
        "{message}"
    );
    assert_eq!(saves, vec![3, 6]);
    let saved = Checkpoint::load(&path).expect("the last checkpoint loads");
    assert_eq!(saved.progress.step, 6);
    assert!(
        saved
            .params
            .iter()
            .all(|t| t.values.iter().all(|v| v.is_finite()))
    );
    // The context says so from now on, instead of panicking.
    assert!(matches!(ctx.check(), Err(Error::DeviceLost(_))));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn batch_over_the_binding_limit_is_an_error_and_the_context_stays_usable() {
    let ctx = common::ctx();
    let limit = ctx.caps.max_storage_buffer_binding_size;
    // An mlp's hidden layer is batch × 256 values; pick a batch whose f32 hidden activation
    // is just over the limit (no data that size is needed: planning fails first).
    let batch = (limit / (256 * 4) + 1) as usize;
    let train = synthetic::regression(8, 10, 1, 0).unwrap();
    let spec = preset("mlp", &train.sample_shape, 1).unwrap();
    let init = spec.init_params(0);
    let mut cfg = config(None, 8);
    cfg.step.precision = Precision::F32;
    cfg.step.scaler.enabled = false;
    let mut run = Run::new(ctx, spec, cfg, &train, &init, None).unwrap();
    let err = match run.trainer.network(ctx, batch) {
        Ok(_) => panic!("batch {batch} planned over a {limit}-byte binding limit"),
        Err(e) => e,
    };
    let message = err.to_string();
    match &err {
        Error::Resource {
            needed, limit: l, ..
        } => {
            assert!(*needed > limit, "{message}");
            assert_eq!(*l, limit);
        }
        other => panic!("expected a resource error, got {other:?}"),
    }
    assert!(
        message.contains(&format!("batch {batch}"))
            && message.contains("max_storage_buffer_binding_size")
            && message.contains(&format!("at most {}", batch - 1)),
        "{message}"
    );
    // Nothing was left behind: the same trainer still plans and trains a small batch.
    ctx.check().expect("no stray GPU errors");
    let x = vec![0.5f32; 8 * 10];
    let y = vec![0.25f32; 8];
    run.trainer
        .train_batch(ctx, 8, &x, webgpu_amp::train::BatchTargets::Values(&y))
        .unwrap();
    let stats = run.trainer.finish(ctx).unwrap();
    assert_eq!(stats.len(), 1);
    assert!(stats[0].loss.is_finite());
}
