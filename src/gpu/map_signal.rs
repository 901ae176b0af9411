//! A buffer map's outcome, handed to whichever thread waits for it.
//!
//! wgpu runs a `map_async` callback inside the device poll that collected it, in that poll's
//! thread. When several threads share one device (parallel tests, the app beside egui), one
//! thread's `poll(Wait { submission })` can return after another thread's poll has collected
//! this map's callback but before that thread has fired it: the submission is done and the
//! map has not landed yet. Reading the map's state right after the poll then misses a map
//! that is about to land: a step's stats were left in flight at the end of a run (a lost step
//! in the history), or a wait reported "a read-back did not land". So a wait here blocks on
//! the callback itself (a mutex and a condition variable), not on the poll alone.
//!
//! Test hook: with `WEBGPU_AMP_TEST_LATE_MAPS_MS=N`, every map's outcome is delivered `N` ms
//! after its callback ran, from another thread: the window above, made wide and certain.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};

#[cfg(not(target_arch = "wasm32"))]
use super::GpuContext;
#[cfg(not(target_arch = "wasm32"))]
use crate::error::{Error, Result};

/// The test hook's environment variable (see the module docs).
pub const LATE_MAPS_ENV: &str = "WEBGPU_AMP_TEST_LATE_MAPS_MS";

/// Where a mapped buffer stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapState {
    /// Not mapped, not asked to be.
    Free,
    /// `map_async` asked; its callback has not delivered an outcome yet.
    Pending,
    /// Mapped: the bytes can be read.
    Ready,
    /// The map failed (a lost device, a destroyed buffer): it will never be ready.
    Failed,
}

/// One buffer's map outcome. See the module docs.
pub struct MapSignal {
    state: Mutex<MapState>,
    landed: Condvar,
}

impl MapSignal {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(MapState::Free),
            landed: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, MapState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn state(&self) -> MapState {
        *self.lock()
    }

    /// Back to [`MapState::Free`] (after the caller unmapped the buffer).
    pub fn free(&self) {
        *self.lock() = MapState::Free;
    }

    /// Ask for `buffer` to be mapped for reading; its callback delivers the outcome here.
    pub fn map_read(self: &Arc<Self>, buffer: &wgpu::Buffer) {
        *self.lock() = MapState::Pending;
        let signal = self.clone();
        buffer
            .slice(..)
            .map_async(wgpu::MapMode::Read, move |outcome| {
                signal.deliver(outcome.is_ok())
            });
    }

    fn deliver(self: Arc<Self>, ok: bool) {
        #[cfg(not(target_arch = "wasm32"))]
        if let Some(delay) = late_maps() {
            std::thread::spawn(move || {
                std::thread::sleep(delay);
                self.land(ok);
            });
            return;
        }
        self.land(ok);
    }

    fn land(&self, ok: bool) {
        *self.lock() = if ok {
            MapState::Ready
        } else {
            MapState::Failed
        };
        self.landed.notify_all();
    }

    /// Block until the map has landed: poll the device until `submission` (the one that
    /// wrote the buffer; `None`: everything submitted) is done, then wait for the callback,
    /// whichever thread runs it. `Ok` once the bytes can be read; the device loss or the
    /// failed map otherwise. Counts no host wait: the caller does.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn wait(&self, ctx: &GpuContext, submission: Option<wgpu::SubmissionIndex>) -> Result<()> {
        use std::time::{Duration, Instant};
        // A map whose submission has finished lands within moments (its callback is being
        // fired); this bound only turns a wgpu bug into an error instead of a hang.
        const LAND_WITHIN: Duration = Duration::from_secs(120);
        if self.state() == MapState::Pending {
            ctx.device
                .poll(wgpu::PollType::Wait {
                    submission_index: submission,
                    timeout: None,
                })
                .map_err(|e| ctx.poll_error(e))?;
        }
        let start = Instant::now();
        let mut state = self.lock();
        while *state == MapState::Pending && start.elapsed() < LAND_WITHIN {
            state = self
                .landed
                .wait_timeout(state, Duration::from_millis(5))
                .unwrap_or_else(|e| e.into_inner())
                .0;
            if *state == MapState::Pending {
                // Our own poll may be the one that has to fire it.
                drop(state);
                ctx.poll_ready();
                state = self.lock();
            }
        }
        match *state {
            MapState::Ready => Ok(()),
            MapState::Pending => Err(Error::Gpu(format!(
                "a read-back did not land within {} s after its submission finished",
                LAND_WITHIN.as_secs()
            ))),
            MapState::Free | MapState::Failed => Err(match ctx.device_lost() {
                Some(reason) => Error::DeviceLost(reason),
                None => Error::Gpu("a read-back's buffer map failed".into()),
            }),
        }
    }
}

/// The hook's delay, read once per process.
#[cfg(not(target_arch = "wasm32"))]
fn late_maps() -> Option<std::time::Duration> {
    static DELAY: std::sync::OnceLock<Option<std::time::Duration>> = std::sync::OnceLock::new();
    *DELAY.get_or_init(|| {
        let ms: u64 = std::env::var(LATE_MAPS_ENV).ok()?.trim().parse().ok()?;
        (ms > 0).then(|| std::time::Duration::from_millis(ms))
    })
}
