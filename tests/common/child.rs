//! Waiting on a process a test started, without hanging on it.

use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// Polls `done` every 5 ms while `child` runs; fails when `child` exits first or `limit`
/// passes (`what`: what is waited for, for the failure).
#[track_caller]
pub fn wait_while_running(
    child: &mut Child,
    limit: Duration,
    what: &str,
    mut done: impl FnMut() -> bool,
) {
    let started = Instant::now();
    while !done() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the process exited ({status}) before {what}");
        }
        assert!(started.elapsed() < limit, "no {what} within {limit:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits up to `limit` for `child` to end and returns how it ended; one still running then
/// is killed and the test fails (`what` names the wait).
#[track_caller]
pub fn wait_for_exit(child: &mut Child, limit: Duration, what: &str) -> ExitStatus {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            panic!("{what}: the process did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
