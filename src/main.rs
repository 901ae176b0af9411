//! The `webgpu-amp` command line. All logic lives in the library; this only parses
//! arguments, runs a subcommand and turns errors into one line and a non-zero exit.

#[cfg(not(target_arch = "wasm32"))]
mod cli;

#[cfg(not(target_arch = "wasm32"))]
fn main() -> std::process::ExitCode {
    cli::main()
}

#[cfg(target_arch = "wasm32")]
fn main() {}
