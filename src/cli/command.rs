//! The command line: its subcommands and the dispatch to each (apart from `mod.rs`, which
//! holds what the subcommands share, so that none reaches itself through it).

use clap::{Parser, Subcommand};

use super::{
    argument_error, bench, compare, error_line, flag_names, gui, info, kernels, plan, sample,
    selftest, shaders, tokenize, train,
};

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

pub fn main() -> std::process::ExitCode {
    #[cfg(target_os = "linux")]
    super::ensure_runtime_dir();
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
        Err(e) => {
            error_line(&flag_names(&e.to_string()));
            std::process::ExitCode::from(e.exit_code())
        }
    }
}
