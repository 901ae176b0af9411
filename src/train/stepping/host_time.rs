//! The host's time in a trainer's steps: encoding (with the batch upload), submitting, and
//! reading back (every wait for the GPU included), which every [`crate::train::Trainer`]
//! accumulates (`Trainer::host_times`) and `--profile` reports per step.

use std::time::Duration;

/// A clock for host timing that costs nothing where there is none (the web, where
/// `std::time::Instant` is unavailable: host times read zero there).
#[derive(Clone, Copy)]
pub(crate) struct Clock {
    #[cfg(not(target_arch = "wasm32"))]
    start: std::time::Instant,
}

impl Clock {
    pub(crate) fn now() -> Clock {
        Clock {
            #[cfg(not(target_arch = "wasm32"))]
            start: std::time::Instant::now(),
        }
    }

    pub(crate) fn elapsed(&self) -> Duration {
        #[cfg(not(target_arch = "wasm32"))]
        return self.start.elapsed();
        #[cfg(target_arch = "wasm32")]
        Duration::ZERO
    }
}

/// Host time spent by a trainer's steps since it was made (or reset).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct HostTimes {
    /// Optimizer steps submitted.
    pub steps: u64,
    /// Uploading the batch and recording the command buffers.
    pub encode: Duration,
    /// `queue.submit` (and starting the stats map).
    pub submit: Duration,
    /// Reading stats back: polling, and every wait for the GPU (throttle waits, `finish`).
    pub readback: Duration,
}

/// Host time per step, in milliseconds.
#[derive(Clone, Debug, serde::Serialize)]
pub struct HostProfile {
    pub steps: u64,
    pub encode_ms: f64,
    pub submit_ms: f64,
    pub readback_ms: f64,
}

impl HostTimes {
    /// Per-step means of the times since `before` was taken.
    pub fn since(&self, before: &HostTimes) -> HostProfile {
        let steps = self.steps.saturating_sub(before.steps);
        let per = |now: Duration, then: Duration| {
            1e3 * now.saturating_sub(then).as_secs_f64() / steps.max(1) as f64
        };
        HostProfile {
            steps,
            encode_ms: per(self.encode, before.encode),
            submit_ms: per(self.submit, before.submit),
            readback_ms: per(self.readback, before.readback),
        }
    }
}
