//! What the commands do on SIGINT or SIGTERM ([`webgpu_amp::interrupt`]): `train` finishes
//! the step in flight, saves, writes its metrics and prints how to resume; `compare`,
//! `bench`, `sample` and `selftest` stop where they are. Each ends with one line and exit code 130
//! ([`Error::Interrupted`]); a second signal ends the process at once.

use std::path::{Path, PathBuf};

use webgpu_amp::interrupt::{self, Signal};
use webgpu_amp::train::Interrupt;
use webgpu_amp::{Error, Result};

/// Where an interrupted `train` without `--save` writes its checkpoint: beside the metrics
/// file, or in the working directory.
pub const FALLBACK_NAME: &str = "interrupted.safetensors";

/// Catch SIGINT and SIGTERM from now on; the run's interrupt setting (`save_to` for `train`,
/// none for `compare`), or `None` where signals are not handled (Windows: Ctrl-C ends the
/// process as before).
pub fn catch(save_to: Option<PathBuf>) -> Option<Interrupt> {
    interrupt::install().then_some(Interrupt {
        requested: interrupt::requested,
        save_to,
    })
}

/// `interrupted.safetensors` beside `metrics`, or in the working directory.
pub fn fallback_path(metrics: Option<&Path>) -> PathBuf {
    match metrics.and_then(Path::parent) {
        Some(dir) if !dir.as_os_str().is_empty() => dir.join(FALLBACK_NAME),
        _ => PathBuf::from(FALLBACK_NAME),
    }
}

/// The signal received, in words (`SIGINT`).
pub fn signal_name() -> &'static str {
    interrupt::received().map_or("a signal", Signal::name)
}

/// [`Error::Interrupted`] with `what` (the one line) when a signal has arrived.
pub fn check(what: impl FnOnce() -> String) -> Result<()> {
    match interrupt::received() {
        Some(_) => Err(Error::Interrupted(what())),
        None => Ok(()),
    }
}

/// Flags a resumed run takes from its checkpoint, which `train` refuses beside `--resume`:
/// the weights (`--init`) and the GradScaler's starting scale (`--init-scale`).
const RESUME_REPLACES: [&str; 3] = ["--resume", "--init", "--init-scale"];

/// This command line again, with `--resume checkpoint` in place of any `--resume` it had and
/// without the flags the checkpoint replaces.
pub fn resume_command(checkpoint: &Path) -> String {
    let mut args: Vec<String> = Vec::new();
    let mut given = std::env::args();
    while let Some(arg) = given.next() {
        let flag = arg.split('=').next().unwrap_or_default();
        if RESUME_REPLACES.contains(&arg.as_str()) {
            given.next();
        } else if !(arg.contains('=') && RESUME_REPLACES.contains(&flag)) {
            args.push(arg);
        }
    }
    args.push("--resume".into());
    args.push(checkpoint.display().to_string());
    interrupt::command_line(&args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fallback_sits_beside_the_metrics_file() {
        assert_eq!(
            fallback_path(Some(Path::new("runs/m.jsonl"))),
            Path::new("runs").join(FALLBACK_NAME)
        );
        assert_eq!(
            fallback_path(Some(Path::new("m.jsonl"))),
            Path::new(FALLBACK_NAME)
        );
        assert_eq!(fallback_path(None), Path::new(FALLBACK_NAME));
    }
}
