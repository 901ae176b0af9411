//! Standard output for the CLI. `println!` panics when the reader has gone
//! (`webgpu-amp bench matmul --json | head`: a broken pipe); here a write error comes back
//! as an error instead, and a closed pipe is remembered so that `main` ends the command
//! quietly, as a command-line tool does when its reader stops reading. Commands write their
//! files before their last lines, so a closed pipe never costs a report or a checkpoint.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

use webgpu_amp::{Error, Result};

static CLOSED: AtomicBool = AtomicBool::new(false);

/// Whether a write found stdout closed (a broken pipe).
pub fn closed() -> bool {
    CLOSED.load(Ordering::Relaxed)
}

/// Write formatted text (and a newline when `newline`) to stdout.
pub fn write(args: std::fmt::Arguments<'_>, newline: bool) -> Result<()> {
    let mut out = std::io::stdout().lock();
    let written = out.write_fmt(args).and_then(|()| {
        if newline {
            out.write_all(b"\n")
        } else {
            Ok(())
        }
    });
    written.map_err(|e| write_error(e, "writing to standard output"))
}

/// The error of a failed write to stdout (`doing` says what was written); a broken pipe
/// is remembered, so that `main` ends the command quietly.
pub fn write_error(e: std::io::Error, doing: &str) -> Error {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        CLOSED.store(true, Ordering::Relaxed);
    }
    Error::Output(format!("{doing}: {e}"))
}

/// `println!` that returns a write error instead of panicking: `outln!(...)?`.
macro_rules! outln {
    () => {
        $crate::cli::out::write(format_args!(""), true)
    };
    ($($arg:tt)*) => {
        $crate::cli::out::write(format_args!($($arg)*), true)
    };
}

/// `print!` that returns a write error instead of panicking: `out!(...)?`.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::out::write(format_args!($($arg)*), false)
    };
}

pub(crate) use {out, outln};
