//! The tutorial's FP32-vs-AMP comparison: `SimpleCNN` (conv 3→32, ReLU, max-pool, conv
//! 32→64, ReLU, max-pool, fc → 10) on random 64×3×32×32 batches with random labels, Adam 1e-3,
//! cross-entropy, first in f32, then under autocast (f16) with a GradScaler, from the same
//! initial weights on the same batches. For each run it prints the elapsed time and the peak
//! GPU memory, then the speed-up and the memory ratio.
//!
//! ```text
//! cargo run --example simple_cnn [-- --batches N --batch-size B --seed S]
//! ```
//!
//! On a software adapter (lavapipe) a step takes about a second; `--batches 20` is quicker.
//! Speed-ups from f16 need hardware with fast f16 arithmetic; on a CPU rasteriser AMP can be
//! slower than f32, and the numbers say so.

use std::time::Instant;

use webgpu_amp::amp::policy::Precision;
use webgpu_amp::data::Rng;
use webgpu_amp::nn::LossKind;
use webgpu_amp::nn::{ModelSpec, preset};
use webgpu_amp::optim::OptimizerConfig;
use webgpu_amp::train::{BatchTargets, StepConfig, StepStats, Trainer};
use webgpu_amp::{Error, GpuContext, GpuOptions, Result};

const CLASSES: usize = 10;
const IMAGE: [usize; 3] = [3, 32, 32];
const REPORT_EVERY: u64 = 20;

struct Args {
    batches: u64,
    batch_size: usize,
    seed: u64,
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        batches: 100,
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
            "--batches" => args.batches = value.parse().map_err(bad)?,
            "--batch-size" => args.batch_size = value.parse().map_err(bad)?,
            "--seed" => args.seed = value.parse().map_err(bad)?,
            other => {
                return Err(Error::InvalidArgument(format!(
                    "unknown argument `{other}` (expected --batches N, --batch-size B, --seed S)"
                )));
            }
        }
    }
    if args.batches == 0 || args.batch_size == 0 {
        return Err(Error::InvalidArgument(
            "--batches and --batch-size must be at least 1".into(),
        ));
    }
    Ok(args)
}

/// Batch `i`: `torch.randn(B, 3, 32, 32)` and `torch.randint(0, 10, (B,))`, drawn from a
/// generator seeded by `(seed, i)` so both runs see the same batches.
fn batch(seed: u64, i: u64, batch_size: usize) -> (Vec<f32>, Vec<u32>) {
    let mut rng = Rng::from_words(&[seed, i, 0x434e_4e42]);
    let n = batch_size * IMAGE.iter().product::<usize>();
    let x = (0..n).map(|_| rng.normal() as f32).collect();
    let labels = (0..batch_size)
        .map(|_| rng.below(CLASSES as u64) as u32)
        .collect();
    (x, labels)
}

struct Measured {
    seconds: f64,
    peak_bytes: u64,
    final_loss: f32,
    skipped: u64,
}

fn train(
    ctx: &GpuContext,
    spec: &ModelSpec,
    init: &[(String, Vec<f32>)],
    precision: Precision,
    args: &Args,
) -> Result<Measured> {
    // report_memory("Before training"): start the peak from what is live now.
    ctx.allocator.reset_peak();
    let start = Instant::now();
    let config = StepConfig::new(
        precision,
        LossKind::CrossEntropy,
        OptimizerConfig::adam(1e-3),
    );
    let mut trainer = Trainer::new(ctx, spec.clone(), config, CLASSES, init)?;
    let mut last: Option<StepStats> = None;
    let mut skipped = 0;
    let mut report = |stats: Vec<StepStats>| {
        for s in stats {
            skipped += s.skipped as u64;
            if s.step % REPORT_EVERY == 0 {
                println!("Batch [{}/{}], Loss: {:.4}", s.step, args.batches, s.loss);
            }
            last = Some(s);
        }
    };
    for i in 0..args.batches {
        let (x, labels) = batch(args.seed, i, args.batch_size);
        trainer.train_batch(ctx, args.batch_size, &x, BatchTargets::Classes(&labels))?;
        // Step results arrive a few steps late, without stalling the GPU.
        report(trainer.poll_stats(ctx));
    }
    report(trainer.finish(ctx)?);
    let seconds = start.elapsed().as_secs_f64();
    let peak_bytes = ctx.memory().peak_bytes;
    println!("Elapsed time: {seconds:.4} seconds");
    println!(
        "After training - Peak memory allocated: {:.2} MB",
        peak_bytes as f64 / 1e6
    );
    let last = last.ok_or_else(|| Error::Gpu("no step results came back".into()))?;
    Ok(Measured {
        seconds,
        peak_bytes,
        final_loss: last.loss,
        skipped,
    })
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
    let ctx = GpuContext::new(&GpuOptions::from_env()?)?;
    println!(
        "Using device: {} ({} backend, f16 storage: {:?})",
        ctx.report.name, ctx.report.backend, ctx.f16_storage
    );
    let spec = preset("simple-cnn", &IMAGE, CLASSES)?;
    // Both runs start from the same weights (the tutorial re-initialises; same seed here).
    let init = spec.init_params(args.seed);
    println!(
        "SimpleCNN: {} parameters, {} batches of {}×3×32×32",
        spec.num_parameters(),
        args.batches,
        args.batch_size
    );

    println!("\n--- Standard FP32 Training ---");
    let f32_run = train(&ctx, &spec, &init, Precision::F32, &args)?;
    println!("--- Standard FP32 Training Complete ---");

    println!("\n--- Mixed-Precision (AMP) Training ---");
    let amp_run = train(&ctx, &spec, &init, Precision::AmpF16, &args)?;
    println!("--- Mixed-Precision (AMP) Training Complete ---");

    println!(
        "\n{:<10} {:>12} {:>16} {:>12}",
        "", "time (s)", "peak GPU (MB)", "final loss"
    );
    for (name, m) in [("FP32", &f32_run), ("AMP f16", &amp_run)] {
        println!(
            "{name:<10} {:>12.2} {:>16.2} {:>12.4}",
            m.seconds,
            m.peak_bytes as f64 / 1e6,
            m.final_loss
        );
    }
    println!(
        "AMP speed-up: {:.2}x (FP32 time / AMP time); AMP peak memory: {:.2}x of FP32's",
        f32_run.seconds / amp_run.seconds,
        amp_run.peak_bytes as f64 / f32_run.peak_bytes as f64
    );
    if amp_run.skipped > 0 {
        println!(
            "GradScaler skipped {} of {} AMP steps (inf/NaN gradients), as PyTorch's would",
            amp_run.skipped, args.batches
        );
    }
    Ok(())
}
