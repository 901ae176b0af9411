//! Faults: GPU errors that arrive outside any error scope, and device loss. wgpu's default
//! handler panics; ours records, and [`Faults::check`] (`GpuContext::check`) turns the record
//! into an [`Error`] at safe points (after planning, after a step's submit, on readbacks).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};

#[derive(Default)]
pub(super) struct Faults {
    /// Set when anything is recorded, so the per-step check is one atomic load.
    any: AtomicBool,
    errors: Mutex<Vec<String>>,
    lost: Mutex<Option<String>>,
    /// The loss was `Device::destroy` in this process (a test hook), not the driver's.
    destroyed: AtomicBool,
}

impl Faults {
    /// Errors kept per check; later ones are usually consequences of the first.
    const KEEP: usize = 4;

    /// Record uncaptured GPU errors and device loss of `device` instead of panicking.
    pub(super) fn install(device: &wgpu::Device) -> Arc<Faults> {
        let faults = Arc::new(Faults::default());
        let on_error = faults.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            on_error.record_error(one_line(&e.to_string()));
        }));
        let on_lost = faults.clone();
        device.set_device_lost_callback(move |reason, message| {
            let message = one_line(&message);
            on_lost.record_lost(if message.is_empty() {
                format!("{reason:?}")
            } else {
                format!("{reason:?}: {message}")
            });
        });
        faults
    }

    fn record_error(&self, message: String) {
        let mut errors = self.errors.lock().unwrap_or_else(|e| e.into_inner());
        if errors.len() < Self::KEEP {
            errors.push(message);
        }
        self.any.store(true, Ordering::Release);
    }

    fn record_lost(&self, message: String) {
        let mut lost = self.lost.lock().unwrap_or_else(|e| e.into_inner());
        lost.get_or_insert(message);
        self.any.store(true, Ordering::Release);
    }
}

/// wgpu's error texts span lines; the CLI prints errors as one.
fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl Faults {
    /// Turns a recorded device loss or uncaptured GPU error into an error (and forgets the
    /// errors, so each is reported once; a loss is reported every time). Cheap when nothing
    /// happened: one atomic load. Call it at safe points: after planning, after submits.
    pub(super) fn check(&self) -> Result<()> {
        if !self.any.load(Ordering::Acquire) {
            return Ok(());
        }
        if let Some(reason) = self.device_lost() {
            return Err(Error::DeviceLost(reason));
        }
        let errors = std::mem::take(&mut *self.errors.lock().unwrap_or_else(|e| e.into_inner()));
        self.any.store(false, Ordering::Release);
        match errors.first() {
            None => Ok(()),
            Some(first) if errors.len() == 1 => Err(Error::Gpu(first.clone())),
            Some(first) => Err(Error::Gpu(format!(
                "{first} (and {} more error(s))",
                errors.len() - 1
            ))),
        }
    }

    /// Forgets recorded GPU errors (not a device loss): for when an error already returned
    /// explains them, e.g. the invalid buffer behind a limit error.
    pub(super) fn clear_errors(&self) {
        self.errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        if self.device_lost().is_none() {
            self.any.store(false, Ordering::Release);
        }
    }

    /// Why the device was lost, if it was.
    pub(super) fn device_lost(&self) -> Option<String> {
        self.lost.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Whether the loss was `Device::destroy` in this process.
    /// Note that this process is about to call `Device::destroy` itself (a test hook). The
    /// loss's reason cannot tell: a browser that takes the device from a canvas reports
    /// `Destroyed` too.
    pub(super) fn mark_destroyed(&self) {
        self.destroyed.store(true, Ordering::Release);
    }

    pub(super) fn device_destroyed(&self) -> bool {
        self.destroyed.load(Ordering::Acquire)
    }

    /// A failed poll: the device loss behind it when there is one.
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))]
    pub(super) fn poll_error(&self, e: wgpu::PollError) -> Error {
        match self.device_lost() {
            Some(reason) => Error::DeviceLost(reason),
            None => Error::Gpu(e.to_string()),
        }
    }
}
