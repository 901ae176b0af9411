//! `webgpu-amp bench step`: ms per training step, samples/s (and tokens/s for a GPT) and peak
//! GPU memory per model and precision, and the GradScaler's overhead (amp-f16 step time with
//! and without it), as JSON lines and a table.

use std::io::Write;

use clap::Args;
use webgpu_amp::amp::policy::Precision;
use webgpu_amp::nn::LossKind;
use webgpu_amp::train::profile::profile_steps;
use webgpu_amp::train::{MAX_BATCH_SIZE, Setting, StepConfig, StepProfile, Trainer};
use webgpu_amp::{Error, GpuContext, Result};

use super::bench_timer::{StepPasses, process_cpu_secs, step_passes};
use super::bench_workload::{batch_for, workload};
use super::numbers::{number, setting};
use super::out::outln;
use super::{AttentionArgs, DeviceArgs};

/// `--steps`: timed steps per measurement.
const STEPS_RANGE: &str = "1 to 1000000";
const ROUNDS_RANGE: &str = "1 to 100";
const MAX_STEPS: usize = 1_000_000;

#[derive(Args, Debug)]
pub struct BenchStepArgs {
    /// Models to measure: presets with image input (mlp, mnist-cnn, simple-cnn) on random
    /// images; ResNet presets (resnet18-cifar at batch 128 is issue 40's row; resnet20-cifar,
    /// resnet56-cifar, resnet-tiny, resnet8-fashion) on random images of their input with kuangliu's step (SGD,
    /// momentum 0.9, weight decay 5e-4); GPT presets (gpt-tiny, gpt-char) on windows of the
    /// embedded text with nanoGPT's step (AdamW, clipping at 1); or Llama presets (llama-tiny,
    /// smollm2-135m) on the same windows (their characters' ids in the model's vocabulary)
    /// with AdamW.
    #[arg(long, value_delimiter = ',', default_value = "mlp,mnist-cnn")]
    models: Vec<String>,
    /// A Llama's training window in tokens (Inferena's protocol: 128); default its own.
    #[arg(long, allow_negative_numbers = true,
          value_parser = number::<usize>(super::resolve::SEQ_LEN_RANGE))]
    seq_len: Option<usize>,
    /// Precision modes to measure.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "f32,amp-f16,amp-bf16,f16"
    )]
    precisions: Vec<String>,
    /// Samples per step, 1 to 16777216 (the adapter's limits bound it further).
    #[arg(long, default_value_t = 64, allow_negative_numbers = true,
          value_parser = setting::<usize>(Setting::BatchSize))]
    batch_size: usize,
    /// Timed steps per measurement (after 3 warm-up steps), 1 to 1000000.
    #[arg(long, default_value_t = 20, allow_negative_numbers = true,
          value_parser = number::<usize>(STEPS_RANGE))]
    steps: usize,
    /// Print only JSON lines (no table).
    #[arg(long)]
    json: bool,
    /// Also profile each model and precision: GPU time per kernel and per phase (forward,
    /// loss, backward, unscale, clip, optimizer, scale update) from timestamp queries, and
    /// host time per step (encode, submit, read-back), as a table and a JSON line.
    #[arg(long)]
    profile: bool,
    /// Also measure each model and precision with per-layer numerics counted (`every:N`,
    /// as train's --numerics): a second row, and a JSON line with the overhead against the
    /// same step without them (each side the fastest of --rounds alternating measurements).
    #[arg(long, value_name = "every:N")]
    numerics: Option<String>,
    /// With --numerics: measurements of each side, alternating, 1 to 100 (default 3; more
    /// steady a figure on a noisy machine; each side keeps its fastest).
    #[arg(long, allow_negative_numbers = true, value_parser = number::<usize>(ROUNDS_RANGE))]
    rounds: Option<usize>,
    #[command(flatten)]
    attention: AttentionArgs,
    #[command(flatten)]
    device: DeviceArgs,
}

impl BenchStepArgs {
    /// `--rounds`, or its default.
    fn rounds(&self) -> usize {
        self.rounds.unwrap_or(3)
    }
}

