//! Subcommands of the `webgpu-amp` binary.

mod bench;
mod bench_step;
mod bench_storages;
mod bench_timer;
mod bench_tune;
mod compare;
mod distributed;
mod doctor;
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
mod tokenize;
mod train;
mod tune_workloads;

use clap::{Args, Parser, Subcommand};
use webgpu_amp::nn::AttentionKernel;
use webgpu_amp::train::Setting;
use webgpu_amp::{BackendChoice, F16StorageChoice, GpuOptions, TensorCoreChoice};

#[derive(Parser)]
#[command(
    name = "webgpu-amp",
    version,
    about = "Mixed-precision training on WebGPU"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List every adapter with its capabilities and the f16 storage training would use.
    Info(info::InfoArgs),
    /// Train a model on a data set under one precision mode.
    Train(train::TrainArgs),
    /// Generate text on the GPU from a GPT checkpoint (`train --save`).
    Sample(sample::SampleArgs),
    /// Train the same model from the same weights under f32 and AMP, side by side.
    Compare(compare::CompareArgs),
    /// Benchmarks: `bench matmul` (GFLOP/s per storage), `bench step` (ms/step per model and precision).
    Bench(bench::BenchArgs),
    /// A training step's GPU memory without running it: bytes by kind and the largest
    /// binding against the adapter's limits (the flags are `train`'s).
    Plan(plan::PlanArgs),
    /// Open the app: train f16 and f32 paths side by side with the numerics made visible.
    Gui(gui::GuiArgs),
    /// Check that this GPU computes correctly: every op family forward and backward against a
    /// CPU reference, in f32, f16 and bf16.
    Selftest(selftest::SelftestArgs),
    /// The token ids of a text under a Hugging Face tokenizer.json, as a JSON array.
    Tokenize(tokenize::TokenizeArgs),
    /// Every WGSL variant with its entry points' bind-group layouts, as JSON (for shader
    /// compilers other than naga: scripts/tint-check.sh).
    #[command(hide = true)]
    Shaders(shaders::ShadersArgs),
    /// The kernels a training step (or a GEMM) plans on this adapter, as SPIR-V for real GPU
    /// compilers, one JSON line each (scripts/kernel-report.sh).
    #[command(hide = true)]
    Kernels(kernels::KernelsArgs),
}

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

pub fn main() -> std::process::ExitCode {
    #[cfg(target_os = "linux")]
    ensure_runtime_dir();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return argument_error(e),
    };
    let result = match cli.command {
        Command::Info(a) => info::run(&a),
        Command::Train(a) => train::run(&a),
        Command::Sample(a) => sample::run(&a),
        Command::Compare(a) => compare::run(&a),
        Command::Bench(a) => bench::run(&a),
        Command::Plan(a) => plan::run(&a),
        Command::Gui(a) => gui::run(&a),
        Command::Selftest(a) => selftest::run(&a),
        Command::Shaders(a) => shaders::run(&a),
        Command::Kernels(a) => kernels::run(&a),
        Command::Tokenize(a) => tokenize::run(&a),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // SIGINT or SIGTERM: the line says where it stopped (not an error).
        Err(webgpu_amp::Error::Interrupted(line)) => {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "{line}");
            std::process::ExitCode::from(webgpu_amp::interrupt::EXIT_CODE)
        }
        // The reader of stdout went away (`| head`): stop quietly, as a CLI does.
        Err(_) if out::closed() => std::process::ExitCode::SUCCESS,
        Err(e) => {
            error_line(&flag_names(&e.to_string()));
            std::process::ExitCode::from(e.exit_code())
        }
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
