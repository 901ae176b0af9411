//! SIGINT and SIGTERM (Ctrl-C, `kill`, a job scheduler ending a job), the one handler of the
//! process. The first signal only records itself: the handler is one atomic swap, which is
//! async-signal-safe, and whoever asked for it looks at [`received`] at safe points (the
//! training loop after each optimizer step, `bench` between measurements, MPI rank 0's
//! watcher thread). A second signal ends the process at once from the handler (`_exit`,
//! which is async-signal-safe too), so a run that is slow to stop can always be ended.
//!
//! Unix only. Elsewhere (Windows, the browser) nothing is installed, [`received`] stays
//! `None`, and Ctrl-C keeps its default: the process ends.

use std::sync::atomic::{AtomicI32, Ordering};

/// The exit code of a run stopped by a signal, gracefully or by a second signal (the shell's
/// 128 + SIGINT).
pub const EXIT_CODE: u8 = 130;

/// The signal received first (0: none yet).
static RECEIVED: AtomicI32 = AtomicI32::new(0);

/// A signal the handler records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    Int,
    Term,
}

impl Signal {
    /// The signal's usual name (`SIGINT`).
    pub fn name(self) -> &'static str {
        match self {
            Signal::Int => "SIGINT",
            Signal::Term => "SIGTERM",
        }
    }

    /// `INT` or `TERM` (as `kill -s` takes them), or the full name.
    pub fn parse(s: &str) -> Option<Signal> {
        match s.trim().trim_start_matches("SIG") {
            "INT" => Some(Signal::Int),
            "TERM" => Some(Signal::Term),
            _ => None,
        }
    }

    #[cfg(unix)]
    fn number(self) -> libc::c_int {
        match self {
            Signal::Int => libc::SIGINT,
            Signal::Term => libc::SIGTERM,
        }
    }

    #[cfg(unix)]
    fn from_number(n: i32) -> Option<Signal> {
        [Signal::Int, Signal::Term]
            .into_iter()
            .find(|s| s.number() == n)
    }
}

/// The first SIGINT or SIGTERM this process received since [`install`], if any.
pub fn received() -> Option<Signal> {
    #[cfg(unix)]
    {
        Signal::from_number(RECEIVED.load(Ordering::Acquire))
    }
    #[cfg(not(unix))]
    {
        let _ = RECEIVED.load(Ordering::Acquire);
        None
    }
}

/// Whether a signal was received (for [`crate::train::RunConfig`]'s stop check).
pub fn requested() -> bool {
    received().is_some()
}

#[cfg(unix)]
extern "C" fn on_signal(signal: libc::c_int) {
    // The only work of the handler: one atomic swap. A second signal finds the first one
    // recorded and ends the process now.
    if RECEIVED.swap(signal, Ordering::AcqRel) != 0 {
        // SAFETY: `_exit` is async-signal-safe; it runs no exit handlers.
        unsafe { libc::_exit(EXIT_CODE as libc::c_int) }
    }
}

/// Catch SIGINT and SIGTERM from now on (see the module docs). Whether the handler is in
/// place (false where signals are not handled, or if the system refused).
pub fn install() -> bool {
    #[cfg(unix)]
    {
        [Signal::Int, Signal::Term].into_iter().all(|s| {
            // SAFETY: a zeroed sigaction with a handler that only touches an atomic (and
            // `_exit`s); SA_RESTART so that system calls the signal interrupts go on.
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
                action.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut action.sa_mask);
                libc::sigaction(s.number(), &action, std::ptr::null_mut()) == 0
            }
        })
    }
    #[cfg(not(unix))]
    {
        false
    }
}

/// Send `signal` to this process, through whatever handler is installed (the test hooks of
/// `train::fault_hooks`). Unix only; elsewhere it does nothing.
pub fn raise(signal: Signal) {
    #[cfg(unix)]
    // SAFETY: raise(3) with a valid signal number.
    unsafe {
        libc::raise(signal.number());
    }
    #[cfg(not(unix))]
    let _ = signal;
}

/// `words` as one POSIX shell command line: each word as is when it is plain, else in single
/// quotes (the `--resume` commands an interrupted run prints).
pub fn command_line(words: &[String]) -> String {
    words
        .iter()
        .map(|w| shell_quote(w))
        .collect::<Vec<_>>()
        .join(" ")
}

fn shell_quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=,+@%".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_line_reads_back_word_for_word() {
        let words = ["--steps", "a b", "it's", ""].map(String::from);
        assert_eq!(command_line(&words), r"--steps 'a b' 'it'\''s' ''");
    }
}
