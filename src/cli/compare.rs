//! `webgpu-amp compare`: the same model from the same initial weights on the same batch
//! order under several precision modes, side by side; writes report.json and a PNG.

use std::path::PathBuf;

use clap::Args;
use webgpu_amp::amp::policy::Precision;
use webgpu_amp::train::RunSummary;
use webgpu_amp::train::checkpoint::{check_save_target, save_file};
use webgpu_amp::{Error, GpuContext, Result};

use super::doctor::RunDoctor;
use super::interrupted;
use super::out::outln;
use super::plot;
use super::progress::{print_summary, run_with_progress};
use super::run_args::RunArgs;

#[derive(Args, Debug)]
pub struct CompareArgs {
    #[command(flatten)]
    common: RunArgs,
    /// Precision modes to run (comma-separated). Default: f32,amp-f16.
    #[arg(long, value_delimiter = ',')]
    precisions: Option<Vec<String>>,
    /// Also run amp-bf16.
    #[arg(long)]
    bf16: bool,
    /// Also run pure f16 (no master weights).
    #[arg(long)]
    f16: bool,
    /// Where to write the JSON report.
    #[arg(long, default_value = "report.json")]
    report: PathBuf,
    /// Where to write the chart (loss curves, ms/step and peak-memory bars).
    #[arg(long, default_value = "report.png")]
    png: PathBuf,
}

#[derive(serde::Serialize)]
struct RunReport<'a> {
    #[serde(flatten)]
    summary: &'a RunSummary,
    losses: Vec<f32>,
    scales: Vec<f32>,
    skipped: Vec<u64>,
}

pub fn run(args: &CompareArgs) -> Result<()> {
    let mut modes: Vec<Precision> = match &args.precisions {
        Some(list) => list
            .iter()
            .map(|s| Precision::parse(s.trim()))
            .collect::<Result<_>>()?,
        None => vec![Precision::F32, Precision::AmpF16],
    };
    if args.bf16 && !modes.contains(&Precision::AmpBf16) {
        modes.push(Precision::AmpBf16);
    }
    if args.f16 && !modes.contains(&Precision::F16) {
        modes.push(Precision::F16);
    }
    if modes.is_empty() {
        return Err(Error::InvalidArgument(
            "no precision modes to compare".into(),
        ));
    }
    for &mode in &modes {
        args.common.validate_args(mode, (None, None))?;
    }
    // Before any training: the files go only to regular files or new paths.
    check_save_target(&args.report, "--report")?;
    check_save_target(&args.png, "--png")?;
    let options = args.common.device.options()?;
    let (inputs, ctx) = args.common.prepare(&modes, || GpuContext::new(&options))?;
    // The banner only: with stdout closed already, the runs and their files still matter.
    let _ = outln!(
        "comparing {} on {} ({} training samples) on {}",
        modes
            .iter()
            .map(|m| m.name())
            .collect::<Vec<_>>()
            .join(", "),
        inputs.dataset,
        inputs.split.train.n,
        ctx.report.name
    );
    // Said once, with the first mode's first step.
    let mut note = args.common.batch_note(&inputs);
    let mut summaries = Vec::new();
    let mut doctors = Vec::new();
    // SIGINT/SIGTERM stops the run in flight at a step boundary, and compare there.
    let interrupt = interrupted::catch(None);
    for mode in &modes {
        let mut cfg = args.common.run_config(*mode, &inputs, (None, None))?;
        if let Some(i) = &interrupt {
            cfg = cfg.on_interrupt(i.clone());
        }
        let mut doctor = RunDoctor::new(&cfg.step, &inputs.spec.keep_f32);
        let summary = run_with_progress(
            &ctx,
            &inputs,
            cfg,
            None,
            mode.name(),
            note.take(),
            &mut |event| {
                if let webgpu_amp::train::Event::Step {
                    stats, numerics, ..
                } = event
                {
                    doctor.add(stats, numerics.as_deref());
                }
                Ok(())
            },
        )?;
        doctors.push((mode.name(), doctor));
        if summary.interrupted {
            return Err(webgpu_amp::Error::Interrupted(format!(
                "compare: interrupted by {} at step {} of {}; no report written",
                interrupted::signal_name(),
                summary.steps,
                mode.name()
            )));
        }
        summaries.push(summary);
    }
    let runs: Vec<RunReport> = summaries
        .iter()
        .map(|s| RunReport {
            summary: s,
            losses: s.history.iter().map(|h| h.loss).collect(),
            scales: s.history.iter().map(|h| h.scale).collect(),
            skipped: s
                .history
                .iter()
                .filter(|h| h.skipped)
                .map(|h| h.step)
                .collect(),
        })
        .collect();
    let report = serde_json::json!({
        "adapter": ctx.report.name,
        "backend": ctx.report.backend,
        "f16_storage": format!("{:?}", ctx.f16_storage).to_lowercase(),
        "dataset": inputs.dataset,
        "batch_size": args.common.batch_used(&inputs),
        "seed": args.common.seed,
        "runs": runs,
    });
    let text = serde_json::to_string_pretty(&report).expect("report serialises");
    save_file(&args.report, text.as_bytes(), "--report")?;
    let info = plot::ChartInfo {
        model: args
            .common
            .model
            .clone()
            .unwrap_or_else(|| inputs.spec.name.clone()),
        dataset: inputs.dataset.clone(),
        batch_size: args.common.batch_used(&inputs),
        adapter: ctx.report.name.clone(),
        backend: ctx.report.backend.clone(),
    };
    let png = plot::comparison_png(&args.png, &info, &summaries)?;
    save_file(&args.png, &png, "--png")?;
    // The files first, so a closed stdout (`| head`) never costs them.
    print_summary(&summaries.iter().collect::<Vec<_>>())?;
    for (label, doctor) in &doctors {
        doctor.print_advice(label)?;
    }
    outln!("report: {}", args.report.display())?;
    outln!("chart:  {}", args.png.display())?;
    Ok(())
}
