//! `webgpu-amp bench tune`: time the kernel table's candidates on the adapter at hand and
//! write the fastest table as a tuning file that `--tuning FILE` (or `WEBGPU_AMP_TUNING`)
//! loads. One family of the table at a time (coordinate descent), from the adapter's current
//! table: the tensor-core tiles for large, wide and small products and the convolutions'
//! large tile, the SIMT tiles for f32 and 16-bit inputs, and when to split K (`tune_families`). Each family is scored by the summed time of its shapes
//! (the preset models' GEMMs and convolutions, and 4096³: `tune_workloads`) and gets a share
//! of `--budget`; a family whose share runs out keeps the best candidate timed so far, and
//! the file records every timing.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use indicatif::ProgressBar;
use webgpu_amp::gpu::{KernelTable, Measurement, TUNING_FORMAT, TuningFile};
use webgpu_amp::{Error, GpuContext, Result};

use super::DeviceArgs;
use super::bench_timer::Timer;
use super::numbers::number;
use super::out::outln;
use super::tune_families::{Family, families, merge};
use super::tune_workloads::{Prepared, workloads};

/// `--budget`: seconds.
const BUDGET_RANGE: &str = "1 to 3600";

#[derive(Args)]
pub struct TuneArgs {
    /// Seconds for the whole run (1 to 3600); each family gets a share, and one whose share
    /// runs out keeps the best candidate timed so far.
    #[arg(long, default_value_t = 110.0, allow_negative_numbers = true,
          value_parser = number::<f64>(BUDGET_RANGE))]
    budget: f64,
    /// Tiny shapes and at most two candidates per family: a check of the tuner itself (CI on
    /// a software adapter), whose numbers measure nothing.
    #[arg(long)]
    quick: bool,
    /// The tuning file to write.
    #[arg(long, default_value = "tuning.json")]
    out: PathBuf,
    #[command(flatten)]
    device: DeviceArgs,
}