#[derive(serde::Serialize)]
struct StepBench {
    kind: &'static str,
    adapter: String,
    f16_storage: String,
    model: String,
    /// GPT only: how its attention ran (`--attention`).
    #[serde(skip_serializing_if = "Option::is_none")]
    attention: Option<&'static str>,
    precision: String,
    scaler: bool,
    /// Per-layer numerics counted every N steps (absent: off).
    #[serde(skip_serializing_if = "Option::is_none")]
    numerics: Option<u64>,
    /// With numerics: the counting passes a counted step adds.
    #[serde(skip_serializing_if = "Option::is_none")]
    numerics_passes: Option<usize>,
    batch_size: usize,
    steps: usize,
    ms_per_step: f64,
    /// CPU time of this process per step (user + system, Linux only): on a software adapter
    /// (lavapipe) the kernels run on the host's cores, so this is the work a step costs,
    /// which a busy machine does not inflate as it does the wall clock.
    #[serde(skip_serializing_if = "Option::is_none")]
    cpu_ms_per_step: Option<f64>,
    /// Samples (images, or token sequences for a GPT) per second.
    images_per_sec: f64,
    /// GPT only: tokens (batch × block size) per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    tokens_per_sec: Option<f64>,
    peak_gpu_bytes: u64,
    /// Language models: Inferena's three timings of the step (forward, forward + loss +
    /// backward, the whole step), its kernels timed alike.
    #[serde(skip_serializing_if = "Option::is_none")]
    passes: Option<StepPasses>,
    /// Blocking waits of the host over the timed steps: the throttle waits plus the final
    /// wait for the last step.
    host_waits: u64,
    /// Waits because every stats slot was in flight (each for the oldest step only).
    throttle_waits: u64,
}

#[allow(clippy::too_many_arguments)]
fn measure(
    ctx: &GpuContext,
    args: &BenchStepArgs,
    model: &str,
    b: usize,
    precision: Precision,
    (scaler, numerics): (bool, Option<u64>),
    profile: bool,
) -> Result<(StepBench, Option<StepProfile>)> {
    let attention = args.attention.kernel()?;
    let w = workload(ctx, model, (b, args.seq_len), attention)?;
    let attention = w.tokens.map(|_| attention.name());
    let init = w.spec.init_params(0);
    let config = StepConfig::new(precision, LossKind::CrossEntropy, w.optimizer)
        .scaler_enabled(scaler)
        .clip_grad_norm(w.clip_grad_norm)
        .numerics(numerics);
    ctx.allocator.reset_peak();
    let mut trainer = Trainer::new(ctx, w.spec, config, w.classes, &init)?;
    let x = w.batch.input();
    for _ in 0..3 {
        stop_if_interrupted(model, precision)?;
        trainer.train_batch(ctx, b, x, w.batch.targets())?;
    }
    trainer.finish(ctx)?;
    let waits = ctx.host_waits();
    let throttles = trainer.throttle_waits();
    let cpu = process_cpu_secs();
    let start = std::time::Instant::now();
    for _ in 0..args.steps {
        stop_if_interrupted(model, precision)?;
        trainer.train_batch(ctx, b, x, w.batch.targets())?;
    }
    trainer.finish(ctx)?;
    let secs = start.elapsed().as_secs_f64();
    let cpu_ms = match (cpu, process_cpu_secs()) {
        (Some(a), Some(b)) => Some(1000.0 * (b - a) / args.steps as f64),
        _ => None,
    };
    let waits_after = ctx.host_waits();
    let throttles_after = trainer.throttle_waits();
    // A language model's step as Inferena cuts it (not with the numerics' second row).
    let passes = match (w.tokens, numerics) {
        (Some(_), None) => {
            let batch = (w.batch.input(), w.batch.targets());
            Some(step_passes(ctx, &mut trainer, b, batch, args.steps)?)
        }
        _ => None,
    };
    let profiled = if profile {
        let y = || w.batch.targets();
        Some(profile_steps(ctx, &mut trainer, b, x, y, args.steps)?)
    } else {
        None
    };
    let bench = StepBench {
        kind: "step",
        adapter: ctx.report.name.clone(),
        f16_storage: format!("{:?}", ctx.f16_storage).to_lowercase(),
        model: model.into(),
        attention,
        precision: precision.name().into(),
        scaler,
        numerics,
        numerics_passes: trainer.numerics_passes(b),
        batch_size: b,
        steps: args.steps,
        ms_per_step: 1000.0 * secs / args.steps as f64,
        cpu_ms_per_step: cpu_ms,
        images_per_sec: (b * args.steps) as f64 / secs,
        tokens_per_sec: w.tokens.map(|t| (b * t * args.steps) as f64 / secs),
        peak_gpu_bytes: ctx.memory().peak_bytes,
        passes,
        host_waits: waits_after - waits,
        throttle_waits: throttles_after - throttles,
    };
    Ok((bench, profiled))
}

