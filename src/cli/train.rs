//! `webgpu-amp train`: train a model on a data set under one precision mode, with a progress
//! bar, JSON-lines metrics, checkpoints and resume.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use webgpu_amp::amp::policy::Precision;
use webgpu_amp::train::checkpoint::{Checkpoint, check_save_target};
use webgpu_amp::train::profile::profile_steps;
use webgpu_amp::train::{Event, Setting, StepConfig, StepProfile, Trainer};
use webgpu_amp::{Error, GpuContext, Result};

use super::distributed::{DistArgs, Joined};
use super::doctor::RunDoctor;
use super::interrupted;
use super::numbers::setting;
use super::out::outln;
use super::progress::{print_summary, run_rank_with_progress};
use super::run_args::{RunArgs, RunInputs};
use super::run_checks;

#[derive(Args, Debug)]
pub struct TrainArgs {
    /// f32, amp-f16, amp-bf16 or f16.
    #[arg(long, default_value = "amp-f16")]
    precision: String,
    #[command(flatten)]
    common: RunArgs,
    /// Write the final checkpoint here (safetensors; parameters load in PyTorch).
    #[arg(long)]
    save: Option<PathBuf>,
    /// Also save every N optimizer steps (to --save).
    #[arg(long, allow_negative_numbers = true, value_parser = setting::<u64>(Setting::SaveEvery))]
    save_every: Option<u64>,
    /// Continue from a checkpoint written by --save (without --model, the model a family's
    /// checkpoint describes: GPT, Llama, ResNet).
    #[arg(long)]
    resume: Option<PathBuf>,
    /// After training, write the model as a Hugging Face transformers folder here
    /// (config.json, model.safetensors in f32, the --model hf: folder's tokenizer.json),
    /// with the resume state beside it (the final checkpoint: --save's file, else
    /// DIR/webgpu-amp-state.safetensors). A Llama-family model only.
    #[arg(long, value_name = "DIR")]
    export_hf: Option<PathBuf>,
    /// Write one JSON object per step, per epoch, and a final summary.
    #[arg(long)]
    metrics: Option<PathBuf>,
    /// After training, profile the step on a twin of the model (same model, precision and
    /// batch size; the trained weights are untouched): GPU time per kernel and per phase
    /// from timestamp queries, host time per step (encode, submit, read-back); a table, and
    /// a JSON line in --metrics.
    #[arg(long)]
    profile: bool,
    #[command(flatten)]
    dist: DistArgs,
}

pub fn run(args: &TrainArgs) -> Result<()> {
    args.dist.timeout()?;
    // Under mpirun: one rank of a data-parallel job; any rank's error ends the whole job.
    match super::distributed::join(&args.dist)? {
        None => train(args, None),
        Some(rank) => match train(args, Some(&rank)) {
            Ok(()) => Ok(()),
            Err(e) => rank.fail(&super::flag_names(&e.to_string())),
        },
    }
}

