//! Train a CNN on MNIST under AMP with the library's training loop ([`Run`]), printing the
//! loss as it goes and the validation (or test) accuracy after every epoch.
//!
//! ```text
//! cargo run --example mnist [-- --epochs N --precision P --model M --batch-size B --seed S]
//! ```
//!
//! Data: full MNIST (60,000 training, 10,000 test images) when `data/mnist` (or
//! `$WEBGPU_AMP_DATA_DIR/mnist`) exists, which `bash scripts/fetch-data.sh mnist` downloads;
//! otherwise the subset embedded in the crate (MNIST's test set split 8,000 / 2,000).
//! Defaults: `mnist-cnn`, `amp-f16`, one epoch, batch 64, Adam 1e-3.

use webgpu_amp::amp::policy::Precision;
use webgpu_amp::data::{DataSource, data_dir};
use webgpu_amp::nn::LossKind;
use webgpu_amp::nn::{ModelSpec, preset};
use webgpu_amp::optim::OptimizerConfig;
use webgpu_amp::train::StepConfig;
use webgpu_amp::train::{Event, Run, RunConfig};
use webgpu_amp::{Error, GpuContext, GpuOptions, Result};

const LOG_EVERY: u64 = 50;

struct Args {
    epochs: u64,
    precision: Precision,
    model: String,
    batch_size: usize,
    seed: u64,
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        epochs: 1,
        precision: Precision::AmpF16,
        model: "mnist-cnn".into(),
        batch_size: 64,
        seed: 0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it
            .next()
            .ok_or_else(|| Error::InvalidArgument(format!("{flag} needs a value")))?;
        let bad = |e: std::num::ParseIntError| Error::InvalidArgument(format!("{flag}: {e}"));
        match flag.as_str() {
            "--epochs" => args.epochs = value.parse().map_err(bad)?,
            "--precision" => args.precision = Precision::parse(&value)?,
            "--model" => args.model = value,
            "--batch-size" => args.batch_size = value.parse().map_err(bad)?,
            "--seed" => args.seed = value.parse().map_err(bad)?,
            other => {
                return Err(Error::InvalidArgument(format!(
                    "unknown argument `{other}` (expected --epochs N, --precision P, --model M, \
                     --batch-size B, --seed S)"
                )));
            }
        }
    }
    Ok(args)
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    let args = parse_args()?;
    let full = data_dir().join("mnist");
    let (source, what) = if full.is_dir() {
        (
            DataSource::Mnist,
            format!("full MNIST from {}", full.display()),
        )
    } else {
        (
            DataSource::EmbeddedMnist,
            format!(
                "the embedded MNIST subset ({} not found; `bash scripts/fetch-data.sh mnist` \
                 downloads the full set)",
                full.display()
            ),
        )
    };
    let split = source.load(true)?;
    let eval_name = if split.validation.is_some() {
        "validation"
    } else {
        "test"
    };
    let train = &split.train;

    let spec = if args.model.ends_with(".json") {
        let text = std::fs::read_to_string(&args.model)
            .map_err(|e| Error::Model(format!("{}: {e}", args.model)))?;
        ModelSpec::from_json(&text)?
    } else {
        preset(&args.model, &train.sample_shape, train.output_dim())?
    };
    let init = spec.init_params(args.seed);

    let ctx = GpuContext::new(&GpuOptions::from_env()?)?;
    println!("data: {what}");
    println!(
        "{} training images, {} {eval_name} images | device: {} | precision: {}",
        train.n,
        split.eval_set().map_or(0, |s| s.n),
        ctx.report.name,
        args.precision
    );
    print!("{}", spec.summary());

    let config = RunConfig::new(
        StepConfig::new(
            args.precision,
            LossKind::CrossEntropy,
            OptimizerConfig::adam(1e-3),
        ),
        args.batch_size,
    )
    .epochs(args.epochs)
    .seed(args.seed);
    let steps_per_epoch = train.n.div_ceil(args.batch_size);
    let mut run = Run::new(&ctx, spec, config, train, &init, None)?;
    let summary = run.run(&ctx, &split, &mut |event| match event {
        Event::Step { stats, epoch, .. } if stats.step % LOG_EVERY == 0 => println!(
            "epoch {} step {}/{}: loss {:.4}, scale {}{}",
            epoch + 1,
            stats.step,
            steps_per_epoch as u64 * args.epochs,
            stats.loss,
            stats.scale,
            if stats.skipped { " (skipped)" } else { "" }
        ),
        Event::Epoch(e) => println!(
            "Epoch {}: {eval_name} loss {:.4}, {eval_name} accuracy {:.2}% | {:.0} images/s, \
             peak GPU memory {:.2} MB",
            e.epoch + 1,
            e.val_loss.unwrap_or(f32::NAN),
            100.0 * e.val_accuracy.unwrap_or(f32::NAN),
            e.images_per_sec,
            e.peak_gpu_bytes as f64 / 1e6
        ),
        _ => {}
    })?;
    println!(
        "done: {} steps, {:.1} ms/step, {} skipped step(s), final loss scale {}",
        summary.steps, summary.ms_per_step, summary.skipped_steps, summary.final_scale
    );
    Ok(())
}