/// SIGINT/SIGTERM: stop between steps, the lines printed so far complete.
fn stop_if_interrupted(model: &str, precision: Precision) -> Result<()> {
    super::interrupted::check(|| {
        format!(
            "bench step: interrupted while measuring {model} under {precision}; the lines \
             above are complete"
        )
    })
}

/// The step `without` measured again with the counting passes of `numerics`, alternating
/// with more measurements without them (`--rounds` each): the fastest with, and the fastest
/// ms/step without (a shared or busy machine only ever slows a measurement down).
fn numerics_rounds(
    ctx: &GpuContext,
    args: &BenchStepArgs,
    model: &str,
    b: usize,
    p: Precision,
    without: &StepBench,
    numerics: Option<u64>,
) -> Result<(StepBench, (f64, Option<f64>))> {
    let scaler = without.scaler;
    let mut off = (without.ms_per_step, without.cpu_ms_per_step);
    let mut with: Option<StepBench> = None;
    let min = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    for round in 0..args.rounds() {
        let mut counted = measure(ctx, args, model, b, p, (scaler, numerics), false)?.0;
        if let Some(w) = &with {
            counted.cpu_ms_per_step = min(counted.cpu_ms_per_step, w.cpu_ms_per_step);
            counted.ms_per_step = counted.ms_per_step.min(w.ms_per_step);
        }
        with = Some(counted);
        if round + 1 < args.rounds() {
            let again = measure(ctx, args, model, b, p, (scaler, None), false)?.0;
            off = (
                off.0.min(again.ms_per_step),
                min(off.1, again.cpu_ms_per_step),
            );
        }
    }
    Ok((with.expect("at least one round"), off))
}

pub fn run(args: &BenchStepArgs) -> Result<()> {
    if !(1..=MAX_BATCH_SIZE).contains(&args.batch_size) {
        return Err(Error::InvalidArgument(format!(
            "--batch-size must be {}, got {}",
            Setting::BatchSize.range(),
            args.batch_size
        )));
    }
    if !(1..=MAX_STEPS).contains(&args.steps) {
        return Err(Error::InvalidArgument(format!(
            "--steps must be {STEPS_RANGE}, got {}",
            args.steps
        )));
    }
    super::resolve::check_seq_len(args.seq_len)?;
    if let Some(rounds) = args.rounds.filter(|r| !(1..=100).contains(r)) {
        return Err(Error::InvalidArgument(format!(
            "--rounds must be {ROUNDS_RANGE}, got {rounds}"
        )));
    }
    if args.rounds.is_some() && args.numerics.is_none() {
        return Err(Error::InvalidArgument(
            "--rounds N takes effect with --numerics only (it alternates measurements with \
             and without the counting passes), and no --numerics was given; add --numerics \
             every:1, or leave --rounds out"
                .into(),
        ));
    }
    let precisions: Vec<Precision> = args
        .precisions
        .iter()
        .map(|p| Precision::parse(p))
        .collect::<Result<_>>()?;
    let numerics = match &args.numerics {
        Some(s) => webgpu_amp::train::numerics::parse_every(s)
            .map_err(|e| Error::InvalidArgument(format!("--numerics: {e}")))?,
        None => None,
    };
    let ctx = GpuContext::new(&args.device.options()?)?;
    super::note_unused_table(&ctx)?;
    if !args.json {
        // A note, not data: a closed stderr is no reason to stop.
        let _ = writeln!(
            std::io::stderr(),
            "adapter: {} ({:?} f16 storage)",
            ctx.report.name,
            ctx.f16_storage
        );
    }
    let mut rows = Vec::new();
    for model in &args.models {
        let batch = batch_for(model, args.batch_size, args.seq_len)?;
        let mut amp_with = None;
        for &p in &precisions {
            // Where it stands, on stderr (a note: measurements of big models on a CPU adapter
            // take minutes).
            let _ = writeln!(
                std::io::stderr(),
                "bench step: {model} under {p} at batch {batch}, {} steps",
                args.steps
            );
            let scaler = p.scaler_enabled_by_default();
            let (r, profiled) = measure(&ctx, args, model, batch, p, (scaler, None), args.profile)?;
            if let Some(prof) = profiled {
                if !args.json {
                    eprintln!("\n{} {}: {}", model, p.name(), prof.table(8));
                }
                let line = serde_json::json!({
                    "kind": "profile", "model": model, "precision": p.name(),
                    "batch_size": batch, "profile": prof,
                });
                println!("{line}");
            }
            if p == Precision::AmpF16 {
                amp_with = Some(r.ms_per_step);
            }
            outln!("{}", serde_json::to_string(&r).expect("serialises"))?;
            if numerics.is_some() {
                let (counted, off) = numerics_rounds(&ctx, args, model, batch, p, &r, numerics)?;
                outln!("{}", serde_json::to_string(&counted).expect("serialises"))?;
                outln!(
                    "{}",
                    serde_json::json!({
                        "kind": "numerics_overhead", "adapter": ctx.report.name,
                        "model": model, "precision": p.name(), "numerics": args.numerics,
                        "batch_size": batch, "rounds": args.rounds(),
                        "ms_per_step_without": off.0, "ms_per_step_with": counted.ms_per_step,
                        "overhead_percent": 100.0 * (counted.ms_per_step - off.0) / off.0,
                        "cpu_ms_per_step_without": off.1,
                        "cpu_ms_per_step_with": counted.cpu_ms_per_step,
                        "cpu_overhead_percent": off.1.zip(counted.cpu_ms_per_step)
                            .map(|(a, b)| 100.0 * (b - a) / a),
                        "host_waits_without": r.host_waits, "host_waits_with": counted.host_waits,
                        "throttle_waits_without": r.throttle_waits,
                        "throttle_waits_with": counted.throttle_waits,
                    })
                )?;
                rows.push(r);
                rows.push(counted);
                continue;
            }
            rows.push(r);
        }
        // The GradScaler's cost: amp-f16 with the scaler against amp-f16 without it.
        let with = match amp_with {
            Some(ms) => ms,
            None => {
                measure(
                    &ctx,
                    args,
                    model,
                    batch,
                    Precision::AmpF16,
                    (true, None),
                    false,
                )?
                .0
                .ms_per_step
            }
        };
        let without = measure(
            &ctx,
            args,
            model,
            batch,
            Precision::AmpF16,
            (false, None),
            false,
        )?
        .0
        .ms_per_step;
        outln!(
            "{}",
            serde_json::json!({
                "kind": "scaler_overhead",
                "adapter": ctx.report.name,
                "model": model,
                "batch_size": batch,
                "ms_per_step_with_scaler": with,
                "ms_per_step_without_scaler": without,
                "overhead_percent": 100.0 * (with - without) / without,
            })
        )?;
    }
    if !args.json {
        print_table(&rows);
        print_passes(&rows);
    }
    Ok(())
}