fn train(args: &TrainArgs, rank: Option<&Joined>) -> Result<()> {
    let precision = Precision::parse(&args.precision)?;
    let writer_rank = rank.is_none_or(Joined::is_writer);
    let save = (args.save_every, args.save.clone());
    args.common.validate_args(precision, save.clone())?;
    // Before any training: the files the writer rank makes go only to regular files or
    // new paths (a rename onto /dev/full replaced the device node).
    if rank.is_none_or(Joined::is_writer) {
        for (flag, path) in [("--save", &args.save), ("--metrics", &args.metrics)] {
            if let Some(p) = path {
                check_save_target(p, flag)?;
            }
        }
    }
    // Flags the checkpoint would override are refused before the data and the GPU.
    run_checks::no_init_with_resume(args.common.init.as_deref(), args.resume.as_deref())?;
    let resume = args
        .resume
        .as_ref()
        .map(|p| Checkpoint::load(p))
        .transpose()?;
    if let (Some(ck), Some(path)) = (&resume, &args.resume) {
        let scaler_on = (args.common.scaler).unwrap_or(precision.scaler_enabled_by_default());
        let what = path.display().to_string();
        let given = args.common.resume_flags();
        run_checks::no_flags_resume_overrides(&given, ck, scaler_on, &what)?;
    }
    let options = args.common.device.options()?;
    // Without --model, a resumed run continues the model its checkpoint describes.
    let saved_model = resume.as_ref().and_then(|ck| ck.model.as_ref());
    let saved_model = saved_model.map(|m| m.to_string());
    let (inputs, ctx) =
        args.common
            .prepare_resumed(&[precision], saved_model.as_deref(), || match rank {
                Some(rank) => rank.context(&options),
                None => GpuContext::new(&options),
            })?;
    let note = args
        .common
        .batch_note(&inputs)
        .filter(|_| rank.is_none_or(Joined::is_writer));
    // --export-hf: the run saves its final checkpoint for the folder (beside it unless
    // --save names a file), only on the writer rank.
    let export_state = match (&args.export_hf, writer_rank) {
        (Some(dir), true) => Some(super::export_hf::prepare(
            dir,
            args.save.as_deref(),
            &inputs.spec,
        )?),
        _ => None,
    };
    let save = match &export_state {
        Some(state) if args.save.is_none() => {
            check_save_target(state, "--export-hf")?;
            (save.0, Some(state.clone()))
        }
        _ => save,
    };
    let mut cfg = args.common.run_config(precision, &inputs, save)?;
    // The model first: a checkpoint of another model is that, whatever its data says.
    let resumed_params = match (&resume, &args.resume) {
        (Some(ck), Some(path)) => {
            let what = path.display().to_string();
            let init = ck.params_for_model(&inputs.spec, &what).map_err(|e| {
                match (e, &args.common.model, &ck.model) {
                    // Only a family's checkpoint (GPT, Llama, ResNet) describes its model.
                    (Error::Checkpoint(m), None, None) => Error::Checkpoint(format!(
                        "{m}; the checkpoint does not describe its model (only a model \
                         family's does: GPT, Llama, ResNet), so give the --model it was \
                         trained with"
                    )),
                    (e, _, _) => e,
                }
            })?;
            let keep = &inputs.spec.keep_f32;
            run_checks::resume_continues(ck, &cfg, &inputs.split.train, keep, &what)?;
            Some(init)
        }
        _ => None,
    };
    // SIGINT/SIGTERM: finish the step, save, say how to resume. (A data-parallel job is
    // ended by its launcher instead: MPI rank 0 says which checkpoint is intact.)
    if rank.is_none()
        && let Some(interrupt) =
            interrupted::catch(Some(interrupted::fallback_path(args.metrics.as_deref())))
    {
        cfg = cfg.on_interrupt(interrupt);
    }
    let inputs = match resumed_params {
        Some(init) => RunInputs { init, ..inputs },
        None => inputs,
    };
    // Data-parallel: rank 0 writes metrics, prints and checkpoints (the others train).
    let writer = rank.is_none_or(Joined::is_writer);
    let mut metrics = match args.metrics.as_ref().filter(|_| writer) {
        Some(p) => Some(std::io::BufWriter::new(
            std::fs::File::create(p)
                .map_err(|e| Error::InvalidArgument(format!("{}: {e}", p.display())))?,
        )),
        None => None,
    };
    let metrics_path = args.metrics.clone();
    let mut write_line = move |v: serde_json::Value| -> Result<()> {
        if let Some(w) = metrics.as_mut() {
            writeln!(w, "{v}").and_then(|_| w.flush()).map_err(|e| {
                Error::Output(format!(
                    "{}: {e}",
                    metrics_path.as_ref().expect("path").display()
                ))
            })?;
        }
        Ok(())
    };
    let (step_config, batch_size) = (cfg.step.clone(), cfg.batch_size);
    let mut doctor = RunDoctor::new(&step_config, &inputs.spec.keep_f32);
    let summary = run_rank_with_progress(
        &ctx,
        &inputs,
        cfg,
        resume.as_ref(),
        precision.name(),
        rank.map(|r| r.collective.clone()),
        note,
        &mut |event| match event {
            Event::Step {
                stats,
                epoch,
                lr,
                numerics,
            } => write_line(doctor.step_line(stats, *epoch, *lr, numerics.as_deref())),
            Event::Eval(e) => write_line(serde_json::json!({
                "step": e.step, "train_loss": e.train_loss, "val_loss": e.val_loss,
            })),
            Event::Epoch(e) => write_line(serde_json::json!({
                "epoch": e.epoch, "val_loss": e.val_loss, "val_accuracy": e.val_accuracy,
                "images_per_sec": e.images_per_sec, "peak_gpu_bytes": e.peak_gpu_bytes,
            })),
            Event::Saved { .. } => Ok(()),
        },
    );
    let summary = match summary {
        Ok(summary) => summary,
        // The counters up to the failing step, and where its inf or NaN began, before the
        // error that stops the run.
        Err(e @ Error::Diverged(_)) if writer => {
            doctor.print_advice(precision.name())?;
            return Err(e);
        }
        Err(e) => return Err(e),
    };
    write_line(serde_json::json!({ "summary": summary }))?;
    if summary.interrupted {
        return Err(interrupted_line(&summary));
    }
    if !writer {
        return Ok(());
    }
    print_summary(&[&summary])?;
    doctor.print_advice(precision.name())?;
    if let Some(p) = &args.save {
        outln!("checkpoint: {}", p.display())?;
    }
    if let (Some(dir), Some(state)) = (&args.export_hf, &export_state) {
        let model = args.common.model.as_deref();
        let tokenizer = args.common.tokenizer.as_deref();
        super::export_hf::export(dir, state, &inputs.spec, (model, tokenizer))?;
        outln!(
            "exported: {} (resume state: {})",
            dir.display(),
            state.display()
        )?;
    }
    if args.profile {
        let profile = profile_twin(&ctx, &inputs, step_config, batch_size)?;
        println!("{}", profile.table(10));
        write_line(serde_json::json!({ "profile": profile }))?;
    }
    Ok(())
}

/// The one line of an interrupted run: where it stopped, what it saved, how to go on.
fn interrupted_line(summary: &webgpu_amp::train::RunSummary) -> Error {
    let saved = match &summary.saved {
        Some(path) => format!(
            "saved {}; resume with: {}",
            path.display(),
            interrupted::resume_command(path)
        ),
        None => "nothing saved".into(),
    };
    Error::Interrupted(format!(
        "interrupted by {} at step {}: {saved}",
        interrupted::signal_name(),
        summary.steps
    ))
}

/// `--profile`: a twin trainer of the run's model on its first training batch, three
/// warm-up steps, then [`profile_steps`] over five.
fn profile_twin(
    ctx: &GpuContext,
    inputs: &RunInputs,
    step: StepConfig,
    batch_size: usize,
) -> Result<StepProfile> {
    let train = &inputs.split.train;
    let b = batch_size.min(train.n).max(1);
    let batch = train.gather(&(0..b).collect::<Vec<_>>())?;
    let dim = train.output_dim();
    let mut twin = Trainer::new(ctx, inputs.spec.clone(), step, dim, &inputs.init)?;
    for _ in 0..3 {
        twin.train_batch(ctx, b, batch.input(), batch.targets())?;
    }
    profile_steps(ctx, &mut twin, b, batch.input(), || batch.targets(), 5)
}
