//! Test hooks that make a fault happen while a chosen optimizer step is in flight (right
//! after its first micro-batch is submitted), so that tests of what follows are
//! deterministic, not timing luck:
//!
//! - `WEBGPU_AMP_TEST_SIGNAL_AT_STEP=N[:INT|TERM]` raises SIGINT (or SIGTERM) in this
//!   process, through its real handler ([`crate::interrupt`]);
//! - `WEBGPU_AMP_TEST_LOSE_DEVICE_AT_STEP=N` destroys the GPU device, which is what a driver
//!   reset or a removed GPU looks like to wgpu (the browser's page takes `lose_device_at=N`
//!   in its query instead);
//! - `WEBGPU_AMP_TEST_GPU_ERROR_AT_STEP=N` makes an uncaptured GPU validation error (a buffer
//!   with usages WebGPU forbids together), as a driver or wgpu bug would.
//!
//! Unset, as everywhere but those tests, nothing happens. `N` counts the run's optimizer
//! steps from the start of training (a resumed run's steps included).

use crate::error::Result;
use crate::gpu::GpuContext;
use crate::interrupt::Signal;

/// The environment variable of the signal hook.
pub const SIGNAL_AT_STEP_ENV: &str = "WEBGPU_AMP_TEST_SIGNAL_AT_STEP";
/// The environment variable of the device-loss hook.
pub const LOSE_DEVICE_AT_STEP_ENV: &str = "WEBGPU_AMP_TEST_LOSE_DEVICE_AT_STEP";
/// The environment variable of the GPU-error hook.
pub const GPU_ERROR_AT_STEP_ENV: &str = "WEBGPU_AMP_TEST_GPU_ERROR_AT_STEP";

/// Which faults to cause, and after which step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultHooks {
    /// Raise this signal in this process once step N is in flight (native, unix).
    pub signal_at: Option<(u64, Signal)>,
    /// Destroy the device once step N is in flight.
    pub lose_device_at: Option<u64>,
    /// Make an uncaptured GPU error once step N is in flight.
    pub gpu_error_at: Option<u64>,
}

impl FaultHooks {
    /// The hooks this process's environment asks for (none in the browser).
    pub fn from_env() -> Result<Self> {
        #[cfg(target_arch = "wasm32")]
        {
            Ok(Self::default())
        }
        #[cfg(not(target_arch = "wasm32"))]
        {
            let var = |key: &str| std::env::var(key).ok().filter(|v| !v.is_empty());
            let bad = |key: &str, value: &str, want: &str| {
                crate::error::Error::InvalidArgument(format!("{key}={value}: expected {want}"))
            };
            let signal_at = match var(SIGNAL_AT_STEP_ENV) {
                None => None,
                Some(v) => {
                    let (n, signal) = v.split_once(':').unwrap_or((&v, "INT"));
                    let want = "N or N:INT or N:TERM";
                    let n = n.parse().map_err(|_| bad(SIGNAL_AT_STEP_ENV, &v, want))?;
                    let signal = Signal::parse(signal).ok_or(bad(SIGNAL_AT_STEP_ENV, &v, want))?;
                    Some((n, signal))
                }
            };
            let step = |key: &str| match var(key) {
                None => Ok(None),
                Some(v) => v
                    .parse()
                    .map(Some)
                    .map_err(|_| bad(key, &v, "a step number")),
            };
            Ok(Self {
                signal_at,
                lose_device_at: step(LOSE_DEVICE_AT_STEP_ENV)?,
                gpu_error_at: step(GPU_ERROR_AT_STEP_ENV)?,
            })
        }
    }

    /// Cause what is due now that optimizer step `step` has its first micro-batch submitted
    /// (with gradient accumulation, the rest of the step is still to come).
    pub(in crate::train) fn step_started(&self, ctx: &GpuContext, step: u64) {
        if let Some((at, signal)) = self.signal_at
            && at == step
        {
            crate::interrupt::raise(signal);
        }
        if self.lose_device_at == Some(step) {
            ctx.destroy_device();
            // wgpu reports the loss once the work in flight is done: wait for it, so the run
            // sees the loss at this step (a driver's loss shows at the run's next check).
            let _ = ctx.device.poll(wgpu::PollType::wait_indefinitely());
        }
        if self.gpu_error_at == Some(step) {
            // MAP_READ goes with COPY_DST only: a validation error, outside any error scope.
            let _ = ctx.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("test hook: invalid buffer"),
                size: 4,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::STORAGE,
                mapped_at_creation: false,
            });
        }
    }
}