/// Inferena's three timings of the language models' steps, when any was measured.
fn print_passes(rows: &[StepBench]) {
    let timed: Vec<(&StepBench, &StepPasses)> = rows
        .iter()
        .filter_map(|r| r.passes.as_ref().map(|p| (r, p)))
        .collect();
    let Some((_, first)) = timed.first() else {
        return;
    };
    println!(
        "\nInferena's timings (ms per step, the step's kernels, {} passes of {}):",
        first.timed_by, first.repeats
    );
    println!(
        "{:<20} {:<9} {:>10} {:>16} {:>10}",
        "model", "precision", "forward", "forward+backward", "step"
    );
    for (r, p) in timed {
        println!(
            "{:<20} {:<9} {:>10.2} {:>16.2} {:>10.2}",
            r.model, r.precision, p.forward_ms, p.forward_backward_ms, p.step_ms
        );
    }
}

/// The step measurements as a table (samples/s; tokens/s for GPT models).
fn print_table(rows: &[StepBench]) {
    println!(
        "{:<20} {:<9} {:>6} {:>9} {:>10} {:>10} {:>10} {:>9}",
        "model", "precision", "scaler", "numerics", "ms/step", "samples/s", "tokens/s", "peak MB"
    );
    for r in rows {
        let tokens = r.tokens_per_sec.map_or("-".into(), |t| format!("{t:.0}"));
        let model = match r.attention {
            Some(a) => format!("{} ({a})", r.model),
            None => r.model.clone(),
        };
        let numerics = r.numerics.map_or("off".into(), |n| format!("every:{n}"));
        println!(
            "{:<20} {:<9} {:>6} {:>9} {:>10.1} {:>10.1} {:>10} {:>9.2}",
            model,
            r.precision,
            if r.scaler { "on" } else { "off" },
            numerics,
            r.ms_per_step,
            r.images_per_sec,
            tokens,
            r.peak_gpu_bytes as f64 / 1e6
        );
    }
}
