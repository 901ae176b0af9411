//! The CLI's view of a run: a progress bar over [`Run::run`] (epoch, step, loss, lr, scale,
//! skipped steps, images/s, validation and loss-estimate lines) and the side-by-side summary table that
//! `train` and `compare` print.

use std::io::Write;
use std::rc::Rc;

use indicatif::{ProgressBar, ProgressStyle};
use webgpu_amp::amp::scale_text;
use webgpu_amp::dist::Collective;
use webgpu_amp::train::checkpoint::Checkpoint;
use webgpu_amp::train::{Event, Run, RunConfig, RunSummary};
use webgpu_amp::{GpuContext, Result};

use super::doctor::SkipLines;
use super::out::{out, outln};
use super::run_args::RunInputs;

/// A progress bar that shows epoch, step, loss, scale, skipped steps and images/s.
pub fn progress_bar(total_steps: Option<u64>, label: &str) -> ProgressBar {
    let bar = match total_steps {
        Some(n) => ProgressBar::new(n),
        None => ProgressBar::new_spinner(),
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{prefix:>9} [{elapsed_precise}] {bar:30.cyan/blue} {pos}/{len} {msg}",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar.set_prefix(label.to_string());
    bar
}

/// Run one training job with a progress bar, reporting every event to `sink` too. `note`
/// (one line for stderr) is printed once the first step is back: a run refused while it
/// plans ends with its one error line alone.
pub fn run_with_progress(
    ctx: &GpuContext,
    inputs: &RunInputs,
    cfg: RunConfig,
    resume: Option<&Checkpoint>,
    label: &str,
    note: Option<String>,
    sink: &mut dyn FnMut(&Event) -> Result<()>,
) -> Result<RunSummary> {
    run_rank_with_progress(ctx, inputs, cfg, resume, label, None, note, sink)
}

/// [`run_with_progress`] as one rank of a data-parallel job when `rank` is given (the bar on
/// rank 0 only, counting the global batch).
#[allow(clippy::too_many_arguments)]
pub fn run_rank_with_progress(
    ctx: &GpuContext,
    inputs: &RunInputs,
    cfg: RunConfig,
    resume: Option<&Checkpoint>,
    label: &str,
    rank: Option<Rc<dyn Collective>>,
    mut note: Option<String>,
    sink: &mut dyn FnMut(&Event) -> Result<()>,
) -> Result<RunSummary> {
    let mut run = Run::new(
        ctx,
        inputs.spec.clone(),
        cfg,
        &inputs.split.train,
        &inputs.init,
        resume,
    )?;
    if resume.is_none() && !inputs.init_buffers.is_empty() {
        run.trainer
            .store
            .buffers
            .upload(ctx, &inputs.init_buffers)?;
    }
    // Data-parallel: this rank's shard; the bar counts every rank's samples.
    let mut ranks = 1;
    let mut global = String::new();
    if let Some(c) = rank {
        ranks = c.size() as u64;
        let (batch, accum) = (run.config.batch_size, run.config.step.grad_accum);
        let micro = if accum > 1 {
            format!(" × {accum} micro-batches")
        } else {
            String::new()
        };
        global = format!(
            " (global batch {} = {ranks} ranks × {batch}{micro})",
            ranks as usize * batch * accum
        );
        run.distribute(ctx, &inputs.split.train, c)?;
    }
    let bar = if run.is_writer() {
        progress_bar(run.config.planned_steps(run.samples_per_epoch()), label)
    } else {
        ProgressBar::hidden()
    };
    bar.set_position(run.progress.step);
    let started = std::time::Instant::now();
    let mut images = 0u64;
    let mut skipped = 0u64;
    let mut sink_error = None;
    let batch = ranks * run.config.batch_size as u64 * run.config.step.grad_accum as u64;
    let mut skips = SkipLines::new(run.config.step.numerics);
    let summary = run.run(ctx, &inputs.split, &mut |event| {
        if let Event::Step {
            stats,
            epoch,
            lr,
            numerics,
        } = event
        {
            if let Some(line) = note.take() {
                // A note, not data: a closed stderr is no reason to stop.
                bar.suspend(|| {
                    let _ = writeln!(std::io::stderr(), "{line}");
                });
            }
            images += batch;
            skipped += stats.skipped as u64;
            if let Some(line) = skips.line(label, stats, numerics.as_deref()) {
                say(&bar, line);
            }
            bar.set_position(stats.step);
            bar.set_message(format!(
                "epoch {} loss {:.4} lr {lr:.3e} scale {} skipped {} {:.0} img/s{global}",
                epoch + 1,
                stats.loss,
                scale_text(stats.scale),
                skipped,
                images as f64 / started.elapsed().as_secs_f64().max(1e-9)
            ));
        }
        if let Event::Eval(e) = event {
            let val = e
                .val_loss
                .map_or(String::new(), |v| format!(" val loss {v:.4}"));
            say(
                &bar,
                format!(
                    "{label}: step {} train loss {:.4}{val}",
                    e.step, e.train_loss
                ),
            );
        }
        if let Event::Epoch(e) = event
            && let Some(acc) = e.val_accuracy
        {
            say(
                &bar,
                format!(
                    "{label}: epoch {} validation loss {:.4} accuracy {:.2}%",
                    e.epoch + 1,
                    e.val_loss.unwrap_or(f32::NAN),
                    100.0 * acc
                ),
            );
        }
        if sink_error.is_none()
            && let Err(e) = sink(event)
        {
            sink_error = Some(e);
        }
    });
    bar.finish_and_clear();
    if let Some(e) = sink_error {
        return Err(e);
    }
    summary
}

/// A line of a run's progress (a skipped step, a loss estimate, an epoch's validation): above
/// the bar on a terminal, and on stdout where there is no bar (a log: `train > run.log`),
/// where the bar's own `println` would drop it.
fn say(bar: &ProgressBar, line: String) {
    if bar.is_hidden() {
        // A note, not data: a closed stdout is no reason to stop the run.
        let _ = out!("{line}\n");
    } else {
        bar.println(line);
    }
}

/// A side-by-side table of run summaries.
pub fn print_summary(runs: &[&RunSummary]) -> Result<()> {
    let opt = |v: Option<f32>| v.map_or("-".into(), |x| format!("{x:.4}"));
    let pct = |v: Option<f32>| v.map_or("-".into(), |x| format!("{:.2}%", 100.0 * x));
    let row = |f: &dyn Fn(&RunSummary) -> String| runs.iter().map(|r| f(r)).collect::<Vec<_>>();
    let rows = [
        ("precision", row(&|r| r.precision.clone())),
        ("steps", row(&|r| r.steps.to_string())),
        ("first loss", row(&|r| opt(r.first_loss))),
        ("final loss", row(&|r| opt(r.final_loss))),
        ("val loss", row(&|r| opt(r.val_loss))),
        ("val accuracy", row(&|r| pct(r.val_accuracy))),
        ("ms/step", row(&|r| format!("{:.2}", r.ms_per_step))),
        ("images/s", row(&|r| per_sec(r.images_per_sec))),
        (
            "peak GPU MB",
            row(&|r| format!("{:.2}", r.peak_gpu_bytes as f64 / 1e6)),
        ),
        ("skipped steps", row(&|r| r.skipped_steps.to_string())),
        ("final scale", row(&|r| scale_text(r.final_scale))),
        ("host waits", row(&|r| r.host_waits.to_string())),
        ("throttle waits", row(&|r| r.throttle_waits.to_string())),
    ];
    // Text models: tokens/s beside images/s (samples of `block` tokens each).
    let tokens = runs.iter().any(|r| r.tokens_per_sec.is_some()).then(|| {
        let cell = |r: &RunSummary| r.tokens_per_sec.map_or("-".into(), per_sec);
        ("tokens/s", row(&cell))
    });
    let mut rows: Vec<(&str, Vec<String>)> =
        rows.into_iter().chain(distributed_rows(runs)).collect();
    if let Some(tokens) = tokens {
        let at = rows
            .iter()
            .position(|(n, _)| *n == "images/s")
            .map_or(0, |i| i + 1);
        rows.insert(at, tokens);
    }
    outln!(
        "adapter: {} (f16 storage: {}{})",
        runs[0].adapter,
        runs[0].f16_storage,
        match &runs[0].tensor_cores {
            Some(tc) => format!("; tensor cores {tc}"),
            None => String::new(),
        }
    )?;
    for (name, values) in rows {
        out!("{name:<14}")?;
        for v in values {
            out!(" {v:>14}")?;
        }
        outln!()?;
    }
    Ok(())
}

/// A rate: whole numbers, or two decimals below 10 (a GPT on a CPU adapter does 0.03
/// samples/s, which `{:.0}` would print as 0).
fn per_sec(v: f64) -> String {
    if v < 10.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.0}")
    }
}

/// Summary rows of a data-parallel run (none for single-process runs).
fn distributed_rows(runs: &[&RunSummary]) -> Vec<(&'static str, Vec<String>)> {
    if runs.iter().all(|r| r.distributed.is_none()) {
        return Vec::new();
    }
    let cell = |f: &dyn Fn(&webgpu_amp::train::distributed::DistributedSummary) -> String| {
        runs.iter()
            .map(|r| r.distributed.as_ref().map_or("-".into(), f))
            .collect::<Vec<_>>()
    };
    vec![
        ("ranks", cell(&|d| d.ranks.to_string())),
        (
            "global batch",
            cell(&|d| {
                format!(
                    "{} = {}×{}",
                    d.global_batch,
                    d.ranks,
                    d.global_batch / d.ranks
                )
            }),
        ),
        (
            "all-reduce kB",
            cell(&|d| format!("{:.1}", d.all_reduce_bytes_per_step as f64 / 1e3)),
        ),
        (
            "all-reduce ms",
            cell(&|d| format!("{:.2}", d.all_reduce_ms_per_step)),
        ),
    ]
}
