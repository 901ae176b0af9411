//! Standard output for the CLI. `println!` panics when the reader has gone
//! (`webgpu-amp selftest | head -1`: a broken pipe); here a closed pipe silences the output
//! and is remembered, and the command goes on to its own outcome: a closed stdout never
//! turns a failure into success (nor a success into a failure). Other write errors (a full
//! disk) come back as errors. Commands whose output is all they make (`sample`) may stop
//! early once it is closed ([`closed`]).

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

use webgpu_amp::{Error, Result};

static CLOSED: AtomicBool = AtomicBool::new(false);

/// Whether a write found stdout closed (a broken pipe).
pub fn closed() -> bool {
    CLOSED.load(Ordering::Relaxed)
}

/// Write formatted text (and a newline when `newline`) to stdout; nothing once it is closed.
pub fn write(args: std::fmt::Arguments<'_>, newline: bool) -> Result<()> {
    if closed() {
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    let written = out.write_fmt(args).and_then(|()| {
        if newline {
            out.write_all(b"\n")
        } else {
            Ok(())
        }
    });
    match written {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            CLOSED.store(true, Ordering::Relaxed);
            Ok(())
        }
        written => written.map_err(|e| write_error(e, "writing to standard output")),
    }
}

/// The error of a failed write to stdout (`doing` says what was written); a broken pipe
/// is remembered ([`closed`]).
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
