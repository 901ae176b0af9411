//! The save test hook: a deterministic pause between a checkpoint's write and its rename.

#[cfg(not(target_arch = "wasm32"))]
use crate::error::{Error, Result};

/// The environment variable of the save test hook (see [`pause_before_rename`]).
pub const SAVE_PAUSE_ENV: &str = "WEBGPU_AMP_TEST_SAVE_PAUSE";

/// Test hook for `tests/kill_during_save.rs`, so that a kill lands inside a save every
/// time, not by luck: with `WEBGPU_AMP_TEST_SAVE_PAUSE=N:MARKER`, this process's `N`-th save
/// (1-based) stops after its temp file is written and synced and before the rename, writes
/// the temp file's path to `MARKER`, and sleeps (up to two minutes, then goes on) for the
/// test to kill it. Unset, as everywhere but that test, saves never pause.
#[cfg(not(target_arch = "wasm32"))]
pub(super) fn pause_before_rename(tmp: &std::path::Path) -> Result<()> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SAVES: AtomicU64 = AtomicU64::new(0);
    let Some(hook) = std::env::var_os(SAVE_PAUSE_ENV) else {
        return Ok(());
    };
    let save = SAVES.fetch_add(1, Ordering::Relaxed) + 1;
    let hook = hook.to_string_lossy();
    let (n, marker) = hook
        .split_once(':')
        .and_then(|(n, m)| Some((n.parse::<u64>().ok()?, m)))
        .filter(|(_, m)| !m.is_empty())
        .ok_or_else(|| {
            Error::InvalidArgument(format!("{SAVE_PAUSE_ENV}={hook}: expected N:MARKER_PATH"))
        })?;
    if save != n {
        return Ok(());
    }
    // Written whole, then renamed: the test never reads a partial marker.
    let part = format!("{marker}.part");
    std::fs::write(&part, tmp.display().to_string())
        .and_then(|()| std::fs::rename(&part, marker))
        .map_err(|e| Error::InvalidArgument(format!("{SAVE_PAUSE_ENV}: {marker}: {e}")))?;
    std::thread::sleep(std::time::Duration::from_secs(120));
    Ok(())
}