pub fn run(args: &TuneArgs) -> Result<()> {
    if !(1.0..=3600.0).contains(&args.budget) {
        return Err(Error::InvalidArgument(format!(
            "--budget must be {BUDGET_RANGE}, got {}",
            args.budget
        )));
    }
    // Where the file goes is checked before anything is measured: a folder, a missing one or
    // a device fails now, not after the whole run.
    webgpu_amp::train::checkpoint::check_save_target(&args.out, "--out")?;
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(args.budget);
    // The tuner starts from the built-in table: a --tuning file (or the environment's) would
    // come back out as a freshly measured one.
    let options = args.device.options()?;
    let asked = webgpu_amp::gpu::tuning_file::requested_tuning_file();
    webgpu_amp::gpu::tuning_file::use_builtin_table();
    let ctx = GpuContext::new(&options)?;
    if let Some(file) = asked {
        outln!(
            "note: bench tune starts from this adapter's built-in table ({}); the tuning file \
             {} is not read",
            ctx.caps.kernels.source,
            webgpu_amp::gpu::escaped(&file.display().to_string())
        )?;
    }
    let mut table = ctx.caps.kernels.table.clone();
    let families = families(&ctx, &table, &workloads(args.quick), args.quick);
    let total: usize = families
        .iter()
        .map(|f| f.candidates.len() * f.work.len())
        .sum();
    let bar = super::progress::progress_bar(Some(total as u64), "tune");
    let timer = Timer::new(&ctx);
    let mut measurements = Vec::new();
    let mut notes = Vec::new();
    let mut finished_families = 0;
    for (i, family) in families.iter().enumerate() {
        let left = deadline.saturating_duration_since(Instant::now());
        let share = left / (families.len() - i) as u32;
        let family_deadline = Instant::now() + share;
        let deadlines = (family_deadline, deadline);
        let winner = tune_family(&ctx, family, &timer, deadlines, &bar, &mut measurements)?;
        match winner {
            Some((label, t, timed)) => {
                if timed < family.candidates.len() {
                    notes.push(format!(
                        "{}: budget ran out after {timed} of {} candidates",
                        family.field.name(),
                        family.candidates.len()
                    ));
                }
                bar.println(format!("{}: {label}", family.field.name()));
                table = merge(&table, &t, family.field);
                finished_families += 1;
            }
            None => notes.push(format!(
                "{}: no candidate finished within its share",
                family.field.name()
            )),
        }
    }
    bar.finish_and_clear();
    if finished_families == 0 {
        return Err(Error::Unsupported(format!(
            "bench tune: no candidate finished within --budget {} s (building and timing the \
             first one takes longer on `{}`); nothing measured, so nothing written to {}; give \
             a larger --budget",
            args.budget,
            ctx.report.name,
            args.out.display()
        )));
    }
    // Every tile of the merged table computes the reference's products before it is written
    // (the timings say only how fast).
    let merged = ctx.with_kernel_table(table.clone(), "bench tune's table")?;
    webgpu_amp::ops::table_check::check_tiles(&merged)?;
    let r = &ctx.report;
    let file = TuningFile {
        format: TUNING_FORMAT.to_string(),
        adapter: r.name.clone(),
        backend: r.backend.clone(),
        driver: format!("{} {}", r.driver, r.driver_info).trim().to_string(),
        date: utc_date(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        table,
        measurements,
    };
    let text = serde_json::to_string_pretty(&file).expect("tuning file serialises");
    webgpu_amp::train::checkpoint::save_file(&args.out, text.as_bytes(), "tuning file")?;
    for note in &notes {
        outln!("note: {note}")?;
    }
    outln!(
        "wrote {} in {:.0} s: use it with --tuning {} (or WEBGPU_AMP_TUNING); `webgpu-amp info --tuning {}` shows the table",
        args.out.display(),
        started.elapsed().as_secs_f64(),
        args.out.display(),
        args.out.display()
    )?;
    Ok(())
}

/// Time every candidate of `family` on its workloads until the family's deadline (the first,
/// the adapter's current table, until the run's): the fastest candidate that finished (its
/// label, table and how many finished), or None.
fn tune_family(
    ctx: &GpuContext,
    family: &Family,
    timer: &Timer,
    (family_deadline, run_deadline): (Instant, Instant),
    bar: &ProgressBar,
    measurements: &mut Vec<Measurement>,
) -> Result<Option<(String, KernelTable, usize)>> {
    // Smallest first, each made when first timed: what the budget reaches is measured, and a
    // large workload is not even allocated when the time is gone.
    let mut work = family.work.clone();
    work.sort_by(|a, b| a.flops().total_cmp(&b.flops()));
    let mut prepared: Vec<Option<Prepared>> = work.iter().map(|_| None).collect();
    let mut best: Option<(f64, String, KernelTable)> = None;
    let mut finished = 0;
    // Seconds per flop of the last measurement here: a workload predicted to run past the
    // deadline is not started (its warm-up, pipelines included, cannot be cut short).
    let mut rate: Option<f64> = None;
    'candidates: for (label, table) in &family.candidates {
        let twin = ctx.with_kernel_table(table.clone(), "bench tune candidate")?;
        let mut total = 0.0;
        let deadline = if finished == 0 {
            run_deadline
        } else {
            family_deadline
        };
        for (w, p) in work.iter().zip(prepared.iter_mut()) {
            if Instant::now() >= deadline {
                break 'candidates;
            }
            super::interrupted::check(|| {
                format!(
                    "bench tune: interrupted in {}; no file written",
                    family.field.name()
                )
            })?;
            bar.set_message(format!(
                "{} {} {}",
                family.field.name(),
                label,
                w.describe()
            ));
            let left = deadline
                .saturating_duration_since(Instant::now())
                .as_secs_f64();
            if rate.is_some_and(|r| 4.0 * r * w.flops() > left) {
                break 'candidates;
            }
            let p = p.get_or_insert_with(|| Prepared::new(ctx, *w, family.storage));
            let kernels = p.kernels(&twin, family.kernel)?;
            let Some(seconds) = time_kernels(&twin, timer, &kernels, p.work.flops(), deadline)?
            else {
                break 'candidates;
            };
            rate = Some(seconds / p.work.flops().max(1.0));
            total += seconds;
            measurements.push(Measurement {
                kernel: format!("{} ({})", family.field.name(), family.kernel.name()),
                shape: p.work.describe(),
                candidate: label.clone(),
                seconds,
                tflops: p.work.flops() / seconds / 1e12,
            });
            bar.inc(1);
        }
        finished += 1;
        if best.as_ref().is_none_or(|(t, _, _)| total < *t) {
            best = Some((total, label.clone(), table.clone()));
        }
    }
    Ok(best.map(|(_, label, table)| (label, table, finished)))
}

/// Median seconds of one run of `kernels` (batched to about 0.2 GFLOP per pass), or None
/// where `deadline` would pass first (a pass is not started that the warm-up's time says
/// would end past it: the budget is overrun by the warm-up at most).
fn time_kernels(
    ctx: &GpuContext,
    timer: &Timer,
    kernels: &[webgpu_amp::gpu::Kernel],
    work: f64,
    deadline: Instant,
) -> Result<Option<f64>> {
    let refs: Vec<&webgpu_amp::gpu::Kernel> = kernels.iter().collect();
    let batch = ((2e8 / work.max(1.0)).ceil() as usize).clamp(1, 16);
    // Warm-up (pipeline creation, first touch), once: what a pass of `batch` costs.
    let once = timer.time(ctx, &refs, 1)?;
    let mut times = Vec::with_capacity(3);
    for _ in 0..3 {
        let pass = Duration::from_secs_f64(once * batch as f64);
        if Instant::now() + pass >= deadline {
            return Ok(None);
        }
        times.push(timer.time(ctx, &refs, batch)? / batch as f64);
    }
    times.sort_by(f64::total_cmp);
    Ok(Some(times[1]))
}

/// Today's UTC date, `YYYY-MM-DD` (civil from days since 1970, Hinnant's algorithm).
fn utc_date() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let z = secs.div_euclid(86_400) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}
