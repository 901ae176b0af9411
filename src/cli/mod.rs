//! Subcommands of the `webgpu-amp` binary.

mod augment_args;
mod bench;
mod bench_step;
mod bench_storages;
mod bench_timer;
mod bench_tune;
mod bench_workload;
mod command;
mod compare;
mod distributed;
mod doctor;
mod empty_values;
mod export_hf;
mod gui;
mod info;
mod interrupted;
mod kernels;
mod numbers;
mod out;
mod plan;
mod plot;
mod progress;
mod recipe;
mod resolve;
mod run_args;
mod run_checks;
mod sample;
mod selftest;
mod shaders;
mod text_tokens;
mod tokenize;
mod train;
mod tune_families;
mod tune_workloads;

pub use command::main;

use clap::Args;
use webgpu_amp::nn::AttentionKernel;
use webgpu_amp::train::Setting;
use webgpu_amp::{BackendChoice, F16StorageChoice, GpuOptions, TensorCoreChoice};

use empty_values::no_empty_values;

/// Device selection flags shared by every subcommand that runs on the GPU.
#[derive(Args, Clone, Debug, Default)]
pub struct DeviceArgs {
    /// vulkan, metal, dx12, gl, webgpu or auto (env WEBGPU_AMP_BACKEND).
    #[arg(long)]
    pub backend: Option<String>,
    /// Use the first adapter whose name contains this (case-insensitive; env WEBGPU_AMP_ADAPTER).
    #[arg(long)]
    pub adapter: Option<String>,
    /// auto, native or packed (env WEBGPU_AMP_F16_STORAGE). Packed runs without shader-f16.
    #[arg(long = "f16-storage")]
    pub f16_storage: Option<String>,
    /// Tensor cores for f16 matmuls and convolutions: auto (GPUs that have them), on (also CPU
    /// adapters; an error where none), off; on:8x8 or on:16x16 forces a fragment shape
    /// (env WEBGPU_AMP_TENSOR_CORES).
    #[arg(long = "tensor-cores")]
    pub tensor_cores: Option<String>,
    /// A kernel table tuned for this adapter by `webgpu-amp bench tune` (env
    /// WEBGPU_AMP_TUNING); without one, a committed table for the adapter or its class's
    /// defaults (`webgpu-amp info` shows which).
    #[arg(long)]
    pub tuning: Option<std::path::PathBuf>,
}

impl DeviceArgs {
    pub fn options(&self) -> webgpu_amp::Result<GpuOptions> {
        no_empty_values(&[
            ("--backend", self.backend.as_deref()),
            ("--adapter", self.adapter.as_deref()),
            ("--f16-storage", self.f16_storage.as_deref()),
            ("--tensor-cores", self.tensor_cores.as_deref()),
            (
                "--tuning",
                self.tuning
                    .as_deref()
                    .map(|p| p.as_os_str().to_str().unwrap_or("?")),
            ),
        ])?;
        if self.tuning.is_some() {
            webgpu_amp::gpu::set_tuning_file(self.tuning.clone());
        }
        let mut o = GpuOptions {
            backend: match &self.backend {
                Some(b) => BackendChoice::parse(b)?,
                None => BackendChoice::Auto,
            },
            adapter: self.adapter.clone(),
            f16_storage: match &self.f16_storage {
                Some(s) => F16StorageChoice::parse(s)?,
                None => F16StorageChoice::Auto,
            },
            tensor_cores: match &self.tensor_cores {
                Some(s) => TensorCoreChoice::parse(s)?,
                None => TensorCoreChoice::Auto,
            },
        };
        o.apply_env()?;
        Ok(o)
    }
}

/// A tuning file on an adapter whose training takes nothing from the kernel table (a CPU
/// adapter without tensor cores runs the direct matmul body, which has fixed tiles): said
/// once, so the file is not thought to do what it cannot.
pub fn note_unused_table(ctx: &webgpu_amp::GpuContext) -> webgpu_amp::Result<()> {
    use std::sync::atomic::{AtomicBool, Ordering};
    static SAID: AtomicBool = AtomicBool::new(false);
    let caps = &ctx.caps;
    if let webgpu_amp::gpu::TableOrigin::File(path) = &caps.kernels.origin
        && caps.cpu_adapter
        && caps.tensor_cores.config().is_none()
        && !SAID.swap(true, Ordering::Relaxed)
    {
        out::outln!(
            "note: tuning file {}: training on `{}` (a CPU adapter) runs the direct matmul \
             body, which takes nothing from the kernel table; the file shapes `bench matmul \
             --kernel tiled` and `selftest` here",
            webgpu_amp::gpu::escaped(path),
            ctx.report.name
        )?;
    }
    Ok(())
}

