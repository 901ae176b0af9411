//! The disk-full test hook: a deterministic "no space left on device" inside a save.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};

/// The environment variable of the disk-full test hook (see [`fault_for_next_write`]).
pub const DISK_FULL_ENV: &str = "WEBGPU_AMP_TEST_DISK_FULL";

/// Where the hook makes an atomic write fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Fault {
    /// The write stops with "no space left" after this many bytes (0: at the first byte).
    AtByte(u64),
    /// The bytes are written and synced, then the rename fails with "no space left".
    Rename,
}

/// Test hook for `tests/disk_full.rs`: with `WEBGPU_AMP_TEST_DISK_FULL=W:N`, this process's
/// `W`-th atomic file write (1-based, counting moments files and checkpoints alike: a save
/// with a moments file is two writes, the moments file first) fails as a full disk does,
/// after writing `N` bytes of its temp file; with `W:rename` its rename fails instead.
/// Unset, as everywhere but those tests, writes are never failed. Each call counts one write.
pub(super) fn fault_for_next_write() -> Result<Option<Fault>> {
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let Some(hook) = std::env::var_os(DISK_FULL_ENV) else {
        return Ok(None);
    };
    let hook = hook.to_string_lossy();
    let bad = || {
        Error::InvalidArgument(format!(
            "{DISK_FULL_ENV}={hook}: expected W:BYTES or W:rename"
        ))
    };
    let (w, at) = hook.split_once(':').ok_or_else(bad)?;
    let w: u64 = w.parse().map_err(|_| bad())?;
    let fault = match at {
        "rename" => Fault::Rename,
        n => Fault::AtByte(n.parse().map_err(|_| bad())?),
    };
    let write = WRITES.fetch_add(1, Ordering::Relaxed) + 1;
    Ok((write == w).then_some(fault))
}

/// The error a full disk gives (what the hook returns).
pub(super) fn no_space() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::StorageFull,
        format!("No space left on device (test hook {DISK_FULL_ENV})"),
    )
}