/// How a GPT's attention runs, for every subcommand that plans one.
#[derive(Args, Clone, Debug)]
pub struct AttentionArgs {
    /// fused (one kernel per pass, no [B, nh, T, T] buffer: FlashAttention-2's shape) or
    /// unfused (nanoGPT's manual path, keeping the attention probabilities for the backward).
    #[arg(long, default_value = "fused", value_parser = AttentionKernel::NAMES)]
    pub attention: String,
}

impl AttentionArgs {
    pub fn kernel(&self) -> webgpu_amp::Result<AttentionKernel> {
        AttentionKernel::parse(&self.attention)
    }
}

/// Library messages say what to change in words; on the command line, name the flags.
fn flag_names(message: &str) -> String {
    use webgpu_amp::train::{planning, run};
    let flags = [
        (planning::SMALLER_BATCH, "use a smaller --batch-size"),
        (planning::FUSED_ATTENTION, "use --attention fused"),
        (run::DIVERGED_HINT, "lower --lr or use --clip-grad-norm"),
        (
            webgpu_amp::train::SKIPPING_HINT,
            "check the data for inf/NaN, or find the layer that overflows with --numerics \
             every:1 and keep it in f32 with --keep-f32 NAME (--max-skipped-steps 0 never \
             stops)",
        ),
        (run::PERIODIC_HINT, "(--save-every N keeps periodic ones)"),
        (
            run::NO_CHECKPOINT,
            "no checkpoint was asked for (--save FILE --save-every N)",
        ),
    ];
    flags.iter().fold(message.to_string(), |m, (words, flag)| {
        m.replace(words, flag)
    })
}

/// A run setting as the command line names it: its flag (the run builder's validation
/// names settings through this, [`webgpu_amp::train::RunConfig::validate_named`]).
fn flag(setting: Setting) -> &'static str {
    match setting {
        Setting::BatchSize => "--batch-size",
        Setting::GradAccum => "--grad-accum",
        Setting::Steps => "--steps",
        Setting::Epochs => "--epochs",
        Setting::ClipGradNorm => "--clip-grad-norm",
        Setting::LabelSmoothing => "--label-smoothing",
        Setting::EvalEvery => "--eval-every",
        Setting::EvalBatches => "--eval-batches",
        Setting::SaveEvery => "--save-every",
        Setting::SavePath => "--save FILE",
        Setting::Lr => "--lr",
        Setting::Momentum => "--momentum",
        Setting::Dampening => "--dampening",
        Setting::WeightDecay => "--weight-decay",
        Setting::Beta1 => "--beta1",
        Setting::Beta2 => "--beta2",
        Setting::Eps => "--eps",
        Setting::InitScale => "--init-scale",
        Setting::GrowthFactor => "--growth-factor",
        Setting::BackoffFactor => "--backoff-factor",
        Setting::GrowthInterval => "--growth-interval",
        Setting::WarmupSteps => "--warmup-steps",
        Setting::MinLr => "--min-lr",
        Setting::LrDecaySteps => "--lr-decay-steps",
        Setting::MaxSkippedSteps => "--max-skipped-steps",
    }
}

/// Help and version go to stdout as clap prints them; a bad flag or value becomes one
/// `error:` line (clap's first line, which names the flag and the problem) and exit code 2.
fn argument_error(e: clap::Error) -> std::process::ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        let _ = e.print();
        return std::process::ExitCode::from(if e.use_stderr() { 2 } else { 0 });
    }
    let text = e.to_string();
    let first = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("invalid arguments");
    let first = first.strip_prefix("error: ").unwrap_or(first);
    error_line(&format!("{first} (see --help)"));
    std::process::ExitCode::from(2)
}

/// The one `error:` line on stderr (`eprintln!` would panic on a closed stderr).
fn error_line(message: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "error: {message}");
}

/// Mesa's Vulkan and GL drivers print "error: XDG_RUNTIME_DIR is invalid or not set" on
/// stderr when it is unset (a cron job, `env -i`, a container), although nothing here needs
/// it: point it at a private folder of our own, so a successful command prints no error.
#[cfg(target_os = "linux")]
fn ensure_runtime_dir() {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    if std::env::var_os("XDG_RUNTIME_DIR").is_some_and(|d| std::path::Path::new(&d).is_dir()) {
        return;
    }
    // SAFETY: getuid(2) cannot fail.
    let uid = unsafe { libc::getuid() };
    let dir = std::env::temp_dir().join(format!("webgpu-amp-runtime-{uid}"));
    let _ = std::fs::DirBuilder::new().mode(0o700).create(&dir);
    // Ours alone (a folder another user made there is not used).
    let ours = dir
        .symlink_metadata()
        .is_ok_and(|m| m.is_dir() && m.uid() == uid && m.mode() & 0o077 == 0);
    if ours {
        // SAFETY: the first thing main does, before any other thread exists.
        unsafe { std::env::set_var("XDG_RUNTIME_DIR", &dir) };
    }
}
